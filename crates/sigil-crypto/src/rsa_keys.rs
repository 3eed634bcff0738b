//! RSA key values (feature `rsa`, for comparison only): a public key as its modulus and
//! exponent, and a private key as its PKCS#1 `RSAPrivateKey` DER (RFC 8017 §A.1.2), which the
//! provider parses. Moduli of 2048 to 4096 bits are accepted (RSA-2048 gives about 112-bit
//! security, NIST SP 800-57 Part 1 Table 2).

extern crate alloc;

use crate::CryptoError;
use alloc::vec::Vec;
use core::fmt;
use zeroize::Zeroizing;

/// Largest modulus accepted, in bytes (4096 bits).
pub const MAX_RSA_MODULUS_LEN: usize = 512;
/// Smallest modulus accepted, in bytes (2048 bits).
pub const MIN_RSA_MODULUS_LEN: usize = 256;

/// An RSA public key: big-endian modulus without leading zeros, and the public exponent.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RsaPublicKey {
    modulus: [u8; MAX_RSA_MODULUS_LEN],
    len: u16,
    exponent: u64,
}

impl RsaPublicKey {
    /// Wraps a modulus and exponent (big-endian, as an `RSAPublicKey`'s INTEGERs hold them,
    /// RFC 8017 §A.1.1; a leading zero byte is dropped). The modulus must have 2048 to 4096
    /// bits and be odd; the exponent must be odd, at least 3 and fit in 8 bytes.
    pub fn from_modulus_exponent(modulus: &[u8], exponent: &[u8]) -> Result<Self, CryptoError> {
        let n = strip_zeros(modulus);
        let e = strip_zeros(exponent);
        if n.len() < MIN_RSA_MODULUS_LEN
            || n.len() > MAX_RSA_MODULUS_LEN
            || n[0] & 0x80 == 0 && n.len() == MIN_RSA_MODULUS_LEN
        {
            return Err(CryptoError::KeyLength);
        }
        if n[n.len() - 1] & 1 == 0 || e.is_empty() || e.len() > 8 {
            return Err(CryptoError::InvalidKey);
        }
        let exponent = e.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
        if exponent < 3 || exponent & 1 == 0 {
            return Err(CryptoError::InvalidKey);
        }
        let mut key = Self {
            modulus: [0; MAX_RSA_MODULUS_LEN],
            len: n.len() as u16,
            exponent,
        };
        key.modulus[..n.len()].copy_from_slice(n);
        Ok(key)
    }

    /// The modulus, big-endian without leading zeros.
    pub fn modulus(&self) -> &[u8] {
        &self.modulus[..usize::from(self.len)]
    }

    pub fn exponent(&self) -> u64 {
        self.exponent
    }

    /// The modulus length in bytes: the length of every signature and ciphertext.
    pub fn size(&self) -> usize {
        usize::from(self.len)
    }
}

fn strip_zeros(v: &[u8]) -> &[u8] {
    let i = v.iter().position(|b| *b != 0).unwrap_or(v.len());
    &v[i..]
}

impl fmt::Debug for RsaPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RsaPublicKey({} bits, e = {}, n = ",
            self.size() * 8,
            self.exponent
        )?;
        for b in &self.modulus()[..8] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("..)")
    }
}

/// An RSA private key as PKCS#1 `RSAPrivateKey` DER (RFC 8017 §A.1.2). Zeroed on drop; the
/// provider parses and checks it when it uses it.
#[derive(Clone)]
pub struct RsaSecretKey {
    der: Zeroizing<Vec<u8>>,
}

impl RsaSecretKey {
    /// Keeps PKCS#1 DER bytes. Whether they hold a consistent key is checked by the provider
    /// ([`crate::CryptoProvider::rsa_public_key`] does so without using the key).
    pub fn from_pkcs1_der(der: &[u8]) -> Self {
        Self {
            der: Zeroizing::new(der.to_vec()),
        }
    }

    /// The PKCS#1 DER bytes, for the provider and this side's own storage only.
    pub fn pkcs1_der(&self) -> &[u8] {
        &self.der
    }
}

impl fmt::Debug for RsaSecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RsaSecretKey(<redacted>)")
    }
}

/// A ChaCha20 generator (`rand_chacha`) seeded with 32 bytes from the caller's RNG, for a
/// protocol step that needs randomness after the caller's RNG is gone: RSA blinding and
/// PKCS#1 v1.5 encryption padding later in a sans-IO handshake.
pub struct SeededRng(rand_chacha::ChaCha20Rng);

impl SeededRng {
    /// Draws the seed from `rng`.
    pub fn from_rng(rng: &mut dyn crate::Rng) -> Result<Self, CryptoError> {
        use rand_chacha::rand_core::SeedableRng;
        let mut seed = Zeroizing::new([0u8; 32]);
        rng.fill(&mut seed[..])?;
        Ok(Self(rand_chacha::ChaCha20Rng::from_seed(*seed)))
    }
}

impl crate::Rng for SeededRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        use rand_chacha::rand_core::RngCore;
        self.0.fill_bytes(buf);
        Ok(())
    }
}

impl fmt::Debug for SeededRng {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SeededRng(<secret>)")
    }
}
