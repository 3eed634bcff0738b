//! The portable backend: `ed25519-dalek`, `x25519-dalek`, `p256`, `sha2`, `aes` and `ccm` from
//! the dalek and RustCrypto projects. Builds for every 32- and 64-bit target, including
//! Cortex-M0+. Each curve is behind its own feature (`rustcrypto-ed25519` for Ed25519 and
//! X25519, `rustcrypto-p256` for ECDSA and ECDH on P-256) so a device links only the one it
//! uses; a disabled algorithm answers [`CryptoError::Unsupported`]. `p256` does not build for
//! 16-bit targets (AVR), `rustcrypto-ed25519` does.

use crate::{
    AgreementAlgorithm, AgreementPublicKey, AgreementSecret, CryptoError, CryptoProvider,
    PublicKey, Rng, SecretKey, Signature, SignatureAlgorithm, CCM16_NONCE_LEN, CCM8_TAG_LEN,
    CCM_NONCE_LEN,
};
use ccm::aead::{AeadInPlace, KeyInit};
use sha2::{Digest, Sha256};

/// AES-128-CCM with an 8-byte tag and a 12-byte nonce (RFC 6655 §3).
type Aes128Ccm8 = ccm::Ccm<aes::Aes128, ccm::consts::U8, ccm::consts::U12>;
/// COSE AES-CCM-16-64-128: an 8-byte tag and a 13-byte nonce (RFC 9053 §4.2).
type Aes128Ccm16_64 = ccm::Ccm<aes::Aes128, ccm::consts::U8, ccm::consts::U13>;

/// Draws a P-256 scalar in [1, n-1] by rejection sampling. A retry happens with probability
/// about 2^-32, so the bound is never reached by a working RNG.
#[cfg(feature = "rustcrypto-p256")]
pub(crate) fn p256_scalar(rng: &mut dyn Rng) -> Result<zeroize::Zeroizing<[u8; 32]>, CryptoError> {
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    for _ in 0..64 {
        rng.fill(&mut seed[..])?;
        if p256::SecretKey::from_slice(&seed[..]).is_ok() {
            return Ok(seed);
        }
    }
    Err(CryptoError::Rng)
}

pub(crate) fn ccm8_seal(
    key: &[u8; 16],
    nonce: &[u8; CCM_NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
    let cipher = Aes128Ccm8::new(key.into());
    let tag = cipher
        .encrypt_in_place_detached(nonce.into(), aad, buf)
        .map_err(|_| CryptoError::Unsupported)?;
    Ok(tag.into())
}

pub(crate) fn ccm8_open(
    key: &[u8; 16],
    nonce: &[u8; CCM_NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; CCM8_TAG_LEN],
) -> Result<(), CryptoError> {
    let cipher = Aes128Ccm8::new(key.into());
    cipher
        .decrypt_in_place_detached(nonce.into(), aad, buf, tag.into())
        .map_err(|_| CryptoError::BadTag)
}

#[cfg(feature = "rustcrypto-gcm")]
pub(crate) fn gcm_seal(
    key: &[u8; 16],
    nonce: &[u8; CCM_NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
) -> Result<[u8; crate::GCM_TAG_LEN], CryptoError> {
    let cipher = aes_gcm::Aes128Gcm::new(key.into());
    let tag = cipher
        .encrypt_in_place_detached(nonce.into(), aad, buf)
        .map_err(|_| CryptoError::Unsupported)?;
    Ok(tag.into())
}

#[cfg(feature = "rustcrypto-gcm")]
pub(crate) fn gcm_open(
    key: &[u8; 16],
    nonce: &[u8; CCM_NONCE_LEN],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; crate::GCM_TAG_LEN],
) -> Result<(), CryptoError> {
    let cipher = aes_gcm::Aes128Gcm::new(key.into());
    cipher
        .decrypt_in_place_detached(nonce.into(), aad, buf, tag.into())
        .map_err(|_| CryptoError::BadTag)
}

pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::Mac;
    // HMAC accepts keys of any length (RFC 2104 §2), so `new_from_slice` cannot fail.
    let mut mac = match <hmac::Hmac<Sha256> as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

pub(crate) fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// The RustCrypto backend. A zero-sized value: pass `&RustCrypto` where a provider is expected.
#[derive(Clone, Copy, Debug, Default)]
pub struct RustCrypto;

// Built with neither curve (SHA-256, HMAC and AES-CCM only: a node with only a pre-shared
// key), the public-key methods answer `Unsupported` without looking at their arguments.
#[cfg_attr(
    not(any(feature = "rustcrypto-ed25519", feature = "rustcrypto-p256")),
    allow(unused_variables)
)]
impl CryptoProvider for RustCrypto {
    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        sha256(parts)
    }

    fn hmac_sha256(&self, key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        hmac_sha256(key, parts)
    }

    fn generate(
        &self,
        alg: SignatureAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<SecretKey, CryptoError> {
        match alg {
            #[cfg(feature = "rustcrypto-ed25519")]
            SignatureAlgorithm::Ed25519 => {
                let mut seed = zeroize::Zeroizing::new([0u8; 32]);
                rng.fill(&mut seed[..])?;
                SecretKey::from_bytes(alg, &seed[..])
            }
            #[cfg(feature = "rustcrypto-p256")]
            SignatureAlgorithm::EcdsaP256 => SecretKey::from_bytes(alg, &p256_scalar(rng)?[..]),
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn public_key(&self, key: &SecretKey) -> Result<PublicKey, CryptoError> {
        match key.algorithm() {
            #[cfg(feature = "rustcrypto-ed25519")]
            SignatureAlgorithm::Ed25519 => {
                let sk = ed25519_dalek::SigningKey::from_bytes(&key.to_bytes());
                PublicKey::from_bytes(key.algorithm(), sk.verifying_key().as_bytes())
            }
            #[cfg(feature = "rustcrypto-p256")]
            SignatureAlgorithm::EcdsaP256 => {
                let sk = p256::ecdsa::SigningKey::from_slice(&key.to_bytes())
                    .map_err(|_| CryptoError::InvalidKey)?;
                let point = sk.verifying_key().to_encoded_point(false);
                PublicKey::from_bytes(key.algorithm(), point.as_bytes())
            }
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn sign(&self, key: &SecretKey, message: &[u8]) -> Result<Signature, CryptoError> {
        match key.algorithm() {
            #[cfg(feature = "rustcrypto-ed25519")]
            SignatureAlgorithm::Ed25519 => {
                use ed25519_dalek::Signer;
                let sk = ed25519_dalek::SigningKey::from_bytes(&key.to_bytes());
                Ok(Signature(sk.sign(message).to_bytes()))
            }
            #[cfg(feature = "rustcrypto-p256")]
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
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn verify(&self, key: &PublicKey, message: &[u8], signature: &[u8]) -> Result<(), CryptoError> {
        let sig: &[u8; 64] = signature
            .try_into()
            .map_err(|_| CryptoError::SignatureLength)?;
        match key.algorithm() {
            #[cfg(feature = "rustcrypto-ed25519")]
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
            #[cfg(feature = "rustcrypto-p256")]
            SignatureAlgorithm::EcdsaP256 => {
                use p256::ecdsa::signature::Verifier;
                let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(key.as_bytes())
                    .map_err(|_| CryptoError::InvalidKey)?;
                let sig = p256::ecdsa::Signature::from_slice(sig)
                    .map_err(|_| CryptoError::BadSignature)?;
                vk.verify(message, &sig)
                    .map_err(|_| CryptoError::BadSignature)
            }
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn generate_agreement(
        &self,
        alg: AgreementAlgorithm,
        rng: &mut dyn Rng,
    ) -> Result<AgreementSecret, CryptoError> {
        match alg {
            #[cfg(feature = "rustcrypto-ed25519")]
            AgreementAlgorithm::X25519 => {
                let mut seed = zeroize::Zeroizing::new([0u8; 32]);
                rng.fill(&mut seed[..])?;
                AgreementSecret::from_bytes(alg, &seed[..])
            }
            #[cfg(feature = "rustcrypto-p256")]
            AgreementAlgorithm::P256 => AgreementSecret::from_bytes(alg, &p256_scalar(rng)?[..]),
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn agreement_public_key(
        &self,
        secret: &AgreementSecret,
    ) -> Result<AgreementPublicKey, CryptoError> {
        match secret.algorithm() {
            #[cfg(feature = "rustcrypto-ed25519")]
            AgreementAlgorithm::X25519 => {
                let sk = x25519_dalek::StaticSecret::from(secret.to_bytes());
                let pk = x25519_dalek::PublicKey::from(&sk);
                AgreementPublicKey::from_bytes(secret.algorithm(), pk.as_bytes())
            }
            #[cfg(feature = "rustcrypto-p256")]
            AgreementAlgorithm::P256 => {
                let sk = p256::SecretKey::from_slice(&secret.to_bytes())
                    .map_err(|_| CryptoError::InvalidKey)?;
                let point = p256::elliptic_curve::sec1::ToEncodedPoint::to_encoded_point(
                    &sk.public_key(),
                    false,
                );
                AgreementPublicKey::from_bytes(secret.algorithm(), point.as_bytes())
            }
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn agree(&self, secret: &AgreementSecret, peer_public: &[u8]) -> Result<[u8; 32], CryptoError> {
        match secret.algorithm() {
            #[cfg(feature = "rustcrypto-ed25519")]
            AgreementAlgorithm::X25519 => {
                let peer: [u8; 32] = peer_public.try_into().map_err(|_| CryptoError::KeyLength)?;
                let sk = x25519_dalek::StaticSecret::from(secret.to_bytes());
                let shared = sk.diffie_hellman(&x25519_dalek::PublicKey::from(peer));
                if !shared.was_contributory() {
                    return Err(CryptoError::WeakSharedSecret);
                }
                Ok(shared.to_bytes())
            }
            #[cfg(feature = "rustcrypto-p256")]
            AgreementAlgorithm::P256 => {
                AgreementPublicKey::from_bytes(AgreementAlgorithm::P256, peer_public)?;
                let sk = p256::SecretKey::from_slice(&secret.to_bytes())
                    .map_err(|_| CryptoError::InvalidKey)?;
                let peer = p256::PublicKey::from_sec1_bytes(peer_public)
                    .map_err(|_| CryptoError::InvalidKey)?;
                let shared = p256::ecdh::diffie_hellman(sk.to_nonzero_scalar(), peer.as_affine());
                let mut out = [0u8; 32];
                out.copy_from_slice(shared.raw_secret_bytes());
                Ok(out)
            }
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn x25519_secret_of_ed25519(&self, key: &SecretKey) -> Result<AgreementSecret, CryptoError> {
        match key.algorithm() {
            #[cfg(feature = "rustcrypto-ed25519")]
            SignatureAlgorithm::Ed25519 => {
                let sk = ed25519_dalek::SigningKey::from_bytes(&key.to_bytes());
                let scalar = zeroize::Zeroizing::new(sk.to_scalar_bytes());
                AgreementSecret::from_bytes(AgreementAlgorithm::X25519, &scalar[..])
            }
            SignatureAlgorithm::EcdsaP256 => Err(CryptoError::InvalidKey),
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn x25519_public_of_ed25519(&self, key: &PublicKey) -> Result<AgreementPublicKey, CryptoError> {
        match key.algorithm() {
            #[cfg(feature = "rustcrypto-ed25519")]
            SignatureAlgorithm::Ed25519 => {
                let bytes: &[u8; 32] = key
                    .as_bytes()
                    .try_into()
                    .map_err(|_| CryptoError::KeyLength)?;
                let vk = ed25519_dalek::VerifyingKey::from_bytes(bytes)
                    .map_err(|_| CryptoError::InvalidKey)?;
                if vk.is_weak() {
                    return Err(CryptoError::InvalidKey);
                }
                AgreementPublicKey::from_bytes(
                    AgreementAlgorithm::X25519,
                    &vk.to_montgomery().to_bytes(),
                )
            }
            SignatureAlgorithm::EcdsaP256 => Err(CryptoError::InvalidKey),
            #[allow(unreachable_patterns)]
            _ => Err(CryptoError::Unsupported),
        }
    }

    fn aes128_ccm8_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        ccm8_seal(key, nonce, aad, buf)
    }

    fn aes128_ccm16_64_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM16_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        let cipher = Aes128Ccm16_64::new(key.into());
        let tag = cipher
            .encrypt_in_place_detached(nonce.into(), aad, buf)
            .map_err(|_| CryptoError::Unsupported)?;
        Ok(tag.into())
    }

    fn aes128_ccm16_64_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM16_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        let cipher = Aes128Ccm16_64::new(key.into());
        cipher
            .decrypt_in_place_detached(nonce.into(), aad, buf, tag.into())
            .map_err(|_| CryptoError::BadTag)
    }

    fn aes128_ccm8_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        ccm8_open(key, nonce, aad, buf, tag)
    }

    #[cfg(feature = "rustcrypto-gcm")]
    fn aes128_gcm_seal(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; crate::GCM_TAG_LEN], CryptoError> {
        gcm_seal(key, nonce, aad, buf)
    }

    #[cfg(feature = "rustcrypto-gcm")]
    fn aes128_gcm_open(
        &self,
        key: &[u8; 16],
        nonce: &[u8; CCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; crate::GCM_TAG_LEN],
    ) -> Result<(), CryptoError> {
        gcm_open(key, nonce, aad, buf, tag)
    }

    #[cfg(feature = "rsa")]
    fn rsa_public_key(
        &self,
        key: &crate::RsaSecretKey,
    ) -> Result<crate::RsaPublicKey, CryptoError> {
        rsa_impl::public_key(key)
    }

    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_sha256_sign(
        &self,
        key: &crate::RsaSecretKey,
        message: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        rsa_impl::sign(key, message, rng, out)
    }

    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_sha256_verify(
        &self,
        key: &crate::RsaPublicKey,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        rsa_impl::verify(key, message, signature)
    }

    #[cfg(feature = "rsa")]
    fn rsa_pkcs1_encrypt(
        &self,
        key: &crate::RsaPublicKey,
        message: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        rsa_impl::encrypt(key, message, rng, out)
    }

    #[cfg(feature = "rsa")]
    fn rsa_tls_premaster(
        &self,
        key: &crate::RsaSecretKey,
        ciphertext: &[u8],
        client_version: [u8; 2],
        rng: &mut dyn Rng,
    ) -> Result<zeroize::Zeroizing<[u8; 48]>, CryptoError> {
        rsa_impl::tls_premaster(key, ciphertext, client_version, rng)
    }
}

/// RSA through the RustCrypto `rsa` crate (feature `rsa`, for comparison only).
#[cfg(feature = "rsa")]
mod rsa_impl {
    extern crate alloc;

    use crate::{CryptoError, Rng, RsaPublicKey, RsaSecretKey};
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::rand_core::{self, CryptoRng, RngCore};
    use rsa::signature::{RandomizedSigner, SignatureEncoding, Verifier};
    use rsa::traits::PublicKeyParts;
    use subtle::{ConditionallySelectable, ConstantTimeEq};
    use zeroize::Zeroizing;

    /// The caller's RNG as the `rand_core` one the `rsa` crate takes. `fill_bytes` cannot
    /// fail, so a failure is remembered and reported once the operation returns.
    struct RngAdapter<'a> {
        rng: &'a mut dyn Rng,
        failed: bool,
    }

    impl<'a> RngAdapter<'a> {
        fn new(rng: &'a mut dyn Rng) -> Self {
            Self { rng, failed: false }
        }

        fn check(&self) -> Result<(), CryptoError> {
            if self.failed {
                Err(CryptoError::Rng)
            } else {
                Ok(())
            }
        }
    }

    impl RngCore for RngAdapter<'_> {
        fn next_u32(&mut self) -> u32 {
            rand_core::impls::next_u32_via_fill(self)
        }
        fn next_u64(&mut self) -> u64 {
            rand_core::impls::next_u64_via_fill(self)
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            if self.rng.fill(dest).is_err() {
                self.failed = true;
            }
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
            self.fill_bytes(dest);
            Ok(())
        }
    }

    impl CryptoRng for RngAdapter<'_> {}

    fn private(key: &RsaSecretKey) -> Result<rsa::RsaPrivateKey, CryptoError> {
        // `from_pkcs1_der` validates the key (RsaPrivateKey::from_components).
        let k = rsa::RsaPrivateKey::from_pkcs1_der(key.pkcs1_der())
            .map_err(|_| CryptoError::InvalidKey)?;
        let bits = k.size() * 8;
        if !(2048..=4096).contains(&bits) {
            return Err(CryptoError::KeyLength);
        }
        Ok(k)
    }

    fn public(key: &RsaPublicKey) -> Result<rsa::RsaPublicKey, CryptoError> {
        rsa::RsaPublicKey::new(
            rsa::BigUint::from_bytes_be(key.modulus()),
            rsa::BigUint::from(key.exponent()),
        )
        .map_err(|_| CryptoError::InvalidKey)
    }

    pub(crate) fn public_key(key: &RsaSecretKey) -> Result<RsaPublicKey, CryptoError> {
        let k = private(key)?;
        RsaPublicKey::from_modulus_exponent(&k.n().to_bytes_be(), &k.e().to_bytes_be())
    }

    pub(crate) fn sign(
        key: &RsaSecretKey,
        message: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        let k = private(key)?;
        let n = k.size();
        let out = out.get_mut(..n).ok_or(CryptoError::SignatureLength)?;
        let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(k);
        let mut rng = RngAdapter::new(rng);
        let sig = signer
            .try_sign_with_rng(&mut rng, message)
            .map_err(|_| CryptoError::InvalidKey)?;
        rng.check()?;
        let bytes = sig.to_bytes();
        if bytes.len() != n {
            return Err(CryptoError::SignatureLength);
        }
        out.copy_from_slice(&bytes);
        Ok(n)
    }

    pub(crate) fn verify(
        key: &RsaPublicKey,
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), CryptoError> {
        if signature.len() != key.size() {
            return Err(CryptoError::SignatureLength);
        }
        let verifier = rsa::pkcs1v15::VerifyingKey::<sha2::Sha256>::new(public(key)?);
        let sig =
            rsa::pkcs1v15::Signature::try_from(signature).map_err(|_| CryptoError::BadSignature)?;
        verifier
            .verify(message, &sig)
            .map_err(|_| CryptoError::BadSignature)
    }

    pub(crate) fn encrypt(
        key: &RsaPublicKey,
        message: &[u8],
        rng: &mut dyn Rng,
        out: &mut [u8],
    ) -> Result<usize, CryptoError> {
        let k = public(key)?;
        let n = key.size();
        let out = out.get_mut(..n).ok_or(CryptoError::KeyLength)?;
        let mut rng = RngAdapter::new(rng);
        let c = k
            .encrypt(&mut rng, rsa::Pkcs1v15Encrypt, message)
            .map_err(|_| CryptoError::KeyLength)?;
        rng.check()?;
        if c.len() != n {
            return Err(CryptoError::KeyLength);
        }
        out.copy_from_slice(&c);
        Ok(n)
    }

    /// RFC 5246 §7.4.7.1. The padding of a 48-byte message in a k-byte block is
    /// `00 02 PS 00 M` with PS k - 51 non-zero bytes: every position is fixed, so the check
    /// reads each byte once and combines the results with `subtle`, branching on nothing.
    pub(crate) fn tls_premaster(
        key: &RsaSecretKey,
        ciphertext: &[u8],
        client_version: [u8; 2],
        rng: &mut dyn Rng,
    ) -> Result<Zeroizing<[u8; 48]>, CryptoError> {
        let k = private(key)?;
        let n = k.size();
        if ciphertext.len() != n {
            return Err(CryptoError::KeyLength);
        }
        // Step 1: the random replacement, drawn before anything is decrypted.
        let mut secret = Zeroizing::new([0u8; 48]);
        rng.fill(&mut secret[2..])?;
        // Step 2: decrypt (blinded). A ciphertext not below the modulus, or a failed CRT
        // check, leaves `em` all zero, which fails the padding check below like a bad
        // padding does.
        let mut em = Zeroizing::new(alloc::vec![0u8; n]);
        let mut adapter = RngAdapter::new(rng);
        let c = rsa::BigUint::from_bytes_be(ciphertext);
        let decrypted = rsa::hazmat::rsa_decrypt_and_check(&k, Some(&mut adapter), &c);
        adapter.check()?;
        if let Ok(m) = decrypted {
            let m = Zeroizing::new(m.to_bytes_be());
            if m.len() <= n {
                em[n - m.len()..].copy_from_slice(&m);
            }
        }
        // Step 3: the padding, in constant time.
        let mut good = em[0].ct_eq(&0) & em[1].ct_eq(&2) & em[n - 49].ct_eq(&0);
        for b in &em[2..n - 49] {
            good &= !b.ct_eq(&0);
        }
        for (i, s) in secret[2..].iter_mut().enumerate() {
            *s = u8::conditional_select(s, &em[n - 46 + i], good);
        }
        secret[..2].copy_from_slice(&client_version);
        Ok(secret)
    }
}
