//! Regenerates `vectors/identity.json` when run with `--ignored` (after a deliberate layout
//! change only: the published vectors are a compatibility promise).

use sigil_crypto::{PublicKey, RustCrypto, SignatureAlgorithm};
use sigil_identity::Identity;

#[test]
#[ignore]
fn regenerate_identity_vectors() {
    let k = |alg: SignatureAlgorithm, h: &str| {
        PublicKey::from_bytes(alg, &hex::decode(h).unwrap()).unwrap()
    };
    let ed1 = k(
        SignatureAlgorithm::Ed25519,
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    );
    let ed2 = k(
        SignatureAlgorithm::Ed25519,
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
    );
    let ed3 = k(
        SignatureAlgorithm::Ed25519,
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
    );
    let p = k(SignatureAlgorithm::EcdsaP256, "0460fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb67903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299");
    let enc = |ks: &[PublicKey]| -> serde_json::Value {
        ks.iter().map(|k| serde_json::json!({"alg": k.algorithm().name(), "key": hex::encode(k.as_bytes())})).collect()
    };
    let mut out = Vec::new();
    let mut push = |name: &str, kind: &str, ks: &[PublicKey], other: &[u8], id: Identity| {
        out.push(serde_json::json!({
            "name": name, "kind": kind, "keys": enc(ks), "other_hex": hex::encode(other),
            "identity": id.to_string(), "label": id.label().to_string(), "short": id.short_label().to_string(),
        }));
    };
    push(
        "ed25519 RFC 8032 TEST 1 key, no other information",
        "device",
        &[ed1],
        b"",
        Identity::of_key(&RustCrypto, &ed1, b"").unwrap(),
    );
    push(
        "ed25519 RFC 8032 TEST 1 key, O = 'kitchen'",
        "device",
        &[ed1],
        b"kitchen",
        Identity::of_key(&RustCrypto, &ed1, b"kitchen").unwrap(),
    );
    push(
        "p256 RFC 6979 A.2.5 key, no other information",
        "device",
        &[p],
        b"",
        Identity::of_key(&RustCrypto, &p, b"").unwrap(),
    );
    push(
        "group of the three RFC 8032 keys",
        "group",
        &[ed1, ed2, ed3],
        b"",
        Identity::of_group(&RustCrypto, &[ed1, ed2, ed3]).unwrap(),
    );
    push(
        "member TEST 1 key of that group (own key first, then the others)",
        "member",
        &[ed1, ed2, ed3],
        b"",
        Identity::of_member(&RustCrypto, &ed1, &[ed2, ed3]).unwrap(),
    );
    push(
        "mixed group: ed25519 TEST 2 key and the p256 key",
        "group",
        &[ed2, p],
        b"",
        Identity::of_group(&RustCrypto, &[ed2, p]).unwrap(),
    );
    let doc = serde_json::json!({
        "source": "Sigil identity layout v1 (docs/identity.md). Keys: RFC 8032 Section 7.1 TEST 1-3 public keys; RFC 6979 Appendix A.2.5 P-256 public key. Identities computed by sigil-identity and checked independently by tests/interop/test_identity_vectors.py with Python's hashlib.",
        "vectors": out,
    });
    std::fs::write(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../vectors/identity.json"),
        serde_json::to_string_pretty(&doc).unwrap() + "\n",
    )
    .unwrap();
}
