//! Signing and verifying readings in both wire forms, and what must fail.

use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use sigil_objects::cose::SeqField;
use sigil_objects::reading::sign_reading;
use sigil_objects::senml::{self, Record, Value};
use sigil_objects::{Freshness, ReadingError, ReadingFormat, SignedReading};
use sigil_testkit::readings::temperature;
use sigil_testkit::Fixed;

fn sign(
    alg: SignatureAlgorithm,
    format: ReadingFormat,
    fresh: Freshness,
) -> (SecretKey, Identity, Vec<u8>) {
    let sk = RustCrypto.generate(alg, &mut Fixed(7)).unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    let id = Identity::of_key(&RustCrypto, &pk, b"").unwrap();
    let payload = temperature(format, 21.5);
    let mut scratch = [0u8; 256];
    let mut out = [0u8; 512];
    let n = sign_reading(
        &RustCrypto,
        &sk,
        &id,
        format,
        &fresh,
        &payload,
        &mut scratch,
        &mut out,
    )
    .unwrap();
    (sk, id, out[..n].to_vec())
}

fn verify(
    sk: &SecretKey,
    id: &Identity,
    format: ReadingFormat,
    bytes: &[u8],
    full_seq: u64,
) -> Result<(), ReadingError> {
    let pk = RustCrypto.public_key(sk).unwrap();
    let r = SignedReading::parse(format, bytes)?;
    let mut scratch = vec![0u8; r.scratch_len()];
    r.verify_end_to_end(&RustCrypto, &pk, id, full_seq, &mut scratch)
}

const FRESH: Freshness = Freshness {
    seq: 1000,
    lsb_bits: None,
    timestamp: Some(1_700_000_000),
};

#[test]
fn every_algorithm_and_format_round_trips() {
    for alg in SignatureAlgorithm::ALL {
        for format in [ReadingFormat::Cose, ReadingFormat::Jws] {
            let (sk, id, bytes) = sign(alg, format, FRESH);
            verify(&sk, &id, format, &bytes, 1000).unwrap();
            let r = SignedReading::parse(format, &bytes).unwrap();
            assert_eq!(
                (r.kid, r.alg, r.seq, r.timestamp),
                (id, alg, SeqField::Full(1000), Some(1_700_000_000))
            );
            let mut buf = vec![0u8; r.senml_len_bound()];
            let payload = r.senml(&mut buf).unwrap().to_vec();
            assert_eq!(payload, temperature(format, 21.5));
        }
    }
}

#[test]
fn any_flipped_byte_is_rejected() {
    for format in [ReadingFormat::Cose, ReadingFormat::Jws] {
        let (sk, id, bytes) = sign(SignatureAlgorithm::Ed25519, format, FRESH);
        for i in 0..bytes.len() {
            let mut t = bytes.clone();
            t[i] ^= 0x01;
            assert!(
                verify(&sk, &id, format, &t, 1000).is_err(),
                "{format:?} byte {i} accepted"
            );
        }
    }
}

#[test]
fn wrong_key_kid_sequence_or_algorithm_fail_precisely() {
    let (sk, id, bytes) = sign(SignatureAlgorithm::Ed25519, ReadingFormat::Cose, FRESH);
    let other = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Fixed(9))
        .unwrap();
    let other_pk = RustCrypto.public_key(&other).unwrap();
    let r = SignedReading::parse(ReadingFormat::Cose, &bytes).unwrap();
    let mut scratch = vec![0u8; r.scratch_len()];
    assert_eq!(
        r.verify_end_to_end(&RustCrypto, &other_pk, &id, 1000, &mut scratch),
        Err(ReadingError::BadSignature)
    );
    let other_id = Identity::of_key(&RustCrypto, &other_pk, b"").unwrap();
    assert_eq!(
        r.verify_end_to_end(&RustCrypto, &other_pk, &other_id, 1000, &mut scratch),
        Err(ReadingError::KidMismatch)
    );
    assert_eq!(
        verify(&sk, &id, ReadingFormat::Cose, &bytes, 1001),
        Err(ReadingError::SequenceMismatch)
    );
    let p256 = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Fixed(9))
        .unwrap();
    let p256_pk = RustCrypto.public_key(&p256).unwrap();
    assert_eq!(
        r.verify(&RustCrypto, &p256_pk, 1000, &mut scratch),
        Err(ReadingError::AlgorithmMismatch)
    );
    // A JWS is not a COSE object and vice versa.
    assert!(SignedReading::parse(ReadingFormat::Jws, &bytes).is_err());
}

#[test]
fn low_bits_mode_signs_the_full_number() {
    let fresh = Freshness {
        seq: 0x1_2345,
        lsb_bits: Some(8),
        timestamp: None,
    };
    let (sk, id, bytes) = sign(SignatureAlgorithm::Ed25519, ReadingFormat::Cose, fresh);
    let r = SignedReading::parse(ReadingFormat::Cose, &bytes).unwrap();
    assert_eq!(r.seq, SeqField::LowBits { k: 8, bits: 0x45 });
    verify(&sk, &id, ReadingFormat::Cose, &bytes, 0x1_2345).unwrap();
    // Same low bits, different high bits: the signature binds the full number.
    assert_eq!(
        verify(&sk, &id, ReadingFormat::Cose, &bytes, 0x2_2345),
        Err(ReadingError::BadSignature)
    );
    assert_eq!(
        verify(&sk, &id, ReadingFormat::Cose, &bytes, 0x1_2346),
        Err(ReadingError::SequenceMismatch)
    );
    // At this number the full form needs a 5-byte integer, the low bits [8, 0x45] only 4.
    let (_, _, full) = sign(
        SignatureAlgorithm::Ed25519,
        ReadingFormat::Cose,
        Freshness {
            seq: 0x1_2345,
            lsb_bits: None,
            timestamp: None,
        },
    );
    assert_eq!(bytes.len() + 1, full.len());
}

#[test]
fn default_reading_layout_byte_by_byte() {
    let fresh = Freshness {
        seq: 1,
        lsb_bits: None,
        timestamp: None,
    };
    let (_, id, bytes) = sign(SignatureAlgorithm::Ed25519, ReadingFormat::Cose, fresh);
    let mut want = vec![
        0xd2, // tag 18: COSE_Sign1
        0x84, // array(4)
        0x58, 27,   // bstr(27): protected header
        0xa3, // map(3)
        0x01, 0x27, // 1 (alg): -8 (EdDSA)
        0x04, 0x50, // 4 (kid): bstr(16)
    ];
    want.extend_from_slice(id.as_bytes());
    want.extend_from_slice(&[
        0x3a, 0x00, 0x01, 0x00, 0x00, // -65537 (Sigil sequence number)
        0x01, // 1
        0xa0, // unprotected: {}
        0x4e, // bstr(14): payload
        0x81, 0xa3, // [ { 3 fields
        0x00, 0x61, b't', // 0 (n): "t"
        0x01, 0x63, b'C', b'e', b'l', // 1 (u): "Cel"
        0x02, 0xf9, 0x4d, 0x60, // 2 (v): 21.5 as half float
        0x58, 0x40, // bstr(64): signature
    ]);
    assert_eq!(&bytes[..want.len()], &want[..]);
    assert_eq!(bytes.len(), want.len() + 64);
}

#[test]
fn malformed_senml_is_rejected() {
    let cases: &[&[u8]] = &[
        &[0xa0],                                     // not an array
        &[0x81, 0x01],                               // record not a map
        &[0x81, 0xa1, 0x02, 0x61, b'x'],             // v as text
        &[0x81, 0xa2, 0x02, 0x01, 0x02, 0x02],       // duplicate v
        &[0x81, 0xa2, 0x02, 0x01, 0x03, 0x61, b'x'], // v and vs
        &[0x81, 0xa1, 0x62, b'x', b'_', 0x01],       // must-understand label
        &[0x82, 0xa0],                               // truncated
        &[0x81, 0xa0, 0x00],                         // trailing bytes
    ];
    for c in cases {
        assert!(senml::Pack::parse_cbor(c).is_err(), "{c:02x?}");
    }
    // Valid CBOR, invalid SenML semantics: no name, no value.
    let p = senml::Pack::parse_cbor(&[0x81, 0xa1, 0x02, 0x01]).unwrap();
    assert_eq!(senml::resolve(p.records()), Err(senml::SenmlError::BadName));
    let p = senml::Pack::parse_cbor(&[0x81, 0xa1, 0x00, 0x61, b'x']).unwrap();
    assert_eq!(
        senml::resolve(p.records()),
        Err(senml::SenmlError::BadValue)
    );
    assert!(senml::parse_json(b"[{\"n\":\"a\",\"v\":1,\"vs\":\"x\"}]").is_err());
    assert!(senml::parse_json(b"{}").is_err());
    assert!(senml::encode_cbor(
        &[Record {
            name: Some("a"),
            value: Some(Value::Number(f64::NAN)),
            ..Default::default()
        }],
        &mut [0u8; 64]
    )
    .is_err());
}
