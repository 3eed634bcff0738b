//! The signed registration statement (RFC 8387 §8.2 bound to the RFC 9176 operation): its
//! exact bytes, its operation digest, and what its check refuses.

use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use sigil_objects::resync::{
    sign_statement, statement, verify_statement, Operation, OperationKind,
};

fn rfc8032_test1() -> (SecretKey, PublicKey) {
    let sk = SecretKey::from_bytes(
        SignatureAlgorithm::Ed25519,
        &hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60").unwrap(),
    )
    .unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    (sk, pk)
}

fn op(
    kind: OperationKind,
    lifetime: Option<u32>,
    base: Option<&'static str>,
    payload: &'static [u8],
) -> Operation<'static> {
    Operation {
        kind,
        lifetime,
        base,
        payload,
    }
}

#[test]
fn statement_layout_is_the_documented_one() {
    let id = Identity::parse("06af05053d7deaac9aef246d4b188825").unwrap();
    let digest = [0xabu8; 32];
    assert_eq!(
        hex::encode(statement(&id, 0x0102_0304_0506_0708, &digest)),
        // "sigil-rd-v1" || I || sq (big-endian) || SHA-256(operation), docs/wire-formats.md
        format!(
            "736967696c2d72642d7631{}{}{}",
            "06af05053d7deaac9aef246d4b188825",
            "0102030405060708",
            "ab".repeat(32)
        )
    );
}

#[test]
fn operation_digests_are_the_documented_ones() {
    // Computed independently: sha256(kind || lt u32 BE (0 absent) || has_base || base_len u16
    // BE || base || payload).
    for (o, want) in [
        (
            op(OperationKind::Register, Some(300), None, b"</m>;ct=18"),
            "096a0944c98e3c85c8c8052192bfb17b49a7190b440a3b56b8aca2cf2c1cc3bf",
        ),
        (
            op(OperationKind::Update, None, Some("coap://[::1]"), b""),
            "6155d8c3e6ee2157ec2faa160d4968f0b8c90bbcee1060655971681249fbd168",
        ),
        (
            op(OperationKind::Remove, None, None, b""),
            "35be322d094f9d154a8aba4733b8497f180353bd7ae7b0a15f90b586b549f28b",
        ),
    ] {
        assert_eq!(hex::encode(o.digest(&RustCrypto).unwrap()), want, "{o:?}");
    }
    // Absent and empty base, and absent lifetime and every other field, differ.
    let plain = op(OperationKind::Update, None, None, b"");
    for other in [
        op(OperationKind::Update, None, Some(""), b""),
        op(OperationKind::Update, Some(60), None, b""),
        op(OperationKind::Remove, None, None, b""),
        op(OperationKind::Update, None, None, b"x"),
    ] {
        assert_ne!(plain.digest(&RustCrypto), other.digest(&RustCrypto));
    }
}

#[test]
fn signed_statement_binds_identity_number_and_operation() {
    let (sk, pk) = rfc8032_test1();
    let id = Identity::of_key(&RustCrypto, &pk, b"").unwrap();
    let d = op(OperationKind::Register, Some(300), None, b"</m>;ct=18")
        .digest(&RustCrypto)
        .unwrap();
    let forged = op(OperationKind::Register, Some(300), None, b"</m>;ct=65100")
        .digest(&RustCrypto)
        .unwrap();
    let sig = sign_statement(&RustCrypto, &sk, &id, 41, &d).unwrap();
    verify_statement(&RustCrypto, &pk, &id, 41, &d, &sig.0).unwrap();
    assert!(verify_statement(&RustCrypto, &pk, &id, 42, &d, &sig.0).is_err());
    assert!(verify_statement(&RustCrypto, &pk, &id, 41, &forged, &sig.0).is_err());
    let other = Identity::of_key(&RustCrypto, &pk, b"kitchen").unwrap();
    assert!(verify_statement(&RustCrypto, &pk, &other, 41, &d, &sig.0).is_err());
    assert!(verify_statement(&RustCrypto, &pk, &id, 41, &d, &sig.0[..63]).is_err());
    // Ed25519 is deterministic (RFC 8032 §5.1.6): the same statement, the same signature.
    assert_eq!(
        sign_statement(&RustCrypto, &sk, &id, 41, &d).unwrap().0,
        sig.0
    );
}
