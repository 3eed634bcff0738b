//! The IoT-CryptoDiet node-to-node scheme (`iot-cryptodiet.md` §5.2-5.3), sans-IO and `no_std`,
//! so its cost can be set beside signed objects and DTLS with the same code paths measured.
//!
//! Two nodes, no server: each generates an ECDH key pair and an ECDSA key pair, they exchange
//! the public halves ([`Node::hello`], [`Node::handle_hello`]), both derive a shared key, and
//! then every message is encrypted with the shared key and signed by the sender
//! ([`Node::seal`], [`Node::open`]).
//!
//! Where the seed's choices are now known to be weak, this version keeps the shape and the
//! costs but takes the modern choice, and says so:
//! - the raw ECDH output is never used as a key: the key is HMAC-SHA-256 (HKDF-extract) of it,
//!   salted with both hellos, truncated to 128 bits;
//! - AES-128-CCM-8 (authenticated) replaces the seed's bare AES;
//! - freshness comes from a sequence number that must increase (a 64-entry window for
//!   reordering), not from remembering random numbers R1; the signature covers
//!   `H(seq || ciphertext)` where the seed signed `H(c || R1)`;
//! - the peer's signing key must be trusted by the caller (for Sigil: it hashes to a
//!   provisioned identity, RFC 8387 §4), and the hello is signed with it, binding the ECDH key
//!   to the identity; the seed trusted whatever key arrived.
//!
//! Wire formats (all P-256, uncompressed points):
//! - hello: `0x01 || ecdh_pub(65) || sig_pub(65) || sig(64)` over `ecdh_pub || sig_pub` — 195 B
//! - data: `0x02 || seq(4) || ciphertext(len) || tag(8) || sig(64)` — 77 + len B
#![no_std]
#![forbid(unsafe_code)]

use sigil_crypto::{
    AgreementAlgorithm, AgreementSecret, CryptoError, CryptoProvider, PublicKey, Rng, SecretKey,
    SignatureAlgorithm,
};

pub const HELLO: u8 = 0x01;
pub const DATA: u8 = 0x02;
const POINT: usize = 65;
const SIG: usize = 64;
const TAG: usize = 8;
pub const HELLO_LEN: usize = 1 + POINT + POINT + SIG;
/// Bytes a data message adds to its plaintext.
pub const DATA_OVERHEAD: usize = 1 + 4 + TAG + SIG;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Too short, too long, or the wrong type byte.
    Malformed,
    /// The hello's signing key is not one the caller trusts.
    Untrusted,
    /// A signature does not verify.
    BadSignature,
    /// The ciphertext does not authenticate.
    BadTag,
    /// Data before the peer's hello.
    NoSession,
    /// The sequence number was seen already, or is too old for the window.
    Replay,
    /// The output buffer is too small.
    BufferTooSmall,
    /// The send counter is exhausted (2^32 messages): exchange hellos again.
    Exhausted,
    Crypto(CryptoError),
}

impl From<CryptoError> for Error {
    fn from(e: CryptoError) -> Self {
        match e {
            CryptoError::BadSignature => Error::BadSignature,
            CryptoError::BadTag => Error::BadTag,
            e => Error::Crypto(e),
        }
    }
}

struct Session {
    key: [u8; 16],
    peer_sig: PublicKey,
    /// Highest sequence number accepted, and a bitmap of the 64 below it.
    highest: Option<u32>,
    window: u64,
}

/// One node of the scheme.
pub struct Node<C> {
    crypto: C,
    ecdh: AgreementSecret,
    ecdh_pub: [u8; POINT],
    sig: SecretKey,
    sig_pub: [u8; POINT],
    session: Option<Session>,
    next_seq: u32,
}

fn nonce(seq: u32, sender: &[u8]) -> [u8; 12] {
    // Unique per key and direction: bytes of the sender's signing key pick the direction.
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&sender[1..9]);
    n[8..].copy_from_slice(&seq.to_be_bytes());
    n
}

impl<C: CryptoProvider> Node<C> {
    /// Generates both key pairs (the seed's `ECC_GenKeyPair`, twice).
    pub fn new(crypto: C, rng: &mut dyn Rng) -> Result<Self, Error> {
        let ecdh = crypto.generate_agreement(AgreementAlgorithm::P256, rng)?;
        let ep = crypto.agreement_public_key(&ecdh)?;
        let sig = crypto.generate(SignatureAlgorithm::EcdsaP256, rng)?;
        let sp = crypto.public_key(&sig)?;
        let mut ecdh_pub = [0u8; POINT];
        let mut sig_pub = [0u8; POINT];
        if ep.as_bytes().len() != POINT || sp.as_bytes().len() != POINT {
            return Err(Error::Crypto(CryptoError::KeyLength));
        }
        ecdh_pub.copy_from_slice(ep.as_bytes());
        sig_pub.copy_from_slice(sp.as_bytes());
        Ok(Self {
            crypto,
            ecdh,
            ecdh_pub,
            sig,
            sig_pub,
            session: None,
            next_seq: 0,
        })
    }

    /// This node's signing key (what the peer must trust).
    pub fn signing_key(&self) -> PublicKey {
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &self.sig_pub)
            .expect("own key is well-formed")
    }

    pub fn has_session(&self) -> bool {
        self.session.is_some()
    }

    /// Writes this node's hello into `out`.
    pub fn hello(&self, out: &mut [u8]) -> Result<usize, Error> {
        if out.len() < HELLO_LEN {
            return Err(Error::BufferTooSmall);
        }
        out[0] = HELLO;
        out[1..1 + POINT].copy_from_slice(&self.ecdh_pub);
        out[1 + POINT..1 + 2 * POINT].copy_from_slice(&self.sig_pub);
        let s = self.crypto.sign(&self.sig, &out[1..1 + 2 * POINT])?;
        out[1 + 2 * POINT..HELLO_LEN].copy_from_slice(&s.0);
        Ok(HELLO_LEN)
    }

    /// Takes the peer's hello: checks its signing key with `trusted` and its signature,
    /// then derives the shared key (the seed's `ECDH_GenSharedKey`). A new hello replaces the
    /// session (and resets the replay window: the key changes with it).
    pub fn handle_hello(
        &mut self,
        msg: &[u8],
        trusted: impl Fn(&PublicKey) -> bool,
    ) -> Result<(), Error> {
        if msg.len() != HELLO_LEN || msg[0] != HELLO {
            return Err(Error::Malformed);
        }
        let peer_ecdh = &msg[1..1 + POINT];
        let peer_sig = PublicKey::from_bytes(
            SignatureAlgorithm::EcdsaP256,
            &msg[1 + POINT..1 + 2 * POINT],
        )
        .map_err(|_| Error::Malformed)?;
        if !trusted(&peer_sig) {
            return Err(Error::Untrusted);
        }
        self.crypto
            .verify(&peer_sig, &msg[1..1 + 2 * POINT], &msg[1 + 2 * POINT..])?;
        let shared = self.crypto.agree(&self.ecdh, peer_ecdh)?;
        // Salt: both ECDH public values in a fixed order, so both sides agree.
        let (a, b) = if self.ecdh_pub.as_slice() < peer_ecdh {
            (self.ecdh_pub.as_slice(), peer_ecdh)
        } else {
            (peer_ecdh, self.ecdh_pub.as_slice())
        };
        let salt = self.crypto.sha256(&[b"sigil-diet v1", a, b]);
        let prk = self.crypto.hmac_sha256(&salt, &[&shared]);
        let mut key = [0u8; 16];
        key.copy_from_slice(&prk[..16]);
        self.session = Some(Session {
            key,
            peer_sig,
            highest: None,
            window: 0,
        });
        self.next_seq = 0;
        Ok(())
    }

    /// Encrypts and signs `plain` into `out` (the seed's `AES_Encrypt` + `ECDSA_sign`).
    pub fn seal(&mut self, plain: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        let s = self.session.as_ref().ok_or(Error::NoSession)?;
        let len = DATA_OVERHEAD + plain.len();
        if out.len() < len {
            return Err(Error::BufferTooSmall);
        }
        let seq = self.next_seq;
        self.next_seq = seq.checked_add(1).ok_or(Error::Exhausted)?;
        out[0] = DATA;
        out[1..5].copy_from_slice(&seq.to_be_bytes());
        let body = 5 + plain.len();
        out[5..body].copy_from_slice(plain);
        let n = nonce(seq, &self.sig_pub);
        let (head, rest) = out.split_at_mut(5);
        let tag = self
            .crypto
            .aes128_ccm8_seal(&s.key, &n, head, &mut rest[..plain.len()])?;
        out[body..body + TAG].copy_from_slice(&tag);
        let h = self.crypto.sha256(&[&out[..body + TAG]]);
        let sig = self.crypto.sign(&self.sig, &h)?;
        out[body + TAG..len].copy_from_slice(&sig.0);
        Ok(len)
    }

    /// Verifies, checks freshness and decrypts a data message into `out` (the seed's
    /// `ECDSA_verify` + `AES_Decrypt`). Nothing is accepted twice.
    pub fn open(&mut self, msg: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        if msg.len() < DATA_OVERHEAD || msg[0] != DATA {
            return Err(Error::Malformed);
        }
        let s = self.session.as_ref().ok_or(Error::NoSession)?;
        let plain_len = msg.len() - DATA_OVERHEAD;
        if out.len() < plain_len {
            return Err(Error::BufferTooSmall);
        }
        let seq = u32::from_be_bytes([msg[1], msg[2], msg[3], msg[4]]);
        if let Some(h) = s.highest {
            if seq <= h && (h - seq >= 64 || s.window & (1 << (h - seq)) != 0) {
                return Err(Error::Replay);
            }
        }
        let body = 5 + plain_len;
        let h = self.crypto.sha256(&[&msg[..body + TAG]]);
        self.crypto.verify(&s.peer_sig, &h, &msg[body + TAG..])?;
        let n = nonce(seq, s.peer_sig.as_bytes());
        out[..plain_len].copy_from_slice(&msg[5..body]);
        let mut tag = [0u8; TAG];
        tag.copy_from_slice(&msg[body..body + TAG]);
        self.crypto
            .aes128_ccm8_open(&s.key, &n, &msg[..5], &mut out[..plain_len], &tag)?;
        let s = self.session.as_mut().expect("checked above");
        match s.highest {
            Some(h) if seq <= h => s.window |= 1 << (h - seq),
            Some(h) => {
                let shift = seq - h;
                s.window = if shift >= 64 { 0 } else { s.window << shift } | 1;
                s.highest = Some(seq);
            }
            None => {
                s.highest = Some(seq);
                s.window = 1;
            }
        }
        Ok(plain_len)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use sigil_crypto::RustCrypto;
    use std::vec;

    struct Seq(u64);
    impl Rng for Seq {
        fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
            for b in buf {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *b = (self.0 >> 33) as u8;
            }
            Ok(())
        }
    }

    fn pair() -> (Node<RustCrypto>, Node<RustCrypto>) {
        let mut a = Node::new(RustCrypto, &mut Seq(1)).unwrap();
        let mut b = Node::new(RustCrypto, &mut Seq(2)).unwrap();
        let (ka, kb) = (a.signing_key(), b.signing_key());
        let mut h = [0u8; HELLO_LEN];
        let n = a.hello(&mut h).unwrap();
        assert_eq!(n, 195);
        b.handle_hello(&h, |k| *k == ka).unwrap();
        b.hello(&mut h).unwrap();
        a.handle_hello(&h, |k| *k == kb).unwrap();
        (a, b)
    }

    #[test]
    fn messages_go_both_ways_and_nothing_is_accepted_twice() {
        let (mut a, mut b) = pair();
        let mut m = [0u8; 128];
        let mut p = [0u8; 64];
        let n = a.seal(b"21.5 Cel", &mut m).unwrap();
        assert_eq!(n, 8 + DATA_OVERHEAD);
        assert_eq!(b.open(&m[..n], &mut p), Ok(8));
        assert_eq!(&p[..8], b"21.5 Cel");
        assert_eq!(b.open(&m[..n], &mut p), Err(Error::Replay));
        let k = b.seal(b"ok", &mut m).unwrap();
        assert_eq!(a.open(&m[..k], &mut p), Ok(2));
        // Reordering inside the window is fine, once.
        let mut first = [0u8; 128];
        let f = a.seal(b"1", &mut first).unwrap();
        let s = a.seal(b"2", &mut m).unwrap();
        assert_eq!(b.open(&m[..s], &mut p), Ok(1));
        assert_eq!(b.open(&first[..f], &mut p), Ok(1));
        assert_eq!(b.open(&first[..f], &mut p), Err(Error::Replay));
    }

    #[test]
    fn tampering_and_strangers_are_refused() {
        let (mut a, mut b) = pair();
        let mut m = [0u8; 128];
        let mut p = [0u8; 64];
        let n = a.seal(b"21.5", &mut m).unwrap();
        for i in [0usize, 3, 6, n - 70, n - 1] {
            let mut t = m;
            t[i] ^= 1;
            assert!(b.open(&t[..n], &mut p).is_err(), "byte {i}");
        }
        assert_eq!(b.open(&m[..10], &mut p), Err(Error::Malformed));
        let c = Node::new(RustCrypto, &mut Seq(3)).unwrap();
        let mut h = [0u8; HELLO_LEN];
        c.hello(&mut h).unwrap();
        let ka = a.signing_key();
        assert_eq!(b.handle_hello(&h, |k| *k == ka), Err(Error::Untrusted));
        // A hello whose ECDH key was swapped by a man in the middle fails its signature.
        a.hello(&mut h).unwrap();
        h[10] ^= 1;
        assert_eq!(b.handle_hello(&h, |k| *k == ka), Err(Error::BadSignature));
        let mut fresh = Node::new(RustCrypto, &mut Seq(4)).unwrap();
        assert_eq!(fresh.seal(b"x", &mut m), Err(Error::NoSession));
        let _ = vec![0u8; 1];
    }
}
