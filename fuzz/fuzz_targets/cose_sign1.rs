#![no_main]
//! COSE_Sign1 and Sigil readings: parse any bytes, build the Sig_structure, and run the full
//! end-to-end verification against a fixed key (which must reject everything the fuzzer makes).
use libfuzzer_sys::fuzz_target;
use sigil_crypto::{PublicKey, RustCrypto, SignatureAlgorithm};
use sigil_identity::Identity;
use sigil_objects::{cose::CoseSign1, ReadingFormat, SignedReading};

const KEY: [u8; 32] = [
    0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07, 0x3a,
    0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07, 0x51, 0x1a,
];

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = CoseSign1::parse(data) {
        let mut scratch = vec![0u8; data.len() + 64];
        c.to_be_signed(&[], &mut scratch)
            .expect("scratch is large enough");
    }
    if let Ok(r) = SignedReading::parse(ReadingFormat::Cose, data) {
        let key = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &KEY).unwrap();
        let id = Identity::of_key(&RustCrypto, &key, b"").unwrap();
        let mut scratch = vec![0u8; r.scratch_len()];
        let seq = r.full_seq().unwrap_or(1);
        assert!(r
            .verify_end_to_end(&RustCrypto, &key, &id, seq, &mut scratch)
            .is_err());
    }
});
