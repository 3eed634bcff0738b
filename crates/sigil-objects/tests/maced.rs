//! MACed readings (COSE_Mac0, HMAC 256/64) under a reading key derived from a PSK: the tag and
//! the key checked against independent computations, round trips, and what must fail.

use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use sigil_objects::cbor::Encoder;
use sigil_objects::cose::{self, CoseError, SeqField};
use sigil_objects::mac::{mac_reading, READING_KEY_INFO};
use sigil_objects::reading::sign_reading;
use sigil_objects::{
    Freshness, MacedReading, ReadingError, ReadingFormat, ReadingKey, SignedReading,
};
use sigil_testkit::readings::temperature;
use sigil_testkit::Fixed;

const PSK: &[u8] = b"sixteen byte psk";
const NODE: [u8; 16] = [
    0x3f, 0x0e, 0x6a, 0x1d, 0x5c, 0x82, 0x11, 0x90, 0x4b, 0x27, 0xd6, 0x08, 0xe4, 0x73, 0xa9, 0x55,
];

const FRESH: Freshness = Freshness {
    seq: 1000,
    lsb_bits: None,
    timestamp: Some(1_700_000_000),
};

fn node() -> Identity {
    Identity::from_bytes(NODE)
}

fn mac(key: &ReadingKey, fresh: Freshness) -> Vec<u8> {
    let payload = temperature(ReadingFormat::Cose, 21.5);
    let mut out = [0u8; 256];
    let n = mac_reading(&RustCrypto, key, &node(), &fresh, &payload, &mut out).unwrap();
    out[..n].to_vec()
}

fn check(key: &ReadingKey, bytes: &[u8], full_seq: u64) -> Result<(), ReadingError> {
    MacedReading::parse(bytes)?.verify(&RustCrypto, key, full_seq)
}

#[test]
fn reading_key_is_rfc5869_hkdf_of_the_psk_with_the_identity_in_info() {
    let key = ReadingKey::derive(&RustCrypto, PSK, &node());
    let mut info = READING_KEY_INFO.to_vec();
    info.extend_from_slice(&NODE);
    let mut expected = [0u8; 32];
    hkdf::Hkdf::<sha2::Sha256>::new(None, PSK)
        .expand(&info, &mut expected)
        .unwrap();
    assert_eq!(key.as_bytes(), &expected);
    // The label is its own: the key is neither the PSK nor the key of another identity.
    assert_ne!(&key.as_bytes()[..PSK.len()], PSK);
    let other = ReadingKey::derive(&RustCrypto, PSK, &Identity::from_bytes([0; 16]));
    assert_ne!(key.as_bytes(), other.as_bytes());
}

#[test]
fn tag_is_hmac_sha256_over_the_whole_mac_structure_cut_to_8_bytes() {
    let key = ReadingKey::derive(&RustCrypto, PSK, &node());
    let bytes = mac(&key, FRESH);
    let r = MacedReading::parse(&bytes).unwrap();
    let c = cose::CoseMac0::parse(&bytes).unwrap();
    // MAC_structure = ["MAC0", protected, h'', payload] (RFC 9052 §6.3), built whole here.
    let mut structure = [0u8; 256];
    let mut e = Encoder::new(&mut structure);
    e.array(4)
        .unwrap()
        .text("MAC0")
        .unwrap()
        .bytes(c.protected_raw)
        .unwrap()
        .bytes(&[])
        .unwrap()
        .bytes(c.payload)
        .unwrap();
    let n = e.finish();
    let full = RustCrypto.hmac_sha256(key.as_bytes(), &[&structure[..n]]);
    assert_eq!(c.tag, &full[..8]);
    assert_eq!(r.kid, node());
    assert_eq!(r.seq, SeqField::Full(1000));
    assert_eq!(r.timestamp, Some(1_700_000_000));
    assert_eq!(r.senml(), temperature(ReadingFormat::Cose, 21.5).as_slice());
    // Tagged COSE_Mac0 (17), four elements, protected {1: 4, 4: kid, -65537: seq, -65538: t}.
    assert_eq!(&bytes[..2], &[0xd1, 0x84]);
    assert_eq!(&c.protected_raw[..3], &[0xa4, 0x01, 0x04]);
    assert_eq!(check(&key, &bytes, 1000), Ok(()));
}

#[test]
fn low_bits_bind_the_full_number_through_the_external_aad() {
    let key = ReadingKey::derive(&RustCrypto, PSK, &node());
    let fresh = Freshness {
        seq: 0x1_0005,
        lsb_bits: Some(8),
        timestamp: None,
    };
    let bytes = mac(&key, fresh);
    let r = MacedReading::parse(&bytes).unwrap();
    assert_eq!(r.seq, SeqField::LowBits { k: 8, bits: 5 });
    assert_eq!(r.full_seq(), None);
    assert_eq!(r.verify(&RustCrypto, &key, 0x1_0005), Ok(()));
    // Same low bits, another full number: the tag covers the full number.
    assert_eq!(
        r.verify(&RustCrypto, &key, 0x2_0005),
        Err(ReadingError::BadTag)
    );
    assert_eq!(
        r.verify(&RustCrypto, &key, 0x1_0006),
        Err(ReadingError::SequenceMismatch)
    );
}

#[test]
fn mac0_is_57_bytes_shorter_than_the_ed25519_sign1_of_the_same_reading() {
    let key = ReadingKey::derive(&RustCrypto, PSK, &node());
    let maced = mac(&key, FRESH);
    let sk: SecretKey = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Fixed(7))
        .unwrap();
    let payload = temperature(ReadingFormat::Cose, 21.5);
    let (mut scratch, mut out) = ([0u8; 256], [0u8; 256]);
    let n = sign_reading(
        &RustCrypto,
        &sk,
        &node(),
        ReadingFormat::Cose,
        &FRESH,
        &payload,
        &mut scratch,
        &mut out,
    )
    .unwrap();
    // 64-byte signature with a 2-byte head against an 8-byte tag with a 1-byte head.
    assert_eq!(n - maced.len(), 57);
    assert_eq!(maced.len(), 68, "docs/wire-formats.md gives this size");
}

#[test]
fn tampering_wrong_keys_and_wrong_numbers_are_refused() {
    let key = ReadingKey::derive(&RustCrypto, PSK, &node());
    let bytes = mac(&key, FRESH);
    // Every single-bit flip is refused, whatever part of the structure it hits.
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x01;
        assert!(check(&key, &b, 1000).is_err(), "flip at byte {i} accepted");
    }
    let mut b = bytes.clone();
    let last = b.len() - 1;
    b[last] ^= 0x80;
    assert_eq!(check(&key, &b, 1000), Err(ReadingError::BadTag));
    let wrong_psk = ReadingKey::derive(&RustCrypto, b"another sixteen!", &node());
    assert_eq!(check(&wrong_psk, &bytes, 1000), Err(ReadingError::BadTag));
    let other_node = ReadingKey::derive(&RustCrypto, PSK, &Identity::from_bytes([9; 16]));
    assert_eq!(check(&other_node, &bytes, 1000), Err(ReadingError::BadTag));
    assert_eq!(
        check(&key, &bytes, 1001),
        Err(ReadingError::SequenceMismatch)
    );
}

fn hand_built(protected: &[u8], unprotected: &[u8], tag: &[u8]) -> Vec<u8> {
    let payload = temperature(ReadingFormat::Cose, 21.5);
    let mut out = [0u8; 256];
    let mut e = Encoder::new(&mut out);
    e.tag(17)
        .unwrap()
        .array(4)
        .unwrap()
        .bytes(protected)
        .unwrap()
        .raw(unprotected)
        .unwrap()
        .bytes(&payload)
        .unwrap()
        .bytes(tag)
        .unwrap();
    let n = e.finish();
    out[..n].to_vec()
}

fn protected(alg: i64, with_kid: bool) -> Vec<u8> {
    let mut out = [0u8; 64];
    let mut e = Encoder::new(&mut out);
    e.map(2 + usize::from(with_kid)).unwrap();
    e.i64(1).unwrap().i64(alg).unwrap();
    if with_kid {
        e.i64(4).unwrap().bytes(&NODE).unwrap();
    }
    e.i64(-65537).unwrap().u64(1).unwrap();
    let n = e.finish();
    out[..n].to_vec()
}

#[test]
fn malformed_mac0_readings_are_refused_by_name() {
    let key = ReadingKey::derive(&RustCrypto, PSK, &node());
    let tag = [0u8; 8];
    // HMAC 256/256 (5) and a signature algorithm are not HMAC 256/64.
    let b = hand_built(&protected(5, true), &[0xa0], &tag);
    assert_eq!(MacedReading::parse(&b), Err(ReadingError::UnknownAlgorithm));
    let b = hand_built(&protected(-8, true), &[0xa0], &tag);
    assert_eq!(MacedReading::parse(&b), Err(ReadingError::UnknownAlgorithm));
    // kid only in the unprotected bucket, not covered by the tag.
    let mut unprotected = vec![0xa1, 0x04, 0x50];
    unprotected.extend_from_slice(&NODE);
    let b = hand_built(&protected(4, false), &unprotected, &tag);
    assert_eq!(MacedReading::parse(&b), Err(ReadingError::UnprotectedKid));
    // A tag of any length but 8 is refused before any HMAC is computed.
    let b = hand_built(&protected(4, true), &[0xa0], &[0u8; 32]);
    let r = MacedReading::parse(&b).unwrap();
    assert_eq!(r.verify(&RustCrypto, &key, 1), Err(ReadingError::BadTag));
    let b = hand_built(&protected(4, true), &[0xa0], &[]);
    let r = MacedReading::parse(&b).unwrap();
    assert_eq!(r.verify(&RustCrypto, &key, 1), Err(ReadingError::BadTag));
    // One structure is not taken for the other.
    let maced = mac(&key, FRESH);
    assert_eq!(
        SignedReading::parse(ReadingFormat::Cose, &maced),
        Err(ReadingError::Cose(CoseError::NotSign1))
    );
    let sk = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Fixed(7))
        .unwrap();
    let (mut scratch, mut out) = ([0u8; 256], [0u8; 256]);
    let payload = temperature(ReadingFormat::Cose, 21.5);
    let n = sign_reading(
        &RustCrypto,
        &sk,
        &node(),
        ReadingFormat::Cose,
        &FRESH,
        &payload,
        &mut scratch,
        &mut out,
    )
    .unwrap();
    assert_eq!(
        MacedReading::parse(&out[..n]),
        Err(ReadingError::Cose(CoseError::NotMac0))
    );
    // Truncated at every length: an error, never a panic.
    for len in 0..maced.len() {
        assert!(MacedReading::parse(&maced[..len]).is_err());
    }
}
