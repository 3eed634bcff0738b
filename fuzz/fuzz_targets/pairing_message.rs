#![no_main]
//! Pairing messages (RFC 8387 §4.1): read any bytes as the outer COSE_Encrypt, open them on a
//! fixed P-256 device and a fixed Ed25519 one (which must refuse everything the fuzzer makes
//! without a panic), and read
//! them as a stored pairing record.
use libfuzzer_sys::fuzz_target;
use sigil_ace::{open_pairing, parse_pairing};
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::pairing::{decode_record, encode_record};
use sigil_identity::Identity;

fuzz_target!(|data: &[u8]| {
    let key = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &[0x11; 32]).unwrap();
    let public = RustCrypto.public_key(&key).unwrap();
    let device = Identity::of_key(&RustCrypto, &public, b"").unwrap();
    let ed_key = SecretKey::from_bytes(SignatureAlgorithm::Ed25519, &[0x22; 32]).unwrap();
    let ed_public = RustCrypto.public_key(&ed_key).unwrap();
    let ed_device = Identity::of_key(&RustCrypto, &ed_public, b"").unwrap();
    if let Ok(sealed) = parse_pairing(data) {
        let e = sealed.ephemeral;
        assert_eq!(e.as_bytes().len(), e.algorithm().public_key_len());
        assert!(sealed.ciphertext.len() >= 8);
    }
    assert!(open_pairing(data, &key, &device, None, &RustCrypto).is_err());
    assert!(open_pairing(data, &ed_key, &ed_device, None, &RustCrypto).is_err());
    if let Some(p) = decode_record(data) {
        // A record that reads writes back as the same bytes' meaning.
        assert_eq!(decode_record(&encode_record(&p)), Some(p));
    }
});
