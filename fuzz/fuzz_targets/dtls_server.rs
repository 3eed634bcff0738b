//! The DTLS PSK state machines fed arbitrary datagram sequences. A deterministic test-only
//! crypto provider makes every MAC, cookie and Finished predictable (HMAC is all zeros, CCM-8
//! is the identity with an all-zero tag), so inputs get past authentication and reach every
//! state. Input: datagrams, each prefixed by a 2-byte length.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_crypto::{
    AgreementAlgorithm, AgreementPublicKey, AgreementSecret, CryptoError, CryptoProvider,
    PublicKey, Rng, RustCrypto, SecretKey, Signature, SignatureAlgorithm, CCM8_TAG_LEN,
    CCM_NONCE_LEN,
};
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, Stateless, Trust,
};

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    key: None,
    require_client_key: false,
    ..ServerCredentials::NONE
};

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

/// The fuzz run's virtual clock (milliseconds).
fn ms(t: u64) -> sigil_time::Instant {
    sigil_time::Instant::from_millis(t)
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

fn datagrams(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    core::iter::from_fn(move || {
        if data.len() < 2 {
            return None;
        }
        let n = (usize::from(data[0]) << 8 | usize::from(data[1])).min(data.len() - 2);
        let d = &data[2..2 + n];
        data = &data[2 + n..];
        Some(d)
    })
}

fuzz_target!(|data: &[u8]| {
    let cookies = CookieKey::new([0; 32]);
    let mut server: Option<Connection<Transparent, Keys>> = None;
    let mut client = Connection::connect(
        Transparent,
        NoTrust,
        Config::default(),
        &mut Fixed,
        Credentials::Psk {
            identity: b"id",
            key: b"key!",
        },
        ms(0),
    )
    .unwrap();
    let mut out = [0u8; 2048];
    for (i, d) in datagrams(data).enumerate() {
        let now = i as u64 * 700;
        let _ = client.handle_datagram(ms(now), d);
        let _ = client.handle_timeout(ms(now));
        while client.poll_transmit(ms(now), &mut out).is_some() {}
        while client.poll_app_data(&mut out).is_some() {}
        match server.as_mut() {
            None => match cookies.respond(&Transparent, b"peer", d, &mut out) {
                Stateless::HelloVerify(n) => assert!(n <= d.len()),
                Stateless::Accept(cookie) => {
                    server = Connection::accept(
                        Transparent,
                        Keys,
                        Config::default(),
                        &PSK_ONLY,
                        &mut Fixed,
                        cookie,
                        d,
                        ms(now),
                    )
                    .ok()
                }
                Stateless::Drop(_) => {}
            },
            Some(s) => {
                let _ = s.handle_datagram(ms(now), d);
                let _ = s.handle_timeout(ms(now));
                while s.poll_transmit(ms(now), &mut out).is_some() {}
                while s.poll_app_data(&mut out).is_some() {}
            }
        }
    }
});
