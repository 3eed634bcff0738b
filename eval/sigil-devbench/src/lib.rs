//! The operations whose cost Sigil measures on microcontrollers (docs/device-costs.md).
//!
//! Every operation runs on fixed inputs taken from published test vectors (RFC 8032, RFC 6979,
//! RFC 7748, RFC 5903) or, for AES-CCM-8, SHA-256 and the signed reading, from
//! `vectors/device-kat.json`, and writes its output into a caller buffer. The same code runs on
//! the host (where `tests/kat.rs` checks every output against the vector file) and inside the
//! emulated Cortex-M and AVR cores (where the harness reads the output back from the target's
//! memory and checks it against the same file). So a backend or a compiler that computes a
//! wrong answer on a target is caught where it runs.
//!
//! `no_std`, no heap: what a device build links. The exception is the comparison module `rsa`
//! (feature `rsa`): the `rsa` crate allocates, so its firmware image brings a heap.
#![no_std]
#![forbid(unsafe_code)]

use sigil_crypto::{
    AgreementAlgorithm, AgreementSecret, CryptoError, CryptoProvider, PublicKey, Rng, SecretKey,
    SignatureAlgorithm,
};
use sigil_identity::Identity;
use sigil_objects::reading::sign_reading;
use sigil_objects::senml::{self, Record, Value};
use sigil_objects::{Freshness, ReadingFormat, SignedReading};

/// Largest output of any operation.
pub const MAX_OUTPUT: usize = 320;

/// A measured operation: its name (as in the vector file and the report) and its body.
pub struct Operation<C: ?Sized> {
    pub name: &'static str,
    pub run: fn(&C, &mut [u8]) -> Result<usize, Failure>,
}

/// Why an operation produced no output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Crypto(CryptoError),
    Reading,
    /// A verification that must succeed did not.
    Rejected,
}

impl From<CryptoError> for Failure {
    fn from(e: CryptoError) -> Self {
        Failure::Crypto(e)
    }
}

/// An RNG that hands out fixed bytes: the key generation operations draw a published test
/// secret through the same path a device's TRNG feeds.
struct FixedRng<'a>(&'a [u8]);

impl Rng for FixedRng<'_> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        if buf.len() > self.0.len() {
            return Err(CryptoError::Rng);
        }
        buf.copy_from_slice(&self.0[..buf.len()]);
        Ok(())
    }
}

/// RFC 8032 §7.1 TEST 1 secret key (its public key and signature are in the vector file).
pub const ED25519_SECRET: [u8; 32] =
    hex32("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
/// RFC 8032 §7.1 TEST 2 secret key and message.
pub const ED25519_SECRET_2: [u8; 32] =
    hex32("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb");
pub const ED25519_MESSAGE_2: [u8; 1] = [0x72];
/// RFC 6979 A.2.5: the P-256 private key x, and the message "sample" signed with SHA-256.
pub const P256_SECRET: [u8; 32] =
    hex32("c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721");
pub const P256_MESSAGE: &[u8] = b"sample";
/// RFC 7748 §6.1: Alice's private key and Bob's public key.
pub const X25519_ALICE: [u8; 32] =
    hex32("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
pub const X25519_BOB_PUBLIC: [u8; 32] =
    hex32("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
/// RFC 5903 §8.1: the initiator's private key i and the responder's public value g^r.
pub const P256_ECDH_I: [u8; 32] =
    hex32("c88f01f510d9ac3f70a292daa2316de544e9aab8afe84049c62a9c57862d1433");
pub const P256_ECDH_GR: [u8; 65] = {
    let x = hex32("d12dfb5289c8d4f81208b70270398c342296970a0bccb74c736fc7554494bf63");
    let y = hex32("56fbf3ca366cc23e8157854c13c58d6aac23f046ada30f8353e74f33039872ab");
    let mut p = [0u8; 65];
    p[0] = 0x04;
    let mut i = 0;
    while i < 32 {
        p[1 + i] = x[i];
        p[33 + i] = y[i];
        i += 1;
    }
    p
};
/// AES-128-CCM-8 inputs (the vector file holds outputs computed with pyca/cryptography):
/// key 00..0f, a DTLS-style 12-byte nonce and 13-byte associated data, plaintext bytes i mod 256.
pub const CCM_KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
pub const CCM_NONCE: [u8; 12] = [0xa0, 0xa1, 0xa2, 0xa3, 0, 1, 0, 0, 0, 0, 0, 7];
pub const CCM_AAD: [u8; 13] = [0, 1, 0, 0, 0, 0, 0, 7, 23, 0xfe, 0xfd, 0, 0];
/// Sequence number of the measured signed reading.
pub const READING_SEQ: u64 = 42;

const fn hex32(s: &str) -> [u8; 32] {
    let b = s.as_bytes();
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = (nibble(b[2 * i]) << 4) | nibble(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("not a lower-case hex digit"),
    }
}

fn put(out: &mut [u8], bytes: &[u8]) -> Result<usize, Failure> {
    out.get_mut(..bytes.len())
        .ok_or(Failure::Crypto(CryptoError::KeyLength))?
        .copy_from_slice(bytes);
    Ok(bytes.len())
}

fn ed25519_key(secret: &[u8; 32]) -> Result<SecretKey, Failure> {
    Ok(SecretKey::from_bytes(SignatureAlgorithm::Ed25519, secret)?)
}

fn p256_key() -> Result<SecretKey, Failure> {
    Ok(SecretKey::from_bytes(
        SignatureAlgorithm::EcdsaP256,
        &P256_SECRET,
    )?)
}

pub fn keygen_ed25519<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let sk = c.generate(SignatureAlgorithm::Ed25519, &mut FixedRng(&ED25519_SECRET))?;
    put(out, c.public_key(&sk)?.as_bytes())
}

pub fn keygen_p256<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let sk = c.generate(SignatureAlgorithm::EcdsaP256, &mut FixedRng(&P256_SECRET))?;
    put(out, c.public_key(&sk)?.as_bytes())
}

pub fn sign_ed25519<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let sig = c.sign(&ed25519_key(&ED25519_SECRET_2)?, &ED25519_MESSAGE_2)?;
    put(out, &sig.0)
}

/// RFC 8032 TEST 2 public key and signature, verified.
pub const ED25519_PUBLIC_2: [u8; 32] =
    hex32("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c");
pub const ED25519_SIGNATURE_2: [u8; 64] = {
    let a = hex32("92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da");
    let b = hex32("085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00");
    concat64(a, b)
};
/// RFC 6979 A.2.5 public key U and the SHA-256 signature over "sample".
pub const P256_PUBLIC: [u8; 65] = {
    let x = hex32("60fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6");
    let y = hex32("7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299");
    let mut p = [0u8; 65];
    p[0] = 0x04;
    let mut i = 0;
    while i < 32 {
        p[1 + i] = x[i];
        p[33 + i] = y[i];
        i += 1;
    }
    p
};
pub const P256_SIGNATURE: [u8; 64] = concat64(
    hex32("efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716"),
    hex32("f7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8"),
);

const fn concat64(a: [u8; 32], b: [u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    let mut i = 0;
    while i < 32 {
        out[i] = a[i];
        out[32 + i] = b[i];
        i += 1;
    }
    out
}

fn verified(r: Result<(), CryptoError>, out: &mut [u8]) -> Result<usize, Failure> {
    match r {
        Ok(()) => put(out, &[1]),
        Err(CryptoError::BadSignature) => Err(Failure::Rejected),
        Err(e) => Err(e.into()),
    }
}

pub fn verify_ed25519<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let pk = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &ED25519_PUBLIC_2)?;
    verified(c.verify(&pk, &ED25519_MESSAGE_2, &ED25519_SIGNATURE_2), out)
}

pub fn sign_p256<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let sig = c.sign(&p256_key()?, P256_MESSAGE)?;
    put(out, &sig.0)
}

pub fn verify_p256<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let pk = PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &P256_PUBLIC)?;
    verified(c.verify(&pk, P256_MESSAGE, &P256_SIGNATURE), out)
}

pub fn x25519<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let sk = AgreementSecret::from_bytes(AgreementAlgorithm::X25519, &X25519_ALICE)?;
    put(out, &c.agree(&sk, &X25519_BOB_PUBLIC)?)
}

pub fn ecdh_p256<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let sk = AgreementSecret::from_bytes(AgreementAlgorithm::P256, &P256_ECDH_I)?;
    put(out, &c.agree(&sk, &P256_ECDH_GR)?)
}

fn ccm8<C: CryptoProvider + ?Sized>(c: &C, len: usize, out: &mut [u8]) -> Result<usize, Failure> {
    let buf = out
        .get_mut(..len + 8)
        .ok_or(Failure::Crypto(CryptoError::KeyLength))?;
    for (i, b) in buf[..len].iter_mut().enumerate() {
        *b = i as u8;
    }
    let tag = c.aes128_ccm8_seal(&CCM_KEY, &CCM_NONCE, &CCM_AAD, &mut buf[..len])?;
    buf[len..].copy_from_slice(&tag);
    Ok(len + 8)
}

pub fn ccm8_16<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    ccm8(c, 16, out)
}
pub fn ccm8_64<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    ccm8(c, 64, out)
}
pub fn ccm8_256<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    ccm8(c, 256, out)
}

/// SHA-256 over 256 bytes (i mod 256): four compression calls plus padding.
pub fn sha256_256<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let mut input = [0u8; 256];
    for (i, b) in input.iter_mut().enumerate() {
        *b = i as u8;
    }
    put(out, &c.sha256(&[&input]))
}

/// The reading every sensor sends: `[{"n":"t","u":"Cel","v":21.5}]` in SenML-CBOR.
pub fn reading_records() -> [Record<'static>; 1] {
    [Record {
        name: Some("t"),
        unit: Some("Cel"),
        value: Some(Value::Number(21.5)),
        ..Default::default()
    }]
}

fn build_and_sign<C: CryptoProvider + ?Sized>(
    c: &C,
    key: &SecretKey,
    out: &mut [u8],
) -> Result<usize, Failure> {
    let pk = c.public_key(key)?;
    let id = Identity::of_key(c, &pk, b"").map_err(|_| Failure::Reading)?;
    let mut senml_buf = [0u8; 32];
    let n = senml::encode_cbor(&reading_records(), &mut senml_buf).map_err(|_| Failure::Reading)?;
    let mut scratch = [0u8; 128];
    let fresh = Freshness {
        seq: READING_SEQ,
        lsb_bits: None,
        timestamp: None,
    };
    sign_reading(
        c,
        key,
        &id,
        ReadingFormat::Cose,
        &fresh,
        &senml_buf[..n],
        &mut scratch,
        out,
    )
    .map_err(|_| Failure::Reading)
}

/// Building and signing one SenML reading as COSE_Sign1 with Ed25519: public key and identity
/// (as a device caches them, but here included), SenML-CBOR encoding, Sig_structure, signature.
pub fn reading_sign_ed25519<C: CryptoProvider + ?Sized>(
    c: &C,
    out: &mut [u8],
) -> Result<usize, Failure> {
    build_and_sign(c, &ed25519_key(&ED25519_SECRET)?, out)
}

pub fn reading_sign_p256<C: CryptoProvider + ?Sized>(
    c: &C,
    out: &mut [u8],
) -> Result<usize, Failure> {
    build_and_sign(c, &p256_key()?, out)
}

/// The signed reading `reading_sign_ed25519` produces (checked on the host against the
/// vector file), verified end to end as the application does: parse, kid = identity, signature.
pub const SIGNED_READING_ED25519: [u8; 114] = [
    0xd2, 0x84, 0x58, 0x1c, 0xa3, 0x01, 0x27, 0x04, 0x50, 0x06, 0xaf, 0x05, 0x05, 0x3d, 0x7d, 0xea,
    0xac, 0x9a, 0xef, 0x24, 0x6d, 0x4b, 0x18, 0x88, 0x25, 0x3a, 0x00, 0x01, 0x00, 0x00, 0x18, 0x2a,
    0xa0, 0x4e, 0x81, 0xa3, 0x00, 0x61, 0x74, 0x01, 0x63, 0x43, 0x65, 0x6c, 0x02, 0xf9, 0x4d, 0x60,
    0x58, 0x40, 0xbd, 0x59, 0x52, 0x03, 0xa9, 0x4a, 0xc4, 0xe6, 0xbe, 0xc5, 0xaf, 0xf0, 0xe8, 0xcf,
    0xf9, 0x19, 0x49, 0x6c, 0x41, 0xe6, 0xf1, 0x4c, 0x5e, 0xb3, 0x1b, 0xc3, 0xff, 0xdd, 0x41, 0xca,
    0xf5, 0x7c, 0x69, 0xa3, 0x23, 0x74, 0xcd, 0xa0, 0x97, 0x76, 0xaa, 0x6b, 0x41, 0x57, 0x16, 0xf0,
    0x0b, 0x63, 0x22, 0xa1, 0x65, 0x14, 0x62, 0x65, 0x9a, 0xe5, 0xcf, 0x83, 0xff, 0x1c, 0x75, 0xba,
    0xea, 0x0e,
];

pub fn reading_verify_ed25519<C: CryptoProvider + ?Sized>(
    c: &C,
    out: &mut [u8],
) -> Result<usize, Failure> {
    let pk = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &ED25519_PUBLIC_1)?;
    let id = Identity::of_key(c, &pk, b"").map_err(|_| Failure::Reading)?;
    let r = SignedReading::parse(ReadingFormat::Cose, &SIGNED_READING_ED25519)
        .map_err(|_| Failure::Reading)?;
    let mut scratch = [0u8; 128];
    match r.verify_end_to_end(c, &pk, &id, READING_SEQ, &mut scratch) {
        Ok(()) => put(out, &[1]),
        Err(_) => Err(Failure::Rejected),
    }
}

/// RFC 8032 TEST 1 public key.
pub const ED25519_PUBLIC_1: [u8; 32] =
    hex32("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");

/// The deterministic randomness of the DTLS handshake operations (both ends, so the server's
/// flights can be recorded on the host and replayed on the device).
pub struct BenchRng(pub u8);

impl Rng for BenchRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for b in buf {
            self.0 = self.0.wrapping_mul(73).wrapping_add(41);
            *b = self.0;
        }
        Ok(())
    }
}

/// The PSK the DTLS handshake operations use.
pub const DTLS_PSK: [u8; 16] = [7; 16];
/// The server's flights of a PSK handshake, recorded on the host by `tests/dtls.rs` from the
/// real `sigil-dtls` server: each datagram prefixed by its 2-byte length.
pub const DTLS_PSK_SERVER: &[u8] = include_bytes!("../../../vectors/dtls-psk-server.bin");
/// The same for ECDHE-ECDSA with the server's raw public key (server-only authentication).
pub const DTLS_RPK_SERVER: &[u8] = include_bytes!("../../../vectors/dtls-rpk-server.bin");
/// The ECDHE-PSK handshake's server flights (TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256).
pub const DTLS_ECDHE_PSK_SERVER: &[u8] =
    include_bytes!("../../../vectors/dtls-ecdhe-psk-server.bin");
/// ECDHE-ECDSA with raw public keys on both sides: the server asks for the client's key.
pub const DTLS_RPK_MUTUAL_SERVER: &[u8] =
    include_bytes!("../../../vectors/dtls-rpk-mutual-server.bin");
/// Static ECDH (PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8) with the server's raw public key.
pub const DTLS_STATIC_ECDH_SERVER: &[u8] =
    include_bytes!("../../../vectors/dtls-static-ecdh-server.bin");
/// The RPK server's signature key (a P-256 scalar from the RFC 6979 A.2.5 vector).
pub fn dtls_server_key() -> Result<SecretKey, CryptoError> {
    SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &P256_SECRET)
}

/// The identity the clients pin for the RPK server: from its public key, the RFC 6979 A.2.5
/// key U, as a device would hold it (deriving it from the server's secret would add a scalar
/// multiplication that no client does).
#[cfg(feature = "dtls")]
fn dtls_server_identity<C: CryptoProvider + ?Sized>(c: &C) -> Result<Identity, Failure> {
    let pk = PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &P256_PUBLIC)?;
    Identity::of_key(c, &pk, b"").map_err(|_| Failure::Reading)
}

/// The client's signature key in the mutual handshake (the RFC 5903 §8.1 initiator's scalar,
/// used here as a P-256 signing key).
pub fn dtls_client_key() -> Result<SecretKey, CryptoError> {
    SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &P256_ECDH_I)
}

/// Splits a recording into its datagrams.
pub fn datagrams(mut rec: &[u8]) -> impl Iterator<Item = &[u8]> {
    core::iter::from_fn(move || {
        let n = usize::from(u16::from_be_bytes([*rec.first()?, *rec.get(1)?]));
        let d = rec.get(2..2 + n)?;
        rec = &rec[2 + n..];
        Some(d)
    })
}

/// A complete DTLS client handshake on the device: the client's own work for every flight
/// (the server's flights are replayed from the recording). Output: SHA-256 over every datagram
/// the client sent, then 1 if the handshake completed.
#[cfg(feature = "dtls")]
fn dtls_client<C: CryptoProvider + ?Sized, T: sigil_dtls::Trust>(
    c: &C,
    trust: T,
    config: sigil_dtls::Config,
    credentials: sigil_dtls::Credentials<'_>,
    server: &[u8],
    out: &mut [u8],
) -> Result<usize, Failure> {
    use sigil_dtls::Connection;
    use sigil_time::Instant;
    let mut client = Connection::connect(
        c,
        trust,
        config,
        &mut BenchRng(1),
        credentials,
        Instant::ZERO,
    )
    .map_err(|_| Failure::Rejected)?;
    let mut sent = [0u8; 1536];
    let mut used = 0;
    let mut buf = [0u8; 1400];
    let mut drain =
        |client: &mut Connection<&C, T>, now: Instant, sent: &mut [u8], used: &mut usize| {
            while let Some(n) = client.poll_transmit(now, &mut buf) {
                if let Some(dst) = sent.get_mut(*used..*used + n) {
                    dst.copy_from_slice(&buf[..n]);
                    *used += n;
                }
            }
        };
    drain(&mut client, Instant::ZERO, &mut sent, &mut used);
    for (i, d) in datagrams(server).enumerate() {
        let now = Instant::from_millis(10 + i as u64);
        client
            .handle_datagram(now, d)
            .map_err(|_| Failure::Rejected)?;
        drain(&mut client, now, &mut sent, &mut used);
    }
    let mut answer = [0u8; 33];
    answer[..32].copy_from_slice(&c.sha256(&[&sent[..used]]));
    answer[32] = u8::from(client.is_established());
    put(out, &answer)
}

/// DTLS 1.2 client handshake with TLS_PSK_WITH_AES_128_CCM_8, cookie exchange included.
#[cfg(feature = "dtls")]
pub fn dtls_psk_client<C: CryptoProvider + ?Sized>(
    c: &C,
    out: &mut [u8],
) -> Result<usize, Failure> {
    dtls_client(
        c,
        sigil_dtls::NoTrust,
        sigil_dtls::Config::default(),
        sigil_dtls::Credentials::Psk {
            identity: b"sensor",
            key: &DTLS_PSK,
        },
        DTLS_PSK_SERVER,
        out,
    )
}

/// DTLS 1.2 client handshake with TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8: the server's raw
/// public key verified against its pinned identity, its signature checked, ECDH on P-256.
#[cfg(feature = "dtls")]
pub fn dtls_rpk_client<C: CryptoProvider + ?Sized>(
    c: &C,
    out: &mut [u8],
) -> Result<usize, Failure> {
    let id = [dtls_server_identity(c)?];
    dtls_client(
        c,
        sigil_dtls::PinnedIdentities {
            crypto: c,
            identities: &id,
        },
        sigil_dtls::Config::default(),
        sigil_dtls::Credentials::RawPublicKey(None),
        DTLS_RPK_SERVER,
        out,
    )
}

/// DTLS 1.2 client handshake with TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 (RFC 8442): the PSK
/// authenticates an ephemeral ECDH exchange on P-256; no signature on either side.
#[cfg(feature = "dtls")]
pub fn dtls_ecdhe_psk_client<C: CryptoProvider + ?Sized>(
    c: &C,
    out: &mut [u8],
) -> Result<usize, Failure> {
    dtls_client(
        c,
        sigil_dtls::NoTrust,
        sigil_dtls::Config::default(),
        sigil_dtls::Credentials::EcdhePsk {
            identity: b"sensor",
            key: &DTLS_PSK,
        },
        DTLS_ECDHE_PSK_SERVER,
        out,
    )
}

/// ECDHE-ECDSA-CCM8 with raw public keys on both sides: as [`dtls_rpk_client`], and the client
/// also sends its own key and signs the transcript (CertificateVerify, RFC 5246 §7.4.8).
#[cfg(feature = "dtls")]
pub fn dtls_rpk_mutual_client<C: CryptoProvider + ?Sized>(
    c: &C,
    out: &mut [u8],
) -> Result<usize, Failure> {
    let id = [dtls_server_identity(c)?];
    let own = dtls_client_key()?;
    dtls_client(
        c,
        sigil_dtls::PinnedIdentities {
            crypto: c,
            identities: &id,
        },
        sigil_dtls::Config::default(),
        sigil_dtls::Credentials::RawPublicKey(Some(&own)),
        DTLS_RPK_MUTUAL_SERVER,
        out,
    )
}

/// The DTLS-as-CoAP-resource paper's suite, static ECDH (PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8,
/// sigil-dtls feature `static-ecdh`): the server's pinned raw public key is its ECDH key, so
/// there is no ServerKeyExchange and no signature to verify; the client sends an ephemeral
/// point and agrees with the server's key.
#[cfg(feature = "dtls")]
pub fn dtls_static_ecdh_client<C: CryptoProvider + ?Sized>(
    c: &C,
    out: &mut [u8],
) -> Result<usize, Failure> {
    let id = [dtls_server_identity(c)?];
    dtls_client(
        c,
        sigil_dtls::PinnedIdentities {
            crypto: c,
            identities: &id,
        },
        sigil_dtls::Config {
            danger_static_ecdh: true,
            ..sigil_dtls::Config::default()
        },
        sigil_dtls::Credentials::RawPublicKey(None),
        DTLS_STATIC_ECDH_SERVER,
        out,
    )
}

/// How many operations [`operations`] lists (the DTLS handshakes only with feature `dtls`).
pub const OPERATIONS: usize = if cfg!(feature = "dtls") { 21 } else { 16 };

/// Every operation, in report order.
pub fn operations<C: CryptoProvider + ?Sized>() -> [Operation<C>; OPERATIONS] {
    [
        Operation {
            name: "keygen_ed25519",
            run: keygen_ed25519::<C>,
        },
        Operation {
            name: "keygen_p256",
            run: keygen_p256::<C>,
        },
        Operation {
            name: "sign_ed25519",
            run: sign_ed25519::<C>,
        },
        Operation {
            name: "verify_ed25519",
            run: verify_ed25519::<C>,
        },
        Operation {
            name: "sign_p256",
            run: sign_p256::<C>,
        },
        Operation {
            name: "verify_p256",
            run: verify_p256::<C>,
        },
        Operation {
            name: "x25519",
            run: x25519::<C>,
        },
        Operation {
            name: "ecdh_p256",
            run: ecdh_p256::<C>,
        },
        Operation {
            name: "ccm8_16",
            run: ccm8_16::<C>,
        },
        Operation {
            name: "ccm8_64",
            run: ccm8_64::<C>,
        },
        Operation {
            name: "ccm8_256",
            run: ccm8_256::<C>,
        },
        Operation {
            name: "sha256_256",
            run: sha256_256::<C>,
        },
        Operation {
            name: "reading_sign_ed25519",
            run: reading_sign_ed25519::<C>,
        },
        Operation {
            name: "reading_sign_p256",
            run: reading_sign_p256::<C>,
        },
        Operation {
            name: "reading_verify_ed25519",
            run: reading_verify_ed25519::<C>,
        },
        Operation {
            name: "identity",
            run: identity::<C>,
        },
        #[cfg(feature = "dtls")]
        Operation {
            name: "dtls_psk_client",
            run: dtls_psk_client::<C>,
        },
        #[cfg(feature = "dtls")]
        Operation {
            name: "dtls_rpk_client",
            run: dtls_rpk_client::<C>,
        },
        #[cfg(feature = "dtls")]
        Operation {
            name: "dtls_ecdhe_psk_client",
            run: dtls_ecdhe_psk_client::<C>,
        },
        #[cfg(feature = "dtls")]
        Operation {
            name: "dtls_rpk_mutual_client",
            run: dtls_rpk_mutual_client::<C>,
        },
        #[cfg(feature = "dtls")]
        Operation {
            name: "dtls_static_ecdh_client",
            run: dtls_static_ecdh_client::<C>,
        },
    ]
}

/// The secure identity I = h(P|O) of the RFC 8032 TEST 1 key (RFC 8387 §4).
pub fn identity<C: CryptoProvider + ?Sized>(c: &C, out: &mut [u8]) -> Result<usize, Failure> {
    let pk = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &ED25519_PUBLIC_1)?;
    let id = Identity::of_key(c, &pk, b"").map_err(|_| Failure::Reading)?;
    put(out, id.as_bytes())
}

/// RSA-2048 for comparison with the two-way-authentication seed (feature `rsa`): what its
/// handshakes do with RSA, on a fixed test key (`vectors/rsa2048-bench.*`, made and checked with
/// pyca/cryptography by `vectors/gen_rsa_kat.py`; known answers in `vectors/device-kat-rsa.json`).
/// No key generation: a device holds its key, and the seed's Table 3 measures the operations only.
/// The `rsa` crate allocates, so a device build of these needs a global allocator.
#[cfg(feature = "rsa")]
pub mod rsa {
    use super::{put, verified, BenchRng, Failure, Operation};
    use sigil_crypto::{CryptoProvider, RsaPublicKey, RsaSecretKey};

    /// The test key, PKCS#1 `RSAPrivateKey` DER (e = 65537).
    pub const KEY_DER: &[u8] = include_bytes!("../../../vectors/rsa2048-bench.key.der");
    /// Its modulus, big-endian: the public key a peer holds.
    pub const MODULUS: &[u8; 256] = include_bytes!("../../../vectors/rsa2048-bench.modulus.bin");
    pub const EXPONENT: [u8; 3] = [1, 0, 1];
    /// The message signed and verified.
    pub const MESSAGE: &[u8] = b"sample";
    /// pyca's RSASSA-PKCS1-v1_5 SHA-256 signature of [`MESSAGE`] under the key.
    pub const SIGNATURE: &[u8; 256] =
        include_bytes!("../../../vectors/rsa2048-bench.signature.bin");
    /// A TLS premaster secret (client_version 3,3 and bytes 1..=46) encrypted under the key by
    /// pyca (RSAES-PKCS1-v1_5): an RSA key transport's `EncryptedPreMasterSecret`.
    pub const PREMASTER_CIPHERTEXT: &[u8; 256] =
        include_bytes!("../../../vectors/rsa2048-bench.premaster.bin");
    pub const CLIENT_VERSION: [u8; 2] = [3, 3];

    /// The premaster secret the encryption operation encrypts (what the decryption recovers).
    pub fn premaster() -> [u8; 48] {
        let mut p = [0u8; 48];
        p[..2].copy_from_slice(&CLIENT_VERSION);
        for (i, b) in p[2..].iter_mut().enumerate() {
            *b = i as u8 + 1;
        }
        p
    }

    fn public() -> Result<RsaPublicKey, Failure> {
        Ok(RsaPublicKey::from_modulus_exponent(MODULUS, &EXPONENT)?)
    }

    /// The private key parsed and checked (PKCS#1 DER, the `rsa` crate's consistency checks
    /// and CRT precomputation), its public key out: the part of every private-key operation
    /// below that a device could do once and keep. Output: the modulus.
    pub fn rsa2048_public_key<C: CryptoProvider + ?Sized>(
        c: &C,
        out: &mut [u8],
    ) -> Result<usize, Failure> {
        let pk = c.rsa_public_key(&RsaSecretKey::from_pkcs1_der(KEY_DER))?;
        put(out, pk.modulus())
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 (a TLS 1.2 CertificateVerify or ServerKeyExchange
    /// signature): key parsing, hashing, the blinded CRT private-key operation.
    pub fn rsa2048_sign<C: CryptoProvider + ?Sized>(
        c: &C,
        out: &mut [u8],
    ) -> Result<usize, Failure> {
        let key = RsaSecretKey::from_pkcs1_der(KEY_DER);
        Ok(c.rsa_pkcs1_sha256_sign(&key, MESSAGE, &mut BenchRng(3), out)?)
    }

    /// Verifying pyca's signature: one public-key operation (e = 65537) and the encoding check.
    pub fn rsa2048_verify<C: CryptoProvider + ?Sized>(
        c: &C,
        out: &mut [u8],
    ) -> Result<usize, Failure> {
        verified(
            c.rsa_pkcs1_sha256_verify(&public()?, MESSAGE, SIGNATURE),
            out,
        )
    }

    /// RSAES-PKCS1-v1_5 encryption of a premaster secret: the RSA key transport client's
    /// ClientKeyExchange. The padding comes from the harness's fixed RNG, so the answer repeats.
    pub fn rsa2048_encrypt<C: CryptoProvider + ?Sized>(
        c: &C,
        out: &mut [u8],
    ) -> Result<usize, Failure> {
        Ok(c.rsa_pkcs1_encrypt(&public()?, &premaster(), &mut BenchRng(5), out)?)
    }

    /// The key transport server's side: the premaster secret from pyca's ciphertext, with the
    /// constant-time padding check of RFC 5246 §7.4.7.1 (a private-key operation).
    pub fn rsa2048_decrypt<C: CryptoProvider + ?Sized>(
        c: &C,
        out: &mut [u8],
    ) -> Result<usize, Failure> {
        let key = RsaSecretKey::from_pkcs1_der(KEY_DER);
        let secret =
            c.rsa_tls_premaster(&key, PREMASTER_CIPHERTEXT, CLIENT_VERSION, &mut BenchRng(7))?;
        put(out, &secret[..])
    }

    /// The RSA operations, in report order.
    pub fn operations<C: CryptoProvider + ?Sized>() -> [Operation<C>; 5] {
        [
            Operation {
                name: "rsa2048_public_key",
                run: rsa2048_public_key::<C>,
            },
            Operation {
                name: "rsa2048_sign",
                run: rsa2048_sign::<C>,
            },
            Operation {
                name: "rsa2048_verify",
                run: rsa2048_verify::<C>,
            },
            Operation {
                name: "rsa2048_encrypt",
                run: rsa2048_encrypt::<C>,
            },
            Operation {
                name: "rsa2048_decrypt",
                run: rsa2048_decrypt::<C>,
            },
        ]
    }
}
