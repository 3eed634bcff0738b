//! Published vectors: RFC 8428 examples and cose-wg Examples Sign1 pass/fail cases.

use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SignatureAlgorithm};
use sigil_objects::cose::CoseSign1;
use sigil_objects::senml::{self, OwnedValue, Pack};

fn load(name: &str) -> serde_json::Value {
    let p = format!("{}/../../vectors/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn check_resolved(got: &[senml::Resolved], want: &serde_json::Value, ctx: &str) {
    let want = want.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{ctx}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.name, w["n"].as_str().unwrap(), "{ctx}");
        assert_eq!(g.unit.as_deref(), w["u"].as_str(), "{ctx}");
        assert_eq!(
            g.value,
            Some(OwnedValue::Number(w["v"].as_f64().unwrap())),
            "{ctx}"
        );
        assert!(
            (g.time - w["t"].as_f64().unwrap()).abs() < 1e-6,
            "{ctx}: {} vs {}",
            g.time,
            w["t"]
        );
    }
}

#[test]
fn rfc8428_examples_resolve_in_json_and_through_cbor() {
    let doc = load("rfc8428-senml.json");
    for ex in doc["examples"].as_array().unwrap() {
        let name = ex["name"].as_str().unwrap();
        let parsed = senml::parse_json(ex["json"].as_str().unwrap().as_bytes()).unwrap();
        let resolved = senml::resolve(parsed.iter().map(|r| r.as_record())).unwrap();
        check_resolved(&resolved, &ex["resolved"], name);

        // The same pack through SenML-CBOR (RFC 8428 §6) and back.
        let records: Vec<_> = parsed.iter().map(|r| r.as_record()).collect();
        let mut buf = [0u8; 1024];
        let n = senml::encode_cbor(&records, &mut buf).unwrap();
        let pack = Pack::parse_cbor(&buf[..n]).unwrap();
        assert_eq!(pack.len(), records.len());
        check_resolved(
            &senml::resolve(pack.records()).unwrap(),
            &ex["resolved"],
            name,
        );

        // And our JSON encoder reproduces a pack with the same meaning.
        let mut jbuf = [0u8; 2048];
        let jn = senml::encode_json(&records, &mut jbuf).unwrap();
        let again = senml::parse_json(&jbuf[..jn]).unwrap();
        check_resolved(
            &senml::resolve(again.iter().map(|r| r.as_record())).unwrap(),
            &ex["resolved"],
            name,
        );
    }
}

#[test]
fn cose_wg_sign1_pass_and_fail_cases() {
    let doc = load("cose-wg-sign1.json");
    let key = PublicKey::from_bytes(
        SignatureAlgorithm::EcdsaP256,
        &hex::decode(doc["public_key"].as_str().unwrap()).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for v in doc["vectors"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let bytes = hex::decode(v["cbor"].as_str().unwrap()).unwrap();
        let aad = hex::decode(v["external_aad"].as_str().unwrap()).unwrap();
        let outcome = (|| -> Result<(), String> {
            let msg = CoseSign1::parse(&bytes).map_err(|e| e.to_string())?;
            let alg = msg
                .headers
                .alg
                .and_then(SignatureAlgorithm::from_cose)
                .ok_or("unknown alg")?;
            if alg != key.algorithm() {
                return Err("algorithm mismatch".into());
            }
            if v["pass"].as_bool().unwrap() {
                assert_eq!(
                    msg.payload,
                    doc["payload_text"].as_str().unwrap().as_bytes()
                );
            }
            let mut scratch = vec![0u8; bytes.len() + 64];
            let tbs = msg
                .to_be_signed(&aad, &mut scratch)
                .map_err(|e| e.to_string())?;
            RustCrypto
                .verify(&key, tbs, msg.signature)
                .map_err(|e| e.to_string())
        })();
        assert_eq!(
            outcome.is_ok(),
            v["pass"].as_bool().unwrap(),
            "{name}: {outcome:?}"
        );
        checked += 1;
    }
    assert_eq!(checked, 9);
}

/// Regression: duplicate-label tracking was sized for one bucket, so 16 protected labels plus
/// one unprotected label indexed past its end and panicked.
#[test]
fn regression_full_protected_bucket_plus_unprotected_label_is_an_error_not_a_panic() {
    use sigil_objects::cbor::Encoder;
    let mut protected = [0u8; 128];
    let mut e = Encoder::new(&mut protected);
    e.map(16).unwrap();
    for label in 10..26 {
        e.i64(label).unwrap().u64(0).unwrap();
    }
    let pn = e.finish();
    let mut buf = [0u8; 256];
    let mut e = Encoder::new(&mut buf);
    e.tag(18)
        .unwrap()
        .array(4)
        .unwrap()
        .bytes(&protected[..pn])
        .unwrap();
    e.map(1).unwrap().i64(30).unwrap().u64(0).unwrap();
    e.bytes(b"payload").unwrap().bytes(&[0u8; 64]).unwrap();
    let n = e.finish();
    // Parses (no Sigil rule is broken at the COSE layer) or is refused; it must not panic.
    let _ = CoseSign1::parse(&buf[..n]);
    // The same label in both buckets is refused.
    let mut e = Encoder::new(&mut buf);
    e.tag(18)
        .unwrap()
        .array(4)
        .unwrap()
        .bytes(&protected[..pn])
        .unwrap();
    e.map(1).unwrap().i64(10).unwrap().u64(0).unwrap();
    e.bytes(b"payload").unwrap().bytes(&[0u8; 64]).unwrap();
    let n = e.finish();
    assert_eq!(
        CoseSign1::parse(&buf[..n]),
        Err(sigil_objects::cose::CoseError::DuplicateLabel)
    );
}
