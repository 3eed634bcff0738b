//! The portable backend: `ed25519-dalek`, `p256` and `sha2` from the RustCrypto and dalek
//! projects. Builds for every target, including Cortex-M0+.

use crate::{
    CryptoError, CryptoProvider, PublicKey, Rng, SecretKey, Signature, SignatureAlgorithm,
};
use sha2::{Digest, Sha256};

/// The RustCrypto backend. A zero-sized value: pass `&RustCrypto` where a provider is expected.
#[derive(Clone, Copy, Debug, Default)]
pub struct RustCrypto;

impl CryptoProvider for RustCrypto {
    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p);
        }
        h.finalize().into()
    }

    fn generate(
        &self,
        alg: SignatureAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<SecretKey, CryptoError> {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        match alg {
            SignatureAlgorithm::Ed25519 => {
                rng.fill(&mut seed[..])?;
                SecretKey::from_bytes(alg, &seed[..])
            }
            SignatureAlgorithm::EcdsaP256 => {
                // Rejection sampling: a scalar must be in [1, n-1]. The chance of a retry is
                // about 2^-32, so the bound is never reached by a working RNG.
                for _ in 0..64 {
                    rng.fill(&mut seed[..])?;
                    if p256::SecretKey::from_slice(&seed[..]).is_ok() {
                        return SecretKey::from_bytes(alg, &seed[..]);
                    }
                }
                Err(CryptoError::Rng)
            }
        }
    }

    fn public_key(&self, key: &SecretKey) -> Result<PublicKey, CryptoError> {
        match key.algorithm() {
            SignatureAlgorithm::Ed25519 => {
                let sk = ed25519_dalek::SigningKey::from_bytes(&key.to_bytes());
                PublicKey::from_bytes(key.algorithm(), sk.verifying_key().as_bytes())
            }
            SignatureAlgorithm::EcdsaP256 => {
                let sk = p256::ecdsa::SigningKey::from_slice(&key.to_bytes())
                    .map_err(|_| CryptoError::InvalidKey)?;
                let point = sk.verifying_key().to_encoded_point(false);
                PublicKey::from_bytes(key.algorithm(), point.as_bytes())
            }
        }
    }

    fn sign(&self, key: &SecretKey, message: &[u8]) -> Result<Signature, CryptoError> {
        match key.algorithm() {
            SignatureAlgorithm::Ed25519 => {
                use ed25519_dalek::Signer;
                let sk = ed25519_dalek::SigningKey::from_bytes(&key.to_bytes());
                Ok(Signature(sk.sign(message).to_bytes()))
            }
            SignatureAlgorithm::EcdsaP256 => {
                use p256::ecdsa::signature::Signer;
                let sk = p256::ecdsa::SigningKey::from_slice(&key.to_bytes())
                    .map_err(|_| CryptoError::InvalidKey)?;
                // Deterministic nonce (RFC 6979): no randomness needed at signing time.
                let sig: p256::ecdsa::Signature = sk.sign(message);
                let mut out = [0u8; 64];
                out.copy_from_slice(&sig.to_bytes());
                Ok(Signature(out))
            }
        }
    }

    fn verify(&self, key: &PublicKey, message: &[u8], signature: &[u8]) -> Result<(), CryptoError> {
        let sig: &[u8; 64] = signature
            .try_into()
            .map_err(|_| CryptoError::SignatureLength)?;
        match key.algorithm() {
            SignatureAlgorithm::Ed25519 => {
                let pk_bytes: &[u8; 32] = key
                    .as_bytes()
                    .try_into()
                    .map_err(|_| CryptoError::KeyLength)?;
                let vk = ed25519_dalek::VerifyingKey::from_bytes(pk_bytes)
                    .map_err(|_| CryptoError::InvalidKey)?;
                let sig = ed25519_dalek::Signature::from_bytes(sig);
                // Strict verification rejects small-order keys and non-canonical encodings.
                vk.verify_strict(message, &sig)
                    .map_err(|_| CryptoError::BadSignature)
            }
            SignatureAlgorithm::EcdsaP256 => {
                use p256::ecdsa::signature::Verifier;
                let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(key.as_bytes())
                    .map_err(|_| CryptoError::InvalidKey)?;
                let sig = p256::ecdsa::Signature::from_slice(sig)
                    .map_err(|_| CryptoError::BadSignature)?;
                vk.verify(message, &sig)
                    .map_err(|_| CryptoError::BadSignature)
            }
        }
    }
}
