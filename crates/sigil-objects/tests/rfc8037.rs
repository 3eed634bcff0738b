//! RFC 8037 Appendix A.4/A.5: the Ed25519 JWS example (`vectors/rfc8037-ed25519-jws.json`),
//! verified by Sigil's JWS parser and reproduced byte for byte by its signing path.

use base64::Engine;
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_objects::jws::{append_signature, Jws};

const VECTOR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../vectors/rfc8037-ed25519-jws.json"
);

fn vector() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(VECTOR).unwrap()).unwrap()
}

fn b64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap()
}

fn keys(v: &serde_json::Value) -> (SecretKey, PublicKey) {
    let sk = SecretKey::from_bytes(
        SignatureAlgorithm::Ed25519,
        &b64(v["jwk"]["d"].as_str().unwrap()),
    )
    .unwrap();
    let pk = PublicKey::from_bytes(
        SignatureAlgorithm::Ed25519,
        &b64(v["jwk"]["x"].as_str().unwrap()),
    )
    .unwrap();
    // RFC 8037 §A.1: x is the public key of d.
    assert_eq!(RustCrypto.public_key(&sk).unwrap(), pk);
    (sk, pk)
}

#[test]
fn rfc8037_a5_the_example_jws_verifies() {
    let v = vector();
    let (_, pk) = keys(&v);
    let compact = v["jws"].as_str().unwrap();
    let jws = Jws::parse(compact.as_bytes()).unwrap();
    assert_eq!(jws.header.alg, Some(SignatureAlgorithm::Ed25519));
    assert_eq!(jws.header.kid, None);
    assert!(jws.signature_len_ok());
    assert_eq!(
        jws.signing_input,
        v["signing_input"].as_str().unwrap().as_bytes()
    );
    let mut buf = [0u8; 64];
    assert_eq!(
        jws.payload_into(&mut buf).unwrap(),
        v["payload"].as_str().unwrap().as_bytes()
    );
    RustCrypto
        .verify(&pk, jws.signing_input, jws.signature())
        .unwrap();
    // One changed character of the payload part, or of the signature: refused.
    let mut bad = compact.as_bytes().to_vec();
    bad[25] = if bad[25] == b'A' { b'B' } else { b'A' };
    let j = Jws::parse(&bad).unwrap();
    assert!(RustCrypto
        .verify(&pk, j.signing_input, j.signature())
        .is_err());
    let mut bad = compact.as_bytes().to_vec();
    let at = compact.rfind('.').unwrap() + 5;
    bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
    let j = Jws::parse(&bad).unwrap();
    assert!(RustCrypto
        .verify(&pk, j.signing_input, j.signature())
        .is_err());
}

#[test]
fn rfc8037_a4_the_example_jws_is_reproduced() {
    let v = vector();
    let (sk, _) = keys(&v);
    // The signing input, written as Sigil writes base64url.
    let mut input = String::new();
    sigil_objects::json::write_base64url(
        &mut input,
        v["protected_header"].as_str().unwrap().as_bytes(),
    )
    .unwrap();
    input.push('.');
    sigil_objects::json::write_base64url(&mut input, v["payload"].as_str().unwrap().as_bytes())
        .unwrap();
    assert_eq!(input, v["signing_input"].as_str().unwrap());
    // Ed25519 is deterministic (RFC 8032 §5.1.6): the same signature, the same compact JWS.
    let sig = RustCrypto.sign(&sk, input.as_bytes()).unwrap();
    let mut out = [0u8; 256];
    out[..input.len()].copy_from_slice(input.as_bytes());
    let n = append_signature(&mut out, input.len(), &sig.0).unwrap();
    assert_eq!(
        std::str::from_utf8(&out[..n]).unwrap(),
        v["jws"].as_str().unwrap()
    );
}
