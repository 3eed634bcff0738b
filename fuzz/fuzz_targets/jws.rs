#![no_main]
//! JWS compact serialization: parse any bytes, decode the payload, verify against a fixed key.
use libfuzzer_sys::fuzz_target;
use sigil_crypto::{PublicKey, RustCrypto, SignatureAlgorithm};
use sigil_objects::{ReadingFormat, SignedReading};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = SignedReading::parse(ReadingFormat::Jws, data) {
        let mut buf = vec![0u8; r.senml_len_bound()];
        let _ = r.senml(&mut buf);
        let key = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &[0x3d; 32]);
        if let Ok(key) = key {
            let _ = r.verify(&RustCrypto, &key, r.full_seq().unwrap_or(0), &mut []);
        }
    }
});
