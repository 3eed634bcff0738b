//! Key-agreement values: the algorithm, the secret scalar and the public value.

use crate::{CryptoError, SecretKey, SignatureAlgorithm};
use core::fmt;
use zeroize::Zeroize;

/// A key-agreement algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AgreementAlgorithm {
    /// X25519 (RFC 7748 §5).
    X25519,
    /// ECDH over P-256 (secp256r1, SEC 1 §3.3.1).
    P256,
}

impl AgreementAlgorithm {
    pub const ALL: [AgreementAlgorithm; 2] = [Self::X25519, Self::P256];

    /// Length of the public value: a 32-byte u-coordinate, or a 65-byte uncompressed point.
    pub const fn public_key_len(self) -> usize {
        match self {
            Self::X25519 => 32,
            Self::P256 => 65,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::X25519 => "x25519",
            Self::P256 => "p256",
        }
    }
}

/// Largest public value of any key-agreement algorithm.
pub const MAX_AGREEMENT_KEY_LEN: usize = 65;

/// A key-agreement secret: 32 bytes (an X25519 scalar before clamping, or a P-256 scalar in
/// [1, n-1]). Zeroed on drop.
#[derive(Clone)]
pub struct AgreementSecret {
    alg: AgreementAlgorithm,
    bytes: [u8; 32],
}

impl AgreementSecret {
    pub fn from_bytes(alg: AgreementAlgorithm, bytes: &[u8]) -> Result<Self, CryptoError> {
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| CryptoError::KeyLength)?;
        Ok(Self { alg, bytes })
    }

    /// The P-256 ECDH secret of a P-256 signing key: the same scalar, so its public value is
    /// the signing key's public point. This is what a static ECDH key exchange needs, in which
    /// the key a certificate or raw public key names is the key-agreement key itself
    /// (ECDH_ECDSA, RFC 4492 §2.1). An Ed25519 key has no P-256 counterpart.
    pub fn from_p256_signing_key(key: &SecretKey) -> Result<Self, CryptoError> {
        if key.algorithm() != SignatureAlgorithm::EcdsaP256 {
            return Err(CryptoError::InvalidKey);
        }
        Ok(Self {
            alg: AgreementAlgorithm::P256,
            bytes: key.bytes,
        })
    }

    pub fn algorithm(&self) -> AgreementAlgorithm {
        self.alg
    }

    pub fn to_bytes(&self) -> [u8; 32] {
        self.bytes
    }
}

impl Drop for AgreementSecret {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl fmt::Debug for AgreementSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AgreementSecret({}, <redacted>)", self.alg.name())
    }
}

/// A key-agreement public value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AgreementPublicKey {
    alg: AgreementAlgorithm,
    len: u8,
    bytes: [u8; MAX_AGREEMENT_KEY_LEN],
}

impl AgreementPublicKey {
    /// Wraps a public value after checking its length and, for P-256, that it is an
    /// uncompressed SEC 1 point on the curve (as [`crate::PublicKey::from_bytes`]; X25519
    /// takes any 32 bytes, and a low-order one shows as an all-zero shared secret).
    pub fn from_bytes(alg: AgreementAlgorithm, key: &[u8]) -> Result<Self, CryptoError> {
        if key.len() != alg.public_key_len() {
            return Err(CryptoError::KeyLength);
        }
        if alg == AgreementAlgorithm::P256
            && (key[0] != 0x04 || !crate::is_point(crate::SignatureAlgorithm::EcdsaP256, key))
        {
            return Err(CryptoError::InvalidKey);
        }
        let mut bytes = [0u8; MAX_AGREEMENT_KEY_LEN];
        bytes[..key.len()].copy_from_slice(key);
        Ok(Self {
            alg,
            len: key.len() as u8,
            bytes,
        })
    }

    pub fn algorithm(&self) -> AgreementAlgorithm {
        self.alg
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl fmt::Debug for AgreementPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AgreementPublicKey({}, ", self.alg.name())?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}
