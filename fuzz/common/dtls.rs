//! What the DTLS fuzz targets share (included with `#[path]`): a deterministic test-only
//! crypto provider that makes every MAC, cookie and Finished predictable (HMAC is all zeros,
//! CCM-8 the identity with an all-zero tag), so inputs get past authentication and reach
//! every state; a fixed RNG; and a PSK trust store.
use sigil_crypto::{
    AgreementAlgorithm, AgreementPublicKey, AgreementSecret, CryptoError, CryptoProvider,
    PublicKey, Rng, RustCrypto, SecretKey, Signature, SignatureAlgorithm, CCM8_TAG_LEN,
    CCM_NONCE_LEN,
};
use sigil_dtls::Trust;

/// Test-only: never use outside the fuzz targets.
#[derive(Clone, Copy)]
pub struct Transparent;

impl CryptoProvider for Transparent {
    fn sha256(&self, parts: &[&[u8]]) -> [u8; 32] {
        RustCrypto.sha256(parts)
    }
    fn hmac_sha256(&self, _: &[u8], _: &[&[u8]]) -> [u8; 32] {
        [0; 32]
    }
    fn generate(&self, a: SignatureAlgorithm, r: &mut dyn Rng) -> Result<SecretKey, CryptoError> {
        RustCrypto.generate(a, r)
    }
    fn public_key(&self, k: &SecretKey) -> Result<PublicKey, CryptoError> {
        RustCrypto.public_key(k)
    }
    fn sign(&self, k: &SecretKey, m: &[u8]) -> Result<Signature, CryptoError> {
        RustCrypto.sign(k, m)
    }
    fn verify(&self, k: &PublicKey, m: &[u8], s: &[u8]) -> Result<(), CryptoError> {
        RustCrypto.verify(k, m, s)
    }
    fn generate_agreement(
        &self,
        a: AgreementAlgorithm,
        r: &mut dyn Rng,
    ) -> Result<AgreementSecret, CryptoError> {
        RustCrypto.generate_agreement(a, r)
    }
    fn agreement_public_key(&self, s: &AgreementSecret) -> Result<AgreementPublicKey, CryptoError> {
        RustCrypto.agreement_public_key(s)
    }
    fn agree(&self, s: &AgreementSecret, p: &[u8]) -> Result<[u8; 32], CryptoError> {
        RustCrypto.agree(s, p)
    }
    fn aes128_ccm8_seal(
        &self,
        _: &[u8; 16],
        _: &[u8; CCM_NONCE_LEN],
        _: &[u8],
        _: &mut [u8],
    ) -> Result<[u8; CCM8_TAG_LEN], CryptoError> {
        Ok([0; CCM8_TAG_LEN])
    }
    fn aes128_ccm8_open(
        &self,
        _: &[u8; 16],
        _: &[u8; CCM_NONCE_LEN],
        _: &[u8],
        _: &mut [u8],
        tag: &[u8; CCM8_TAG_LEN],
    ) -> Result<(), CryptoError> {
        if tag == &[0; CCM8_TAG_LEN] {
            Ok(())
        } else {
            Err(CryptoError::BadTag)
        }
    }
}

/// Every random byte is 3.
pub struct Fixed;
impl Rng for Fixed {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        buf.fill(3);
        Ok(())
    }
}

/// Every non-empty PSK identity has the key `key!`.
pub struct Keys;
impl Trust for Keys {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (!identity.is_empty()).then(|| {
            key[..4].copy_from_slice(b"key!");
            4
        })
    }
}
