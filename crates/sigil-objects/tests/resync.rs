//! The signed resync statement (RFC 8387 §8.2): its exact bytes and what its check refuses.

use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use sigil_objects::resync::{resync_statement, sign_resync, verify_resync};

fn rfc8032_test1() -> (SecretKey, PublicKey) {
    let sk = SecretKey::from_bytes(
        SignatureAlgorithm::Ed25519,
        &hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60").unwrap(),
    )
    .unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    (sk, pk)
}

#[test]
fn statement_layout_is_the_documented_one() {
    let id = Identity::parse("06af05053d7deaac9aef246d4b188825").unwrap();
    assert_eq!(
        hex::encode(resync_statement(&id, 0x0102_0304_0506_0708)),
        // "sigil-resync-v1" || I || seq (big-endian), docs/wire-formats.md
        "736967696c2d726573796e632d7631\
         06af05053d7deaac9aef246d4b188825\
         0102030405060708"
    );
}

#[test]
fn signed_statement_binds_identity_and_number() {
    let (sk, pk) = rfc8032_test1();
    let id = Identity::of_key(&RustCrypto, &pk, b"").unwrap();
    let sig = sign_resync(&RustCrypto, &sk, &id, 41).unwrap();
    verify_resync(&RustCrypto, &pk, &id, 41, &sig.0).unwrap();
    assert!(verify_resync(&RustCrypto, &pk, &id, 42, &sig.0).is_err());
    let other = Identity::of_key(&RustCrypto, &pk, b"kitchen").unwrap();
    assert!(verify_resync(&RustCrypto, &pk, &other, 41, &sig.0).is_err());
    assert!(verify_resync(&RustCrypto, &pk, &id, 41, &sig.0[..63]).is_err());
    // Ed25519 is deterministic (RFC 8032 §5.1.6): the same statement, the same signature.
    assert_eq!(sign_resync(&RustCrypto, &sk, &id, 41).unwrap().0, sig.0);
}
