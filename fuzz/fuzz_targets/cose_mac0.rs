#![no_main]
//! COSE_Mac0 and MACed readings: parse any bytes, then check the tag under a fixed reading key
//! (which must reject everything the fuzzer makes) at the sent or a reconstructed number. The
//! same bytes as a disclosed reading key (COSE_Key): a key that parses encodes and parses back to
//! the same key.
use libfuzzer_sys::fuzz_target;
use sigil_crypto::RustCrypto;
use sigil_identity::Identity;
use sigil_objects::{cose::CoseMac0, MacedReading, ReadingKey};

fuzz_target!(|data: &[u8]| {
    let _ = CoseMac0::parse(data);
    if let Ok(r) = MacedReading::parse(data) {
        let key = ReadingKey::derive(&RustCrypto, b"fuzz psk", &Identity::from_bytes([7; 16]));
        let seq = r.full_seq().unwrap_or(1);
        assert!(r.verify(&RustCrypto, &key, seq).is_err());
    }
    let node = Identity::from_bytes([7; 16]);
    if let Ok(key) = sigil_objects::mac::parse_reading_key(data, &node) {
        let mut out = [0u8; sigil_objects::mac::READING_KEY_COSE_LEN];
        let n = sigil_objects::mac::encode_reading_key(&key, &node, &mut out).unwrap();
        // Labels may come in another order: the parsed key must be the one encoded.
        assert_eq!(
            sigil_objects::mac::parse_reading_key(&out[..n], &node)
                .unwrap()
                .as_bytes(),
            key.as_bytes()
        );
    }
});
