#![no_main]
//! COSE_Mac0 and MACed readings: parse any bytes, then check the tag under a fixed reading key
//! (which must reject everything the fuzzer makes) at the sent or a reconstructed number.
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
});
