//! The seed's six operations (`iot-cryptodiet.md` §4, Algorithms 1-6) as plain functions over
//! byte arrays, on P-256, with the seed's weak choices replaced: the ECDH output goes through
//! HKDF-SHA-256 (RFC 5869) and AES is AES-128-CCM with an 8-byte tag (RFC 3610). A C wrapper maps
//! `ECC_GenKeyPair`, `ECDH_GenSharedKey`, `AES_Encrypt`, `AES_Decrypt`, `ECDSA_sign` and
//! `ECDSA_verify` one to one onto [`generate_key_pair`], [`shared_key`], [`encrypt`],
//! [`decrypt`], [`sign`] and [`verify`] (docs/security.md lists the mapping).
//!
//! Keys are bytes so that they cross a C boundary unchanged: a secret is the 32-byte big-endian
//! P-256 scalar, a public key the 65-byte uncompressed SEC 1 point, a signature `r || s`
//! (64 bytes). The caller wipes secrets it no longer needs.

use crate::Error;
use sigil_crypto::{
    AgreementAlgorithm, AgreementSecret, CryptoProvider, PublicKey, Rng, SecretKey,
    SignatureAlgorithm,
};

/// A P-256 secret scalar.
pub const SECRET_KEY_LEN: usize = 32;
/// An uncompressed P-256 point.
pub const PUBLIC_KEY_LEN: usize = 65;
/// ECDSA `r || s`.
pub const SIGNATURE_LEN: usize = 64;
/// AES-128.
pub const KEY_LEN: usize = 16;
/// The CCM nonce (15 - L with L = 3, as RFC 6655 and DTLS use).
pub const NONCE_LEN: usize = sigil_crypto::CCM_NONCE_LEN;
/// The CCM-8 tag.
pub const TAG_LEN: usize = sigil_crypto::CCM8_TAG_LEN;
/// The most HKDF-SHA-256 can expand to (RFC 5869 §2.3).
pub const MAX_DERIVED_LEN: usize = 255 * 32;

/// One P-256 key pair. The same scalar works for ECDH and ECDSA; the node keeps one of each,
/// as the seed's toy protocol does (`sk`/`pk` and `sig`/`ver`).
pub struct KeyPair {
    pub secret: [u8; SECRET_KEY_LEN],
    pub public: [u8; PUBLIC_KEY_LEN],
}

/// `ECC_GenKeyPair` (Algorithm 1): a fresh P-256 key pair from the caller's CSPRNG.
pub fn generate_key_pair<C: CryptoProvider + ?Sized>(
    crypto: &C,
    rng: &mut dyn Rng,
) -> Result<KeyPair, Error> {
    let sk = crypto.generate(SignatureAlgorithm::EcdsaP256, rng)?;
    let public = public_key(crypto, &sk.to_bytes())?;
    Ok(KeyPair {
        secret: sk.to_bytes(),
        public,
    })
}

/// The public key of a secret scalar (refused if the scalar is zero or not below the order).
pub fn public_key<C: CryptoProvider + ?Sized>(
    crypto: &C,
    secret: &[u8; SECRET_KEY_LEN],
) -> Result<[u8; PUBLIC_KEY_LEN], Error> {
    let sk = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, secret)?;
    let pk = crypto.public_key(&sk)?;
    pk.as_bytes().try_into().map_err(|_| Error::Malformed)
}

/// A P-256 ECDH key pair through the provider's key-agreement path (which a backend may
/// implement apart from signing, as the Cortex-M4 one does); the same encodings.
pub fn generate_ecdh_key_pair<C: CryptoProvider + ?Sized>(
    crypto: &C,
    rng: &mut dyn Rng,
) -> Result<KeyPair, Error> {
    let sk = crypto.generate_agreement(AgreementAlgorithm::P256, rng)?;
    let secret = sk.to_bytes();
    Ok(KeyPair {
        secret,
        public: ecdh_public_key(crypto, &secret)?,
    })
}

/// The ECDH public key of a secret scalar, through the key-agreement path.
pub fn ecdh_public_key<C: CryptoProvider + ?Sized>(
    crypto: &C,
    secret: &[u8; SECRET_KEY_LEN],
) -> Result<[u8; PUBLIC_KEY_LEN], Error> {
    let sk = AgreementSecret::from_bytes(AgreementAlgorithm::P256, secret)?;
    let pk = crypto.agreement_public_key(&sk)?;
    pk.as_bytes().try_into().map_err(|_| Error::Malformed)
}

/// HKDF-SHA-256 (RFC 5869 §2.2-2.3): extract with `salt`, expand with `info` into all of
/// `out` (at most [`MAX_DERIVED_LEN`] bytes).
pub fn hkdf_sha256<C: CryptoProvider + ?Sized>(
    crypto: &C,
    salt: &[u8],
    ikm: &[u8],
    info: &[u8],
    out: &mut [u8],
) -> Result<(), Error> {
    if out.len() > MAX_DERIVED_LEN {
        return Err(Error::BufferTooSmall);
    }
    let prk = crypto.hmac_sha256(salt, &[ikm]);
    let mut t = [0u8; 32];
    let mut t_len = 0;
    for (i, chunk) in out.chunks_mut(32).enumerate() {
        let counter = [i as u8 + 1];
        t = crypto.hmac_sha256(&prk, &[&t[..t_len], info, &counter]);
        t_len = 32;
        chunk.copy_from_slice(&t[..chunk.len()]);
    }
    Ok(())
}

/// `ECDH_GenSharedKey` (Algorithm 2) with a key derivation: the P-256 ECDH x-coordinate
/// (SEC 1 §3.3.1; a point off the curve is refused) is never a key itself, it is the input
/// keying material of HKDF-SHA-256 with `salt` and `info`, expanded into `out`.
pub fn shared_key<C: CryptoProvider + ?Sized>(
    crypto: &C,
    secret: &[u8; SECRET_KEY_LEN],
    peer_public: &[u8],
    salt: &[u8],
    info: &[u8],
    out: &mut [u8],
) -> Result<(), Error> {
    if peer_public.len() != PUBLIC_KEY_LEN || peer_public[0] != 0x04 {
        return Err(Error::Malformed);
    }
    let sk = AgreementSecret::from_bytes(AgreementAlgorithm::P256, secret)?;
    let shared = crypto.agree(&sk, peer_public)?;
    hkdf_sha256(crypto, salt, &shared, info, out)
}

/// `AES_Encrypt` (Algorithm 3): AES-128-CCM-8 in place over `buf`, authenticating `aad`;
/// returns the tag. A nonce must never repeat under one key.
pub fn encrypt<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<[u8; TAG_LEN], Error> {
    Ok(crypto.aes128_ccm8_seal(key, nonce, aad, buf)?)
}

/// `AES_Decrypt` (Algorithm 4): checks the tag and decrypts `buf` in place;
/// [`Error::BadTag`] if the ciphertext, the AAD, the nonce or the key differ.
pub fn decrypt<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &[u8; KEY_LEN],
    nonce: &[u8; NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
) -> Result<(), Error> {
    Ok(crypto.aes128_ccm8_open(key, nonce, aad, buf, tag)?)
}

/// `ECDSA_sign` (Algorithm 5): ECDSA P-256 with SHA-256 over `message` (FIPS 186-4; the nonce
/// as RFC 6979 §3.2 derives it with the RustCrypto and Cortex-M4 backends).
pub fn sign<C: CryptoProvider + ?Sized>(
    crypto: &C,
    secret: &[u8; SECRET_KEY_LEN],
    message: &[u8],
) -> Result<[u8; SIGNATURE_LEN], Error> {
    let sk = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, secret)?;
    Ok(crypto.sign(&sk, message)?.0)
}

/// `ECDSA_verify` (Algorithm 6): [`Error::BadSignature`] unless `signature` is ECDSA P-256
/// with SHA-256 over exactly `message` under `public`.
pub fn verify<C: CryptoProvider + ?Sized>(
    crypto: &C,
    public: &[u8],
    message: &[u8],
    signature: &[u8],
) -> Result<(), Error> {
    let pk = PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, public)
        .map_err(|_| Error::Malformed)?;
    if signature.len() != SIGNATURE_LEN {
        return Err(Error::Malformed);
    }
    Ok(crypto.verify(&pk, message, signature)?)
}
