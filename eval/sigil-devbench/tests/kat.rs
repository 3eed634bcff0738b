//! Every operation on the host (RustCrypto backend) against `vectors/device-kat.json`, whose
//! values come from the RFCs or from independent implementations (vectors/gen_device_kat.py).

use sigil_crypto::RustCrypto;
use sigil_devbench::{operations, MAX_OUTPUT};

/// `device-kat.json` (RFCs and independent implementations) merged with
/// `device-kat-dtls.json` (the host's run of the DTLS handshakes).
fn vectors() -> serde_json::Value {
    let read = |name: &str| -> serde_json::Value {
        let path = format!("{}/../../vectors/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let mut v = read("device-kat.json");
    let dtls = read("device-kat-dtls.json");
    for (k, op) in dtls["operations"].as_object().unwrap() {
        v["operations"][k] = op.clone();
    }
    v
}

#[test]
fn every_operation_matches_its_known_answer_on_the_host() {
    let v = vectors();
    let ops = operations::<RustCrypto>();
    assert_eq!(v["operations"].as_object().unwrap().len(), ops.len());
    for op in ops {
        let mut out = [0u8; MAX_OUTPUT];
        let n = (op.run)(&RustCrypto, &mut out).unwrap_or_else(|e| panic!("{}: {e:?}", op.name));
        let want = v["operations"][op.name]["output"]
            .as_str()
            .unwrap_or_else(|| panic!("{} missing from the vector file", op.name));
        assert_eq!(hex::encode(&out[..n]), want, "{}", op.name);
    }
}

#[test]
fn the_embedded_signed_reading_is_what_the_signing_operation_produces() {
    let mut out = [0u8; MAX_OUTPUT];
    let n = sigil_devbench::reading_sign_ed25519(&RustCrypto, &mut out).unwrap();
    assert_eq!(&out[..n], &sigil_devbench::SIGNED_READING_ED25519[..]);
}
