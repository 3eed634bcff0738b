//! The crypto provider of Sigil.
//!
//! Protocol crates never call a primitive directly: they take a `&dyn CryptoProvider` (or a
//! generic `P: CryptoProvider`) chosen at the edge of the program, as rustls and lakers do. A
//! device build links only the backend it names, so unused algorithms cost no flash.
//!
//! Randomness is passed in through [`Rng`]: a device wires it to its hardware TRNG, a host to
//! the operating system. Nothing here reads a clock or does I/O.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(feature = "rustcrypto-core")]
mod rustcrypto;
#[cfg(feature = "rustcrypto-core")]
pub use rustcrypto::RustCrypto;

#[cfg(all(feature = "cortex-m4", target_arch = "arm"))]
mod cortex_m4;
#[cfg(all(feature = "cortex-m4", target_arch = "arm"))]
pub use cortex_m4::CortexM4;

#[cfg(feature = "ibpv")]
pub mod ibpv;
#[cfg(feature = "ibpv")]
pub mod shamir;

#[cfg(feature = "rsa")]
mod rsa_keys;
#[cfg(feature = "rsa")]
pub use rsa_keys::{
    RsaPublicKey, RsaSecretKey, SeededRng, MAX_RSA_MODULUS_LEN, MIN_RSA_MODULUS_LEN,
};

mod agreement;
pub use agreement::{
    AgreementAlgorithm, AgreementPublicKey, AgreementSecret, MAX_AGREEMENT_KEY_LEN,
};

/// Length of the AES-128-CCM-8 nonce Sigil uses: 12 bytes, as DTLS 1.2 forms it
/// (RFC 6655 §3: 4-byte implicit salt and 8-byte explicit part).
pub const CCM_NONCE_LEN: usize = 12;
/// Length of the AES-128-CCM-8 authentication tag (RFC 6655 §3).
pub const CCM8_TAG_LEN: usize = 8;
/// Nonce length of COSE's AES-CCM-16-64-128 (RFC 9053 §4.2: L = 2, so 15 - 2 = 13 bytes).
pub const CCM16_NONCE_LEN: usize = 13;
/// AES-GCM tag length (RFC 5288).
pub const GCM_TAG_LEN: usize = 16;

use core::fmt;
use zeroize::Zeroize;

/// A signature algorithm, as named by the COSE (RFC 9053 §2) and JOSE (RFC 7518, RFC 8037)
/// registries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SignatureAlgorithm {
    /// Ed25519 (RFC 8032), COSE `EdDSA` = -8, JOSE `EdDSA`. The default.
    Ed25519,
    /// ECDSA over P-256 with SHA-256, COSE `ES256` = -7, JOSE `ES256`.
    EcdsaP256,
}

impl SignatureAlgorithm {
    pub const ALL: [SignatureAlgorithm; 2] = [Self::Ed25519, Self::EcdsaP256];

    /// The COSE Algorithms registry value.
    pub const fn cose(self) -> i64 {
        match self {
            Self::Ed25519 => -8,
            Self::EcdsaP256 => -7,
        }
    }

    pub const fn from_cose(value: i64) -> Option<Self> {
        match value {
            -8 => Some(Self::Ed25519),
            -7 => Some(Self::EcdsaP256),
            _ => None,
        }
    }

    /// The JWS `alg` header value (RFC 7518 §3.1, RFC 8037 §3.1).
    pub const fn jose(self) -> &'static str {
        match self {
            Self::Ed25519 => "EdDSA",
            Self::EcdsaP256 => "ES256",
        }
    }

    pub fn from_jose(value: &str) -> Option<Self> {
        match value {
            "EdDSA" => Some(Self::Ed25519),
            "ES256" => Some(Self::EcdsaP256),
            _ => None,
        }
    }

    /// Length of the public key encoding Sigil uses: 32 bytes for Ed25519 (RFC 8032 §5.1.5),
    /// 65 bytes for an uncompressed SEC1 P-256 point.
    pub const fn public_key_len(self) -> usize {
        match self {
            Self::Ed25519 => 32,
            Self::EcdsaP256 => 65,
        }
    }

    /// Signature length: both algorithms produce 64 bytes (ECDSA as `r || s`, RFC 9053 §2.1).
    pub const fn signature_len(self) -> usize {
        64
    }

    /// The one-byte algorithm tag used inside Sigil's identity hash input (docs/identity.md).
    pub const fn identity_tag(self) -> u8 {
        match self {
            Self::Ed25519 => 0x01,
            Self::EcdsaP256 => 0x02,
        }
    }

    pub const fn from_identity_tag(tag: u8) -> Option<Self> {
        match tag {
            0x01 => Some(Self::Ed25519),
            0x02 => Some(Self::EcdsaP256),
            _ => None,
        }
    }

    /// A short lower-case name for command lines and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ed25519 => "ed25519",
            Self::EcdsaP256 => "p256",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "ed25519" | "eddsa" | "EdDSA" => Some(Self::Ed25519),
            "p256" | "es256" | "ES256" | "ecdsa-p256" => Some(Self::EcdsaP256),
            _ => None,
        }
    }
}

/// Largest public key encoding of any supported algorithm.
pub const MAX_PUBLIC_KEY_LEN: usize = 65;
/// Signature length of every supported algorithm.
pub const SIGNATURE_LEN: usize = 64;

/// Errors from the crypto layer. They say what was wrong, never why a secret-dependent check
/// failed beyond "the signature does not verify".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CryptoError {
    /// The key bytes have the wrong length for the algorithm.
    KeyLength,
    /// The key bytes do not encode a valid key (point not on the curve, zero scalar...).
    InvalidKey,
    /// The signature has the wrong length.
    SignatureLength,
    /// The signature does not verify under the key over the message.
    BadSignature,
    /// The random number source failed.
    Rng,
    /// This provider does not implement the algorithm.
    Unsupported,
    /// An authenticated-encryption tag does not match: the ciphertext or its associated data
    /// was altered, or the key is wrong.
    BadTag,
    /// A key agreement produced an all-zero (low-order) shared secret.
    WeakSharedSecret,
}

impl fmt::Display for CryptoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::KeyLength => "public or secret key has the wrong length",
            Self::InvalidKey => {
                "key bytes do not encode a valid key (a public key not on its curve or not canonically encoded, or a secret out of range)"
            }
            Self::SignatureLength => "signature has the wrong length",
            Self::BadSignature => "signature does not verify",
            Self::Rng => "random number source failed",
            Self::Unsupported => "algorithm not supported by this crypto provider",
            Self::BadTag => "authentication tag does not match",
            Self::WeakSharedSecret => "key agreement produced a low-order shared secret",
        })
    }
}

/// A public signature key: the algorithm and its canonical encoding.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey {
    alg: SignatureAlgorithm,
    len: u8,
    bytes: [u8; MAX_PUBLIC_KEY_LEN],
}

impl PublicKey {
    /// Wraps key bytes after checking the length and that they encode a point: for P-256 an
    /// uncompressed SEC 1 point on the curve, for Ed25519 a canonical encoding of a point
    /// (`y` below the field prime, and an `x` exists). Every key that comes from outside (an
    /// identity list, a COSE_Key, a DTLS raw public key, a registration, a pairing message)
    /// is made here, so a key that is not a point is refused where it is parsed, not later
    /// at a verification. (Small-order Ed25519 keys decode; strict verification refuses
    /// every signature under them.) A build without the portable backend for an algorithm
    /// checks only the length and prefix.
    pub fn from_bytes(alg: SignatureAlgorithm, key: &[u8]) -> Result<Self, CryptoError> {
        if key.len() != alg.public_key_len() {
            return Err(CryptoError::KeyLength);
        }
        if alg == SignatureAlgorithm::EcdsaP256 && key[0] != 0x04 {
            return Err(CryptoError::InvalidKey);
        }
        if !is_point(alg, key) {
            return Err(CryptoError::InvalidKey);
        }
        let mut bytes = [0u8; MAX_PUBLIC_KEY_LEN];
        bytes[..key.len()].copy_from_slice(key);
        Ok(Self {
            alg,
            len: key.len() as u8,
            bytes,
        })
    }

    pub fn algorithm(&self) -> SignatureAlgorithm {
        self.alg
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Whether `key` (of the right length) encodes a point of the algorithm's curve.
#[allow(unused_variables)]
pub(crate) fn is_point(alg: SignatureAlgorithm, key: &[u8]) -> bool {
    match alg {
        #[cfg(feature = "rustcrypto-p256")]
        SignatureAlgorithm::EcdsaP256 => p256::PublicKey::from_sec1_bytes(key).is_ok(),
        #[cfg(feature = "rustcrypto-ed25519")]
        SignatureAlgorithm::Ed25519 => {
            let Ok(bytes) = <&[u8; 32]>::try_from(key) else {
                return false;
            };
            // Decompression takes `y` modulo p, so a non-canonical `y` (p or above) would
            // decode too: the point must encode back to the same bytes.
            ed25519_dalek::VerifyingKey::from_bytes(bytes)
                .is_ok_and(|k| k.to_edwards().compress().as_bytes() == bytes)
        }
        #[allow(unreachable_patterns)]
        _ => true,
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({}, ", self.alg.name())?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}

/// A secret signing key: 32 bytes for both algorithms (the Ed25519 seed of RFC 8032 §5.1.5,
/// or the P-256 scalar). Zeroed on drop.
#[derive(Clone)]
pub struct SecretKey {
    alg: SignatureAlgorithm,
    bytes: [u8; 32],
}

impl SecretKey {
    pub fn from_bytes(alg: SignatureAlgorithm, bytes: &[u8]) -> Result<Self, CryptoError> {
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| CryptoError::KeyLength)?;
        Ok(Self { alg, bytes })
    }

    pub fn algorithm(&self) -> SignatureAlgorithm {
        self.alg
    }

    /// The secret bytes, for the device's own storage only.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.bytes
    }
}

impl Drop for SecretKey {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({}, <redacted>)", self.alg.name())
    }
}

/// A 64-byte signature.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature(pub [u8; SIGNATURE_LEN]);

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Signature(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("..)")
    }
}

/// A source of cryptographically secure random bytes, supplied by the caller.
pub trait Rng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError>;
}

/// The operations Sigil needs from a crypto library.
pub trait CryptoProvider {
    /// SHA-256 over the concatenation of `parts`.
    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32];

    /// HMAC-SHA-256 (RFC 2104) with `key` over the concatenation of `parts`.
    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32];

    /// Generates a fresh key pair from `rng` (RFC 8387 §4: at first boot, on the device).
    fn generate(
        &self,
        alg: SignatureAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<SecretKey, CryptoError>;

    fn public_key(&self, key: &SecretKey) -> Result<PublicKey, CryptoError>;

    fn sign(&self, key: &SecretKey, message: &[u8]) -> Result<Signature, CryptoError>;

    /// Verifies `signature` over exactly `message`.
    fn verify(&self, key: &PublicKey, message: &[u8], signature: &[u8]) -> Result<(), CryptoError>;

    /// Generates an ephemeral or static key-agreement secret from `rng`.
    fn generate_agreement(
        &self,
        alg: AgreementAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<AgreementSecret, CryptoError>;

    /// The public value for a key-agreement secret: the 32-byte u-coordinate for X25519
    /// (RFC 7748 §5), the 65-byte uncompressed point for P-256 (SEC 1 §2.3.3).
    fn agreement_public_key(
        &self,
        secret: &AgreementSecret,
    ) -> Result<AgreementPublicKey, CryptoError>;

    /// The shared secret with a peer's public value: the X25519 output (an all-zero result is
    /// refused, RFC 7748 §6.1) or the P-256 x-coordinate (SEC 1 §3.3.1; a point off the curve is
    /// refused). Callers must feed it through a KDF; it is never a key by itself.
    fn agree(&self, secret: &AgreementSecret, peer_public: &[u8]) -> Result<[u8; 32], CryptoError>;

    /// The X25519 secret of an Ed25519 signing key (RFC 8032 §5.1.5 with the birational map of
    /// RFC 7748 §4.1): the first half of SHA-512 of the seed, which X25519 clamps as Ed25519
    /// does, so its public value is [`Self::x25519_public_of_ed25519`] of the signing key's
    /// public key. The same secret as libsodium's `crypto_sign_ed25519_sk_to_curve25519`.
    /// Another kind of key is refused with [`CryptoError::InvalidKey`]; providers without
    /// it answer [`CryptoError::Unsupported`].
    fn x25519_secret_of_ed25519(&self, key: &SecretKey) -> Result<AgreementSecret, CryptoError> {
        let _ = key;
        Err(CryptoError::Unsupported)
    }

    /// The X25519 public value of an Ed25519 public key: the Montgomery u-coordinate
    /// `(1 + y) / (1 - y)` of its point (RFC 7748 §4.1), as libsodium's
    /// `crypto_sign_ed25519_pk_to_curve25519`. A key that is not a point, or of small order, is
    /// refused ([`CryptoError::InvalidKey`]); providers without it answer
    /// [`CryptoError::Unsupported`].
    fn x25519_public_of_ed25519(&self, key: &PublicKey) -> Result<AgreementPublicKey, CryptoError> {
        let _ = key;
        Err(CryptoError::Unsupported)
    }

    /// AES-128-CCM with an 8-byte tag (RFC 3610, RFC 6655): encrypts `buf` in place and
    /// returns the tag.
    fn aes128_ccm8_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError>;

    /// Checks `tag` and decrypts `buf` in place; on failure `buf` is left unspecified and
    /// [`CryptoError::BadTag`] is returned.
    fn aes128_ccm8_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError>;

    /// AES-128-CCM with an 8-byte tag and a 13-byte nonce (COSE `AES-CCM-16-64-128`, alg 10,
    /// RFC 9053 §4.2): encrypts `buf` in place and returns the tag. Providers without it answer
    /// [`CryptoError::Unsupported`].
    fn aes128_ccm16_64_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM16_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        let _ = (key, nonce, aad, buf);
        Err(CryptoError::Unsupported)
    }

    /// Checks `tag` and decrypts `buf` in place (COSE `AES-CCM-16-64-128`); on failure `buf` is
    /// left unspecified and [`CryptoError::BadTag`] is returned.
    fn aes128_ccm16_64_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM16_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        let _ = (key, nonce, aad, buf, tag);
        Err(CryptoError::Unsupported)
    }

    /// The public key of an RSA private key, after checking the key is consistent
    /// (feature `rsa`).
    #[cfg(feature = "rsa")]
    fn rsa_public_key(&self, key: &RsaSecretKey) -> Result<RsaPublicKey, CryptoError> {
        let _ = key;
        Err(CryptoError::Unsupported)
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 (RFC 8017 §8.2.1) over `message` into `out`, which must
    /// hold the modulus length; returns that length. `rng` blinds the private-key operation.
    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_sha256_sign(
        &self,
        key: &RsaSecretKey,
        message: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        let _ = (key, message, rng, out);
        Err(CryptoError::Unsupported)
    }

    /// Verifies an RSASSA-PKCS1-v1_5 SHA-256 signature (RFC 8017 §8.2.2) over `message`.
    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_sha256_verify(
        &self,
        key: &RsaPublicKey,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        let _ = (key, message, signature);
        Err(CryptoError::Unsupported)
    }

    /// RSAES-PKCS1-v1_5 encryption (RFC 8017 §7.2.1) of `message` into `out`, which must hold
    /// the modulus length; returns that length.
    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_encrypt(
        &self,
        key: &RsaPublicKey,
        message: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        let _ = (key, message, rng, out);
        Err(CryptoError::Unsupported)
    }

    /// The TLS RSA key transport's premaster secret from an `EncryptedPreMasterSecret`
    /// (RFC 5246 §7.4.7.1), resisting Bleichenbacher's attack: 46 random bytes are drawn
    /// first, and when the PKCS#1 v1.5 padding is wrong or the message is not 48 bytes long
    /// they replace the decrypted ones, selected in constant time, so a bad ciphertext gives
    /// no distinguishable answer (the Finished check then fails like any other). The first two
    /// bytes are always `client_version`. Errors only for what does not depend on the
    /// plaintext: a ciphertext whose length is not the modulus length, a bad key, the RNG.
    #[cfg(feature = "rsa")]
    fn rsa_tls_premaster(
        &self,
        key: &RsaSecretKey,
        ciphertext: &[u8],
        client_version: [u8; 2],
        rng: &mut dyn Rng,
    ) -> Result<zeroize::Zeroizing<[u8; 48]>, CryptoError> {
        let _ = (key, ciphertext, client_version, rng);
        Err(CryptoError::Unsupported)
    }

    /// AES-128-GCM (RFC 5288) with a 12-byte nonce: encrypts `buf` in place and returns the
    /// 16-byte tag. Providers without it answer [`CryptoError::Unsupported`].
    fn aes128_gcm_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; GCM_TAG_LEN], CryptoError> {
        let _ = (key, nonce, aad, buf);
        Err(CryptoError::Unsupported)
    }

    /// Checks `tag` and decrypts `buf` in place (AES-128-GCM).
    fn aes128_gcm_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; GCM_TAG_LEN],
    ) -> Result<(), CryptoError> {
        let _ = (key, nonce, aad, buf, tag);
        Err(CryptoError::Unsupported)
    }
}

impl<T: CryptoProvider + ?Sized> CryptoProvider for &T {
    #[cfg(feature = "rsa")]
    fn rsa_public_key(&self, key: &RsaSecretKey) -> Result<RsaPublicKey, CryptoError> {
        (**self).rsa_public_key(key)
    }
    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_sha256_sign(
        &self,
        key: &RsaSecretKey,
        message: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        (**self).rsa_pkcs1_sha256_sign(key, message, rng, out)
    }
    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_sha256_verify(
        &self,
        key: &RsaPublicKey,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        (**self).rsa_pkcs1_sha256_verify(key, message, signature)
    }
    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_encrypt(
        &self,
        key: &RsaPublicKey,
        message: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        (**self).rsa_pkcs1_encrypt(key, message, rng, out)
    }
    #[cfg(feature = "rsa")]
    fn rsa_tls_premaster(
        &self,
        key: &RsaSecretKey,
        ciphertext: &[u8],
        client_version: [u8; 2],
        rng: &mut dyn Rng,
    ) -> Result<zeroize::Zeroizing<[u8; 48]>, CryptoError> {
        (**self).rsa_tls_premaster(key, ciphertext, client_version, rng)
    }
    fn aes128_ccm16_64_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM16_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        (**self).aes128_ccm16_64_seal(key, nonce, aad, buf)
    }
    fn aes128_ccm16_64_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM16_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        (**self).aes128_ccm16_64_open(key, nonce, aad, buf, tag)
    }
    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        (**self).sha256(parts)
    }
    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        (**self).hmac_sha256(key, parts)
    }
    fn generate(
        &self,
        alg: SignatureAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<SecretKey, CryptoError> {
        (**self).generate(alg, rng)
    }
    fn public_key(&self, key: &SecretKey) -> Result<PublicKey, CryptoError> {
        (**self).public_key(key)
    }
    fn sign(&self, key: &SecretKey, message: &[u8]) -> Result<Signature, CryptoError> {
        (**self).sign(key, message)
    }
    fn verify(&self, key: &PublicKey, message: &[u8], signature: &[u8]) -> Result<(), CryptoError> {
        (**self).verify(key, message, signature)
    }
    fn generate_agreement(
        &self,
        alg: AgreementAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<AgreementSecret, CryptoError> {
        (**self).generate_agreement(alg, rng)
    }
    fn agreement_public_key(
        &self,
        secret: &AgreementSecret,
    ) -> Result<AgreementPublicKey, CryptoError> {
        (**self).agreement_public_key(secret)
    }
    fn agree(&self, secret: &AgreementSecret, peer_public: &[u8]) -> Result<[u8; 32], CryptoError> {
        (**self).agree(secret, peer_public)
    }
    fn x25519_secret_of_ed25519(&self, key: &SecretKey) -> Result<AgreementSecret, CryptoError> {
        (**self).x25519_secret_of_ed25519(key)
    }
    fn x25519_public_of_ed25519(&self, key: &PublicKey) -> Result<AgreementPublicKey, CryptoError> {
        (**self).x25519_public_of_ed25519(key)
    }
    fn aes128_ccm8_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        (**self).aes128_ccm8_seal(key, nonce, aad, buf)
    }
    fn aes128_ccm8_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        (**self).aes128_ccm8_open(key, nonce, aad, buf, tag)
    }
    fn aes128_gcm_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; GCM_TAG_LEN], CryptoError> {
        (**self).aes128_gcm_seal(key, nonce, aad, buf)
    }
    fn aes128_gcm_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; GCM_TAG_LEN],
    ) -> Result<(), CryptoError> {
        (**self).aes128_gcm_open(key, nonce, aad, buf, tag)
    }
}

impl core::error::Error for CryptoError {}
