//! The TLS 1.2 key schedule with SHA-256 (RFC 5246 §5, §6.3, §7.4.9, §8.1), the PSK premaster
//! secret (RFC 4279 §2) and the extended master secret (RFC 7627 §4).

use crate::protection::{Aead, RecordKeys};
use crate::Error;
use sigil_crypto::CryptoProvider;

/// Length of the master secret.
pub const MASTER_SECRET_LEN: usize = 48;
/// Length of Finished.verify_data (RFC 5246 §7.4.9).
pub const VERIFY_DATA_LEN: usize = 12;
/// Largest pre-shared key accepted (RFC 4279 §5.3 asks for at least 64 bytes).
pub const MAX_PSK_LEN: usize = 64;

/// PRF(secret, label, seed) = P_SHA256(secret, label || seed), filling `out` (RFC 5246 §5).
/// The seed is given as parts so callers need not concatenate.
pub fn prf<C: CryptoProvider + ?Sized>(
    crypto: &C,
    secret: &[u8],
    label: &[u8],
    seed: &[&[u8]],
    out: &mut [u8],
) {
    // A(1) = HMAC(secret, label || seed); A(i) = HMAC(secret, A(i-1)).
    let mut parts: [&[u8]; 6] = [label, &[], &[], &[], &[], &[]];
    let n = 1 + seed.len().min(4);
    parts[1..n].copy_from_slice(&seed[..n - 1]);
    let mut a = crypto.hmac_sha256(secret, &parts[..n]);
    let mut at = 0;
    while at < out.len() {
        // HMAC(secret, A(i) || label || seed)
        let mut block_parts: [&[u8]; 6] = [&a, label, &[], &[], &[], &[]];
        block_parts[2..n + 1].copy_from_slice(&parts[1..n]);
        let block = crypto.hmac_sha256(secret, &block_parts[..n + 1]);
        let take = (out.len() - at).min(32);
        out[at..at + take].copy_from_slice(&block[..take]);
        at += take;
        a = crypto.hmac_sha256(secret, &[&a]);
    }
}

/// The premaster secret of plain PSK (RFC 4279 §2): `uint16 N, N zero bytes, uint16 N, psk`.
/// Returns its length in `out` (at most `4 + 2 * MAX_PSK_LEN`).
pub fn psk_premaster(psk: &[u8], out: &mut [u8; 4 + 2 * MAX_PSK_LEN]) -> Result<usize, Error> {
    if psk.is_empty() || psk.len() > MAX_PSK_LEN {
        return Err(Error::Decode("pre-shared key length"));
    }
    let n = psk.len();
    out[..2].copy_from_slice(&(n as u16).to_be_bytes());
    out[2..2 + n].fill(0);
    out[2 + n..4 + n].copy_from_slice(&(n as u16).to_be_bytes());
    out[4 + n..4 + 2 * n].copy_from_slice(psk);
    Ok(4 + 2 * n)
}

/// master_secret = PRF(premaster, "master secret", client_random || server_random).
pub fn master_secret<C: CryptoProvider + ?Sized>(
    crypto: &C,
    premaster: &[u8],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
) -> [u8; MASTER_SECRET_LEN] {
    let mut ms = [0u8; MASTER_SECRET_LEN];
    prf(
        crypto,
        premaster,
        b"master secret",
        &[client_random, server_random],
        &mut ms,
    );
    ms
}

/// master_secret = PRF(premaster, "extended master secret", session_hash) (RFC 7627 §4), where
/// session_hash is the hash of the handshake up to and including ClientKeyExchange.
pub fn extended_master_secret<C: CryptoProvider + ?Sized>(
    crypto: &C,
    premaster: &[u8],
    session_hash: &[u8; 32],
) -> [u8; MASTER_SECRET_LEN] {
    let mut ms = [0u8; MASTER_SECRET_LEN];
    prf(
        crypto,
        premaster,
        b"extended master secret",
        &[session_hash],
        &mut ms,
    );
    ms
}

/// Both directions' keys for an AES-128 AEAD suite: the key block of RFC 5246 §6.3 with no
/// MAC keys, 16-byte write keys and 4-byte implicit nonces (RFC 6655 §3, RFC 5288 §3).
pub struct KeyBlock {
    pub client: RecordKeys,
    pub server: RecordKeys,
}

/// The CCM-8 key block (see [`key_block`]).
pub fn key_block_ccm8<C: CryptoProvider + ?Sized>(
    crypto: &C,
    master: &[u8; MASTER_SECRET_LEN],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
) -> KeyBlock {
    key_block(crypto, Aead::Ccm8, master, client_random, server_random)
}

pub fn key_block<C: CryptoProvider + ?Sized>(
    crypto: &C,
    aead: Aead,
    master: &[u8; MASTER_SECRET_LEN],
    client_random: &[u8; 32],
    server_random: &[u8; 32],
) -> KeyBlock {
    let mut kb = [0u8; 40];
    prf(
        crypto,
        master,
        b"key expansion",
        &[server_random, client_random],
        &mut kb,
    );
    let mut block = KeyBlock {
        client: RecordKeys {
            aead,
            key: [0; 16],
            salt: [0; 4],
        },
        server: RecordKeys {
            aead,
            key: [0; 16],
            salt: [0; 4],
        },
    };
    block.client.key.copy_from_slice(&kb[..16]);
    block.server.key.copy_from_slice(&kb[16..32]);
    block.client.salt.copy_from_slice(&kb[32..36]);
    block.server.salt.copy_from_slice(&kb[36..40]);
    block
}

/// Which side's Finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

/// verify_data = PRF(master, "client finished" | "server finished", Hash(handshake_messages)).
pub fn verify_data<C: CryptoProvider + ?Sized>(
    crypto: &C,
    master: &[u8; MASTER_SECRET_LEN],
    side: Side,
    handshake_hash: &[u8; 32],
) -> [u8; VERIFY_DATA_LEN] {
    let label: &[u8] = match side {
        Side::Client => b"client finished",
        Side::Server => b"server finished",
    };
    let mut v = [0u8; VERIFY_DATA_LEN];
    prf(crypto, master, label, &[handshake_hash], &mut v);
    v
}
