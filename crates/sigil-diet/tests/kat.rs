//! sigil-diet against known answers from pyca/cryptography (vectors/diet-kat.json, written and
//! checked by vectors/gen_diet_kat.py): the six operations, and a node talking to hellos and
//! messages built by the independent implementation.

use sigil_crypto::{CryptoError, PublicKey, Rng, RustCrypto, SignatureAlgorithm};
use sigil_diet::{ops, Config, Node, NodeKeys, Received};
use sigil_time::Instant;

fn kat() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../vectors/diet-kat.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn h(v: &serde_json::Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}

fn h32(v: &serde_json::Value) -> [u8; 32] {
    h(v).try_into().unwrap()
}

struct NoRng;
impl Rng for NoRng {
    fn fill(&mut self, _: &mut [u8]) -> Result<(), CryptoError> {
        Err(CryptoError::Rng)
    }
}

#[test]
fn key_pair_from_a_fixed_scalar() {
    let v = &kat()["key_pair"];
    assert_eq!(
        ops::public_key(&RustCrypto, &h32(&v["secret"]))
            .unwrap()
            .to_vec(),
        h(&v["public"])
    );
    // Generation takes its randomness from the caller only.
    assert!(ops::generate_key_pair(&RustCrypto, &mut NoRng).is_err());
}

#[test]
fn ecdh_then_hkdf() {
    let v = &kat()["ecdh_hkdf"];
    let mut okm = [0u8; 42];
    for (secret, peer) in [("secret", "peer_public"), ("peer_secret", "public")] {
        ops::shared_key(
            &RustCrypto,
            &h32(&v[secret]),
            &h(&v[peer]),
            &h(&v["salt"]),
            &h(&v["info"]),
            &mut okm,
        )
        .unwrap();
        assert_eq!(okm.to_vec(), h(&v["okm_42"]));
    }
    // HKDF alone, over the ECDH output the vector gives.
    ops::hkdf_sha256(
        &RustCrypto,
        &h(&v["salt"]),
        &h(&v["shared_x"]),
        &h(&v["info"]),
        &mut okm,
    )
    .unwrap();
    assert_eq!(okm.to_vec(), h(&v["okm_42"]));
    // A point off the curve is refused.
    let mut bad = h(&v["peer_public"]);
    bad[64] ^= 1;
    assert!(ops::shared_key(&RustCrypto, &h32(&v["secret"]), &bad, b"", b"", &mut okm).is_err());
}

#[test]
fn aes_128_ccm_8() {
    let v = &kat()["aes_ccm8"];
    let key: [u8; 16] = h(&v["key"]).try_into().unwrap();
    let nonce: [u8; 12] = h(&v["nonce"]).try_into().unwrap();
    let mut buf = h(&v["plaintext"]);
    let tag = ops::encrypt(&RustCrypto, &key, &nonce, &h(&v["aad"]), &mut buf).unwrap();
    buf.extend_from_slice(&tag);
    assert_eq!(buf, h(&v["ciphertext_and_tag"]));
    let n = buf.len() - 8;
    let tag: [u8; 8] = buf[n..].try_into().unwrap();
    let mut ct = buf[..n].to_vec();
    ops::decrypt(&RustCrypto, &key, &nonce, &h(&v["aad"]), &mut ct, &tag).unwrap();
    assert_eq!(ct, h(&v["plaintext"]));
    let mut ct = buf[..n].to_vec();
    ct[0] ^= 1;
    assert_eq!(
        ops::decrypt(&RustCrypto, &key, &nonce, &h(&v["aad"]), &mut ct, &tag),
        Err(sigil_diet::Error::BadTag)
    );
}

#[test]
fn ecdsa_p256_both_ways() {
    let v = &kat()["ecdsa"];
    let msg = h(&v["message"]);
    // Ours is the RFC 6979 signature pyca computes (and gen_diet_kat.py --check verifies).
    let ours = ops::sign(&RustCrypto, &h32(&v["secret"]), &msg).unwrap();
    assert_eq!(ours.to_vec(), h(&v["rfc6979_signature"]));
    // pyca's randomized signature verifies here.
    ops::verify(
        &RustCrypto,
        &h(&v["public"]),
        &msg,
        &h(&v["random_signature"]),
    )
    .unwrap();
    let mut bad = h(&v["random_signature"]);
    bad[10] ^= 1;
    assert_eq!(
        ops::verify(&RustCrypto, &h(&v["public"]), &msg, &bad),
        Err(sigil_diet::Error::BadSignature)
    );
}

#[test]
fn a_node_talks_to_messages_built_by_pyca() {
    let v = &kat()["node"];
    let keys = |n: &serde_json::Value| {
        NodeKeys::from_secrets(&RustCrypto, &h32(&n["ecdh"]), &h32(&n["signing"])).unwrap()
    };
    let py_sig = keys(&v["python"]).signing_key();
    let mut node: Node<RustCrypto, u8, 2> = Node::new(
        RustCrypto,
        keys(&v["rust"]),
        v["rust"]["epoch"].as_u64().unwrap() as u32,
        Config::default(),
    );
    let trusted = |_: &u8, k: &PublicKey| *k == py_sig;
    let mut plain = [0u8; 64];
    let mut out = [0u8; 256];
    let t0 = Instant::ZERO;
    // Each has the other as a neighbour; our first hello is pyca's.
    node.add_neighbour(t0, 1).unwrap();
    let t = node.poll_transmit(t0, &mut out).unwrap();
    assert_eq!(out[..t.len].to_vec(), h(&v["rust_hello"]));
    // Python's hello does not echo our nonce: it is answered with a challenge, pyca's.
    assert_eq!(
        node.handle(t0, 1, &h(&v["python_hello"]), trusted, &mut plain),
        Ok(Received::Challenged)
    );
    let t = node.poll_transmit(t0, &mut out).unwrap();
    assert_eq!(out[..t.len].to_vec(), h(&v["rust_challenge"]));
    // Python's acknowledgement echoes it: keys.
    assert_eq!(
        node.handle(t0, 1, &h(&v["python_answer"]), trusted, &mut plain),
        Ok(Received::Hello { new_keys: true })
    );
    assert_eq!(node.poll_transmit(t0, &mut out), None);
    for (msg, text) in [
        ("python_data_seq0", &b"from python"[..]),
        ("python_data_seq5", b"seq 5"),
    ] {
        let r = node
            .handle(t0, 1, &h(&v[msg]), trusted, &mut plain)
            .unwrap();
        assert_eq!(r, Received::Message { len: text.len() });
        assert_eq!(&plain[..text.len()], text);
    }
    let n = node
        .seal(&1, &h(&v["rust_data_plaintext"]), &mut out)
        .unwrap();
    assert_eq!(out[..n].to_vec(), h(&v["rust_data_seq0"]));
    assert_eq!(
        PublicKey::from_bytes(
            SignatureAlgorithm::EcdsaP256,
            &keys(&v["rust"]).signing.public
        )
        .unwrap(),
        node.signing_key()
    );
}
