//! Signed readings for tests: a SenML temperature signed in either wire form, with the key and
//! the identity that verify it.

use crate::rng::Fixed;
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use sigil_objects::reading::sign_reading;
use sigil_objects::senml::{self, Record, Value};
use sigil_objects::{Freshness, ReadingFormat};

/// A device key made from one repeated byte, its public key and identity `h(P)`.
pub struct Signer {
    pub key: SecretKey,
    pub public: PublicKey,
    pub identity: Identity,
}

impl Signer {
    pub fn new(alg: SignatureAlgorithm, seed: u8) -> Self {
        let key = RustCrypto
            .generate(alg, &mut Fixed(seed))
            .expect("key generation");
        let public = RustCrypto.public_key(&key).expect("public key");
        let identity = Identity::of_key(&RustCrypto, &public, b"").expect("identity");
        Signer {
            key,
            public,
            identity,
        }
    }

    /// A reading of `celsius` under `freshness`, in `format`.
    pub fn sign(&self, format: ReadingFormat, freshness: &Freshness, celsius: f64) -> Vec<u8> {
        let payload = temperature(format, celsius);
        let mut scratch = [0u8; 512];
        let mut out = [0u8; 1024];
        let n = sign_reading(
            &RustCrypto,
            &self.key,
            &self.identity,
            format,
            freshness,
            &payload,
            &mut scratch,
            &mut out,
        )
        .expect("signing");
        out[..n].to_vec()
    }

    /// A COSE reading with a full sequence number.
    pub fn cose(&self, seq: u64, celsius: f64) -> Vec<u8> {
        self.sign(
            ReadingFormat::Cose,
            &Freshness {
                seq,
                lsb_bits: None,
                timestamp: None,
            },
            celsius,
        )
    }
}

/// The SenML pack `[{"n":"t","u":"Cel","v":celsius}]` as CBOR (COSE) or JSON (JWS).
pub fn temperature(format: ReadingFormat, celsius: f64) -> Vec<u8> {
    let r = [Record {
        name: Some("t"),
        unit: Some("Cel"),
        value: Some(Value::Number(celsius)),
        ..Default::default()
    }];
    let mut buf = [0u8; 128];
    let n = match format {
        ReadingFormat::Cose => senml::encode_cbor(&r, &mut buf),
        ReadingFormat::Jws => senml::encode_json(&r, &mut buf),
    }
    .expect("SenML encoding");
    buf[..n].to_vec()
}
