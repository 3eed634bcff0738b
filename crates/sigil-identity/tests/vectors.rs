//! Identity test vectors (`vectors/identity.json`) and the properties the layout promises.

use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::{Identity, IdentityError};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../vectors/identity.json");

fn key(alg: &str, hex_key: &str) -> PublicKey {
    PublicKey::from_bytes(
        SignatureAlgorithm::from_name(alg).unwrap(),
        &hex::decode(hex_key).unwrap(),
    )
    .unwrap()
}

fn keys(list: &serde_json::Value) -> Vec<PublicKey> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|k| key(k["alg"].as_str().unwrap(), k["key"].as_str().unwrap()))
        .collect()
}

fn compute(v: &serde_json::Value) -> Identity {
    match v["kind"].as_str().unwrap() {
        "device" => Identity::of_key(
            &RustCrypto,
            &keys(&v["keys"])[0],
            &hex::decode(v["other_hex"].as_str().unwrap()).unwrap(),
        )
        .unwrap(),
        "group" => Identity::of_group(&RustCrypto, &keys(&v["keys"])).unwrap(),
        "member" => {
            let k = keys(&v["keys"]);
            Identity::of_member(&RustCrypto, &k[0], &k[1..]).unwrap()
        }
        other => panic!("unknown kind {other}"),
    }
}

#[test]
fn published_identity_vectors_hold() {
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(VECTORS).unwrap()).unwrap();
    let list = doc["vectors"].as_array().unwrap();
    assert!(list.len() >= 6);
    for v in list {
        let id = compute(v);
        assert_eq!(
            id.to_string(),
            v["identity"].as_str().unwrap(),
            "{}",
            v["name"]
        );
        assert_eq!(id.label().to_string(), v["label"].as_str().unwrap());
        assert_eq!(id.short_label().to_string(), v["short"].as_str().unwrap());
        assert_eq!(Identity::parse(v["label"].as_str().unwrap()).unwrap(), id);
    }
}

#[test]
fn rfc6979_p256_key_matches_its_published_public_point() {
    // RFC 6979 Appendix A.2.5: the P-256 key pair used in the identity vectors.
    let sk = SecretKey::from_bytes(
        SignatureAlgorithm::EcdsaP256,
        &hex::decode("c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721").unwrap(),
    )
    .unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    assert_eq!(
        hex::encode(pk.as_bytes()),
        "0460fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6\
         7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299"
    );
}

#[test]
fn layout_separates_algorithm_key_and_other_information() {
    let ed = key(
        "ed25519",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    );
    let a = Identity::of_key(&RustCrypto, &ed, b"").unwrap();
    let b = Identity::of_key(&RustCrypto, &ed, b"\x00").unwrap();
    let c = Identity::of_key(&RustCrypto, &ed, b"kitchen").unwrap();
    assert_ne!(a, b);
    assert_ne!(a, c);
    assert_ne!(b, c);
    // A device identity never equals the group identity of the same single key.
    let g = Identity::of_group(&RustCrypto, &[ed]).unwrap();
    let m = Identity::of_member(&RustCrypto, &ed, &[]).unwrap();
    assert_ne!(a, g);
    assert_ne!(a, m);
    assert_ne!(g, m);
}

#[test]
fn group_identity_ignores_order_and_rejects_duplicates_and_outsiders() {
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(VECTORS).unwrap()).unwrap();
    let group = doc["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["kind"] == "group")
        .unwrap();
    let mut ks = keys(&group["keys"]);
    let id = Identity::of_group(&RustCrypto, &ks).unwrap();
    ks.reverse();
    assert_eq!(Identity::of_group(&RustCrypto, &ks).unwrap(), id);
    let mut dup = ks.clone();
    dup.push(ks[0]);
    assert_eq!(
        Identity::of_group(&RustCrypto, &dup),
        Err(IdentityError::DuplicateKey)
    );
    assert_eq!(
        Identity::of_group(&RustCrypto, &[]),
        Err(IdentityError::GroupSize)
    );
    // Adding any key changes the group identity: outsiders cannot claim membership. The
    // outsider is the RFC 6979 P-256 key, which is not one of the three RFC 8032 keys.
    let outsider = key(
        "p256",
        "0460fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6\
         7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299",
    );
    assert!(
        !ks.contains(&outsider),
        "the outsider must be outside the group"
    );
    let mut more = ks.clone();
    more.push(outsider);
    assert_ne!(Identity::of_group(&RustCrypto, &more).unwrap(), id);
    // Nor can it pass for a member: its kit-bound identity is no member's.
    let outsider_as_member = Identity::of_member(&RustCrypto, &outsider, &ks).unwrap();
    for (i, own) in ks.iter().enumerate() {
        let others: Vec<_> = ks
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, k)| *k)
            .collect();
        assert_ne!(
            Identity::of_member(&RustCrypto, own, &others).unwrap(),
            outsider_as_member
        );
    }
    // A member cannot list itself among the others.
    assert_eq!(
        Identity::of_member(&RustCrypto, &ks[0], &ks),
        Err(IdentityError::DuplicateKey)
    );
}

#[test]
fn parse_accepts_label_forms_and_rejects_junk() {
    let id = Identity::from_bytes([0xab; 16]);
    for text in [
        id.to_string(),
        id.label().to_string(),
        id.label().to_string().to_lowercase(),
        format!("  {}  ", id.label().to_string().replace('-', " ")),
    ] {
        assert_eq!(Identity::parse(&text).unwrap(), id, "{text}");
    }
    for bad in ["", "abc", &"a".repeat(33), &"g".repeat(32), "ab\u{e9}"] {
        assert_eq!(Identity::parse(bad), Err(IdentityError::NotHex), "{bad}");
    }
    assert!(id.matches_short("ABAB-ABAB"));
    assert!(!id.matches_short("ABAC"));
}
