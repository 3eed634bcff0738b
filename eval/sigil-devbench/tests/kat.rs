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

/// The RSA operations (feature `rsa`) against `vectors/device-kat-rsa.json` (pyca/cryptography;
/// the encryption's answer is the host's run, which pyca decrypts: vectors/gen_rsa_kat.py).
#[cfg(feature = "rsa")]
#[test]
fn every_rsa_operation_matches_its_known_answer_on_the_host() {
    let path = format!(
        "{}/../../vectors/device-kat-rsa.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ops = sigil_devbench::rsa::operations::<RustCrypto>();
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

/// A signature that does not match is refused, and a ciphertext with broken padding gives a
/// premaster secret other than the encrypted one (no error), as RFC 5246 §7.4.7.1 requires.
#[cfg(feature = "rsa")]
#[test]
fn rsa_operations_refuse_what_they_must() {
    use sigil_crypto::{CryptoError, CryptoProvider, RsaPublicKey, RsaSecretKey};
    use sigil_devbench::rsa::{
        premaster, CLIENT_VERSION, EXPONENT, KEY_DER, MESSAGE, MODULUS, PREMASTER_CIPHERTEXT,
        SIGNATURE,
    };
    let pk = RsaPublicKey::from_modulus_exponent(MODULUS, &EXPONENT).unwrap();
    let mut sig = *SIGNATURE;
    sig[100] ^= 1;
    assert_eq!(
        RustCrypto.rsa_pkcs1_sha256_verify(&pk, MESSAGE, &sig),
        Err(CryptoError::BadSignature)
    );
    assert_eq!(
        RustCrypto.rsa_pkcs1_sha256_verify(&pk, b"other", SIGNATURE),
        Err(CryptoError::BadSignature)
    );
    let key = RsaSecretKey::from_pkcs1_der(KEY_DER);
    let mut ct = *PREMASTER_CIPHERTEXT;
    ct[200] ^= 1;
    let mut rng = sigil_devbench::BenchRng(9);
    let got = RustCrypto
        .rsa_tls_premaster(&key, &ct, CLIENT_VERSION, &mut rng)
        .unwrap();
    assert_eq!(got[..2], CLIENT_VERSION);
    assert_ne!(got[..], premaster()[..]);
}
