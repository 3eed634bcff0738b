//! The DTLS-over-CoAP endpoint (sigil-dtls-coap) fed arbitrary datagrams from a few peer
//! addresses, with expiry in between. A deterministic test-only crypto provider makes every
//! cookie, MAC and Finished predictable (HMAC is all zeros, CCM-8 the identity with an all-zero
//! tag), so inputs get past the cookie into the session resources. Input: datagrams, each
//! prefixed by a peer byte and a 2-byte length. Checked on every step: the table's bounds, and
//! no answer to a cookie-less `PUT /dtls` larger than its request.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_coap::{Code, Message};
use sigil_crypto::{
    AgreementAlgorithm, AgreementPublicKey, AgreementSecret, CryptoError, CryptoProvider,
    PublicKey, Rng, RustCrypto, SecretKey, Signature, SignatureAlgorithm, CCM8_TAG_LEN,
    CCM_NONCE_LEN,
};
use sigil_dtls::{ServerCredentials, Trust};
use sigil_dtls_coap::{Endpoint, EndpointConfig, MAX_DATAGRAM};

#[derive(Clone, Copy)]
/// Test-only: never use outside this fuzz target.
struct Transparent;

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

struct Fixed;
impl Rng for Fixed {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        buf.fill(3);
        Ok(())
    }
}

struct Keys;
impl Trust for Keys {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (!identity.is_empty()).then(|| {
            key[..4].copy_from_slice(b"key!");
            4
        })
    }
}

const PEERS: [&[u8]; 3] = [b"[2001:db8::1]:1", b"[2001:db8::2]:1", b"10.0.0.3:5683"];

fuzz_target!(|data: &[u8]| {
    let offer = ServerCredentials {
        psk: true,
        ..ServerCredentials::NONE
    };
    let config = EndpointConfig {
        max_per_peer: 2,
        block_szx: 2,
        ..EndpointConfig::default()
    };
    let mut endpoint: Endpoint<'_, Transparent, Keys, 3> =
        Endpoint::new(Transparent, &Keys, offer, config, [0; 32]);
    let mut out = [0u8; MAX_DATAGRAM];
    let mut rest = data;
    let mut now = 0u64;
    while rest.len() >= 3 {
        let peer = PEERS[usize::from(rest[0]) % PEERS.len()];
        let n = (usize::from(rest[1]) << 8 | usize::from(rest[2])).min(rest.len() - 3);
        let d = &rest[3..3 + n];
        rest = &rest[3 + n..];
        now += u64::from(n as u8) * 1000;
        let t = sigil_time::Instant::from_millis(now);
        if let Some(r) = endpoint.handle_datagram(t, peer, d, &mut Fixed, &mut out) {
            assert!(r <= out.len());
            let reply = Message::parse(&out[..r]).expect("the endpoint writes valid CoAP");
            if reply.code == Code::UNAUTHORIZED {
                assert!(r <= d.len(), "amplification: {r} bytes for {}", d.len());
            }
        }
        assert!(endpoint.sessions() <= 3);
        endpoint.handle_timeout(t);
    }
});
