//! The fast Cortex-M4 backend: P-256 from `p256-cm4` (the P256-Cortex-M4 assembly, ported to
//! Rust) and X25519 from `salty` (Haase's ARMv7E-M field arithmetic). Ed25519 stays with
//! `ed25519-dalek`: measured in the emulated Cortex-M4, salty's Ed25519 verification takes
//! about 1.8 times as many cycles as dalek's (it has no double-scalar multiplication), so it is
//! only used with the `cortex-m4-salty-ed25519` feature, for that comparison
//! (docs/device-costs.md). SHA-256 and AES-128-CCM-8 come from the portable backend. Built only for `target_arch = "arm"`; on
//! ARMv6-M (Cortex-M0+) `salty` falls back to its portable field arithmetic and `p256-cm4`
//! does not apply, so M0+ builds use [`crate::RustCrypto`].
//!
//! Outputs are bit-identical to [`crate::RustCrypto`]: ECDSA nonces are derived with RFC 6979
//! from the same HMAC-DRBG, so the same known-answer vectors check both backends.

use crate::rustcrypto::sha256;
use crate::RustCrypto;
use crate::{
    AgreementAlgorithm, AgreementPublicKey, AgreementSecret, CryptoError, CryptoProvider,
    PublicKey, Rng, SecretKey, Signature, SignatureAlgorithm, CCM16_NONCE_LEN, CCM8_TAG_LEN,
    CCM_NONCE_LEN,
};

/// The Cortex-M4 backend. A zero-sized value: pass `&CortexM4` where a provider is expected.
#[derive(Clone, Copy, Debug, Default)]
pub struct CortexM4;

/// The order n of the P-256 group, big-endian (SEC 2 §2.4.2).
const P256_N: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// The order L of the Ed25519 base point, little-endian (RFC 8032 §5.1).
#[cfg(feature = "cortex-m4-salty-ed25519")]
const ED25519_L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10,
];

/// Big-endian bytes to the little-endian 32-bit limbs `p256-cm4` works on.
fn words(be: &[u8]) -> [u32; 8] {
    let mut w = [0u32; 8];
    for (i, limb) in w.iter_mut().enumerate() {
        let at = 32 - 4 * (i + 1);
        *limb = u32::from_be_bytes([be[at], be[at + 1], be[at + 2], be[at + 3]]);
    }
    w
}

fn bytes(w: &[u32; 8]) -> [u8; 32] {
    let mut be = [0u8; 32];
    for (i, limb) in w.iter().enumerate() {
        let at = 32 - 4 * (i + 1);
        be[at..at + 4].copy_from_slice(&limb.to_be_bytes());
    }
    be
}

/// `a < b` for big-endian numbers of equal length (public values only).
fn less_be(a: &[u8], b: &[u8]) -> bool {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x < y;
        }
    }
    false
}

/// bits2octets of RFC 6979 §2.3.4 for SHA-256 on P-256: the hash reduced once modulo n.
fn reduce_mod_n(h: &[u8; 32]) -> [u8; 32] {
    if less_be(h, &P256_N) {
        return *h;
    }
    let mut out = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = h[i] as i16 - P256_N[i] as i16 - borrow;
        borrow = (d < 0) as i16;
        out[i] = d.rem_euclid(256) as u8;
    }
    out
}

fn p256_point(key: &[u8]) -> Result<([u32; 8], [u32; 8]), CryptoError> {
    if key.len() != 65 || key[0] != 0x04 {
        return Err(CryptoError::InvalidKey);
    }
    let (mut x, mut y) = ([0u32; 8], [0u32; 8]);
    if !p256_cm4::octet_string_to_point(&mut x, &mut y, key) {
        return Err(CryptoError::InvalidKey);
    }
    Ok((x, y))
}

fn p256_public(secret: &[u8; 32]) -> Result<[u8; 65], CryptoError> {
    let (mut x, mut y) = ([0u32; 8], [0u32; 8]);
    if !p256_cm4::keygen(&mut x, &mut y, &words(secret)) {
        return Err(CryptoError::InvalidKey);
    }
    let mut out = [0u8; 65];
    p256_cm4::point_to_octet_string_uncompressed(&mut out, &x, &y);
    Ok(out)
}

impl CryptoProvider for CortexM4 {
    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        RustCrypto.sha256(parts)
    }

    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        RustCrypto.hmac_sha256(key, parts)
    }

    fn x25519_secret_of_ed25519(&self, key: &SecretKey) -> Result<AgreementSecret, CryptoError> {
        RustCrypto.x25519_secret_of_ed25519(key)
    }

    fn x25519_public_of_ed25519(&self, key: &PublicKey) -> Result<AgreementPublicKey, CryptoError> {
        RustCrypto.x25519_public_of_ed25519(key)
    }

    fn generate(
        &self,
        alg: SignatureAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<SecretKey, CryptoError> {
        RustCrypto.generate(alg, rng)
    }

    fn public_key(&self, key: &SecretKey) -> Result<PublicKey, CryptoError> {
        match key.algorithm() {
            #[cfg(feature = "cortex-m4-salty-ed25519")]
            SignatureAlgorithm::Ed25519 => {
                let kp = salty::Keypair::from(&key.to_bytes());
                PublicKey::from_bytes(key.algorithm(), kp.public.as_bytes())
            }
            #[cfg(not(feature = "cortex-m4-salty-ed25519"))]
            SignatureAlgorithm::Ed25519 => RustCrypto.public_key(key),
            SignatureAlgorithm::EcdsaP256 => {
                PublicKey::from_bytes(key.algorithm(), &p256_public(&key.to_bytes())?)
            }
        }
    }

    fn sign(&self, key: &SecretKey, message: &[u8]) -> Result<Signature, CryptoError> {
        match key.algorithm() {
            #[cfg(feature = "cortex-m4-salty-ed25519")]
            SignatureAlgorithm::Ed25519 => {
                let kp = salty::Keypair::from(&key.to_bytes());
                Ok(Signature(kp.sign(message).to_bytes()))
            }
            #[cfg(not(feature = "cortex-m4-salty-ed25519"))]
            SignatureAlgorithm::Ed25519 => RustCrypto.sign(key, message),
            SignatureAlgorithm::EcdsaP256 => {
                let d = key.to_bytes();
                let h = sha256(&[message]);
                // RFC 6979 §3.2 deterministic nonce, as the portable backend uses.
                let k = rfc6979::generate_k::<sha2::Sha256, _>(
                    (&d).into(),
                    (&P256_N).into(),
                    (&reduce_mod_n(&h)).into(),
                    &[],
                );
                let (mut r, mut s) = ([0u32; 8], [0u32; 8]);
                let kw = words(&k);
                if !p256_cm4::sign(&mut r, &mut s, &h, &words(&d), &kw) {
                    // Only when r or s is zero (probability ~2^-256): RFC 6979 would retry.
                    return Err(CryptoError::InvalidKey);
                }
                let mut out = [0u8; 64];
                out[..32].copy_from_slice(&bytes(&r));
                out[32..].copy_from_slice(&bytes(&s));
                Ok(Signature(out))
            }
        }
    }

    fn verify(&self, key: &PublicKey, message: &[u8], signature: &[u8]) -> Result<(), CryptoError> {
        let sig: &[u8; 64] = signature
            .try_into()
            .map_err(|_| CryptoError::SignatureLength)?;
        match key.algorithm() {
            #[cfg(not(feature = "cortex-m4-salty-ed25519"))]
            SignatureAlgorithm::Ed25519 => RustCrypto.verify(key, message, signature),
            #[cfg(feature = "cortex-m4-salty-ed25519")]
            SignatureAlgorithm::Ed25519 => {
                // Canonical S (RFC 8032 §5.1.7 step 1): S < L, refusing malleated signatures.
                let mut s_be = [0u8; 32];
                for (i, b) in sig[32..].iter().rev().enumerate() {
                    s_be[i] = *b;
                }
                let mut l_be = ED25519_L;
                l_be.reverse();
                if !less_be(&s_be, &l_be) {
                    return Err(CryptoError::BadSignature);
                }
                let pk_bytes: &[u8; 32] = key
                    .as_bytes()
                    .try_into()
                    .map_err(|_| CryptoError::KeyLength)?;
                let pk =
                    salty::PublicKey::try_from(pk_bytes).map_err(|_| CryptoError::InvalidKey)?;
                pk.verify(message, &salty::Signature::from(sig))
                    .map_err(|_| CryptoError::BadSignature)
            }
            SignatureAlgorithm::EcdsaP256 => {
                let (x, y) = p256_point(key.as_bytes())?;
                let h = sha256(&[message]);
                if p256_cm4::verify(&x, &y, &h, &words(&sig[..32]), &words(&sig[32..])) {
                    Ok(())
                } else {
                    Err(CryptoError::BadSignature)
                }
            }
        }
    }

    fn generate_agreement(
        &self,
        alg: AgreementAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<AgreementSecret, CryptoError> {
        RustCrypto.generate_agreement(alg, rng)
    }

    fn agreement_public_key(
        &self,
        secret: &AgreementSecret,
    ) -> Result<AgreementPublicKey, CryptoError> {
        match secret.algorithm() {
            AgreementAlgorithm::X25519 => {
                let sk = salty::agreement::SecretKey::from_seed(&secret.to_bytes());
                AgreementPublicKey::from_bytes(secret.algorithm(), &sk.public().to_bytes())
            }
            AgreementAlgorithm::P256 => AgreementPublicKey::from_bytes(
                secret.algorithm(),
                &p256_public(&secret.to_bytes())?,
            ),
        }
    }

    fn agree(&self, secret: &AgreementSecret, peer_public: &[u8]) -> Result<[u8; 32], CryptoError> {
        match secret.algorithm() {
            AgreementAlgorithm::X25519 => {
                let peer: [u8; 32] = peer_public.try_into().map_err(|_| CryptoError::KeyLength)?;
                let shared = salty::agreement::x25519(secret.to_bytes(), peer);
                if shared.iter().all(|b| *b == 0) {
                    return Err(CryptoError::WeakSharedSecret);
                }
                Ok(shared)
            }
            AgreementAlgorithm::P256 => {
                let (x, y) = p256_point(peer_public)?;
                let mut shared = [0u8; 32];
                if !p256_cm4::ecdh_calc_shared_secret(
                    &mut shared,
                    &words(&secret.to_bytes()),
                    &x,
                    &y,
                ) {
                    return Err(CryptoError::InvalidKey);
                }
                Ok(shared)
            }
        }
    }

    fn aes128_ccm8_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        RustCrypto.aes128_ccm8_seal(key, nonce, aad, buf)
    }

    fn aes128_ccm8_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        RustCrypto.aes128_ccm8_open(key, nonce, aad, buf, tag)
    }

    fn aes128_ccm16_64_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM16_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        RustCrypto.aes128_ccm16_64_seal(key, nonce, aad, buf)
    }

    fn aes128_ccm16_64_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM16_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        RustCrypto.aes128_ccm16_64_open(key, nonce, aad, buf, tag)
    }

    fn aes128_gcm_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; crate::GCM_TAG_LEN], CryptoError> {
        RustCrypto.aes128_gcm_seal(key, nonce, aad, buf)
    }

    fn aes128_gcm_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; crate::GCM_TAG_LEN],
    ) -> Result<(), CryptoError> {
        RustCrypto.aes128_gcm_open(key, nonce, aad, buf, tag)
    }
}
