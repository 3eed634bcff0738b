//! Known-answer tests for the RustCrypto backend.

use sigil_crypto::{
    CryptoError, CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm,
};
use sigil_testkit::Counter;

fn vectors() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../vectors/rfc8032-ed25519.json"
    ))
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn h(v: &serde_json::Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}

#[test]
fn rfc8032_ed25519_vectors_sign_and_verify() {
    let v = vectors();
    let list = v["vectors"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    for t in list {
        let sk = SecretKey::from_bytes(SignatureAlgorithm::Ed25519, &h(&t["secret_key"])).unwrap();
        let pk = RustCrypto.public_key(&sk).unwrap();
        assert_eq!(pk.as_bytes(), &h(&t["public_key"])[..], "{}", t["name"]);
        let msg = h(&t["message"]);
        let sig = RustCrypto.sign(&sk, &msg).unwrap();
        assert_eq!(&sig.0[..], &h(&t["signature"])[..], "{}", t["name"]);
        RustCrypto.verify(&pk, &msg, &sig.0).unwrap();
        // Any flipped bit in the message or signature must fail.
        let mut bad = msg.clone();
        bad.push(0);
        assert_eq!(
            RustCrypto.verify(&pk, &bad, &sig.0),
            Err(CryptoError::BadSignature)
        );
        let mut bad_sig = sig.0;
        bad_sig[10] ^= 1;
        assert!(RustCrypto.verify(&pk, &msg, &bad_sig).is_err());
    }
}

#[test]
fn generated_keys_sign_and_verify_for_every_algorithm() {
    for alg in SignatureAlgorithm::ALL {
        let sk = RustCrypto.generate(alg, &mut Counter::new(0, 1)).unwrap();
        let pk = RustCrypto.public_key(&sk).unwrap();
        assert_eq!(pk.as_bytes().len(), alg.public_key_len());
        let sig = RustCrypto.sign(&sk, b"hello").unwrap();
        RustCrypto.verify(&pk, b"hello", &sig.0).unwrap();
        assert_eq!(
            RustCrypto.verify(&pk, b"hellO", &sig.0),
            Err(CryptoError::BadSignature)
        );
        assert_eq!(
            RustCrypto.verify(&pk, b"hello", &sig.0[..63]),
            Err(CryptoError::SignatureLength)
        );
    }
}

#[test]
fn malformed_public_keys_are_rejected_not_panicking() {
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &[0; 31]).unwrap_err(),
        CryptoError::KeyLength
    );
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &[0; 65]).unwrap_err(),
        CryptoError::InvalidKey
    );
    let mut not_on_curve = [0u8; 65];
    not_on_curve[0] = 4;
    not_on_curve[64] = 7;
    // Refused where it is made, not at a later verification (tests/points.rs).
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &not_on_curve).unwrap_err(),
        CryptoError::InvalidKey
    );
}

#[test]
fn sha256_of_abc_matches_fips_180_2_example() {
    // FIPS 180-2 Appendix B.1 example.
    let d = RustCrypto.sha256(&[b"a", b"bc"]);
    assert_eq!(
        hex::encode(d),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn key_agreement_refuses_low_order_and_off_curve_peers() {
    use sigil_crypto::{AgreementAlgorithm, AgreementSecret};
    let x = AgreementSecret::from_bytes(AgreementAlgorithm::X25519, &[7u8; 32]).unwrap();
    // u = 0 and u = 1 are low-order points (RFC 7748 §6.1): the output would be all zero.
    assert_eq!(
        RustCrypto.agree(&x, &[0u8; 32]),
        Err(CryptoError::WeakSharedSecret)
    );
    let mut one = [0u8; 32];
    one[0] = 1;
    assert_eq!(
        RustCrypto.agree(&x, &one),
        Err(CryptoError::WeakSharedSecret)
    );
    assert_eq!(
        RustCrypto.agree(&x, &[1u8; 31]),
        Err(CryptoError::KeyLength)
    );

    let p = RustCrypto
        .generate_agreement(AgreementAlgorithm::P256, &mut Counter::new(3, 1))
        .unwrap();
    let mut off_curve = [0u8; 65];
    off_curve[0] = 4;
    off_curve[64] = 1;
    assert_eq!(
        RustCrypto.agree(&p, &off_curve),
        Err(CryptoError::InvalidKey)
    );
    // Both sides of a fresh exchange agree.
    let q = RustCrypto
        .generate_agreement(AgreementAlgorithm::P256, &mut Counter::new(90, 1))
        .unwrap();
    let (pp, qp) = (
        RustCrypto.agreement_public_key(&p).unwrap(),
        RustCrypto.agreement_public_key(&q).unwrap(),
    );
    assert_eq!(
        RustCrypto.agree(&p, qp.as_bytes()).unwrap(),
        RustCrypto.agree(&q, pp.as_bytes()).unwrap()
    );
}

#[test]
fn a_p256_signing_key_agrees_as_the_point_it_signs_with() {
    use sigil_crypto::{AgreementAlgorithm, AgreementSecret};
    let signing = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Counter::new(11, 3))
        .unwrap();
    let static_secret = AgreementSecret::from_p256_signing_key(&signing).unwrap();
    let public = RustCrypto.public_key(&signing).unwrap();
    assert_eq!(
        RustCrypto
            .agreement_public_key(&static_secret)
            .unwrap()
            .as_bytes(),
        public.as_bytes()
    );
    // A peer that knows only the signing key's public point reaches the same secret.
    let peer = RustCrypto
        .generate_agreement(AgreementAlgorithm::P256, &mut Counter::new(12, 5))
        .unwrap();
    let peer_public = RustCrypto.agreement_public_key(&peer).unwrap();
    assert_eq!(
        RustCrypto.agree(&peer, public.as_bytes()).unwrap(),
        RustCrypto
            .agree(&static_secret, peer_public.as_bytes())
            .unwrap()
    );
    let ed25519 = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Counter::new(13, 7))
        .unwrap();
    assert_eq!(
        AgreementSecret::from_p256_signing_key(&ed25519).unwrap_err(),
        CryptoError::InvalidKey
    );
}

#[test]
fn ccm8_detects_any_change_to_ciphertext_tag_or_associated_data() {
    let key = [9u8; 16];
    let nonce = [1u8; 12];
    let mut buf = *b"sixteen byte msg";
    let tag = RustCrypto
        .aes128_ccm8_seal(&key, &nonce, b"hdr", &mut buf)
        .unwrap();
    let sealed = buf;
    let mut ok = sealed;
    RustCrypto
        .aes128_ccm8_open(&key, &nonce, b"hdr", &mut ok, &tag)
        .unwrap();
    assert_eq!(&ok, b"sixteen byte msg");
    let mut flipped = sealed;
    flipped[3] ^= 0x10;
    assert_eq!(
        RustCrypto.aes128_ccm8_open(&key, &nonce, b"hdr", &mut flipped, &tag),
        Err(CryptoError::BadTag)
    );
    let mut again = sealed;
    assert_eq!(
        RustCrypto.aes128_ccm8_open(&key, &nonce, b"hdx", &mut again, &tag),
        Err(CryptoError::BadTag)
    );
    let mut bad_tag = tag;
    bad_tag[7] ^= 1;
    let mut again = sealed;
    assert_eq!(
        RustCrypto.aes128_ccm8_open(&key, &nonce, b"hdr", &mut again, &bad_tag),
        Err(CryptoError::BadTag)
    );
}

#[test]
fn ccm16_64_rfc3610_packet_vector_1() {
    // RFC 3610 §8, packet vector #1: M = 8, L = 2 (a 13-byte nonce), COSE's AES-CCM-16-64-128.
    let key: [u8; 16] = hex::decode("c0c1c2c3c4c5c6c7c8c9cacbcccdcecf")
        .unwrap()
        .try_into()
        .unwrap();
    let nonce: [u8; 13] = hex::decode("00000003020100a0a1a2a3a4a5")
        .unwrap()
        .try_into()
        .unwrap();
    let aad = hex::decode("0001020304050607").unwrap();
    let plain = hex::decode("08090a0b0c0d0e0f101112131415161718191a1b1c1d1e").unwrap();
    let mut buf = plain.clone();
    let tag = RustCrypto
        .aes128_ccm16_64_seal(&key, &nonce, &aad, &mut buf)
        .unwrap();
    assert_eq!(
        hex::encode([&buf[..], &tag[..]].concat()),
        "588c979a61c663d2f066d0c2c0f989806d5f6b61dac38417e8d12cfdf926e0"
    );
    RustCrypto
        .aes128_ccm16_64_open(&key, &nonce, &aad, &mut buf, &tag)
        .unwrap();
    assert_eq!(buf, plain);
    let mut bad = tag;
    bad[0] ^= 1;
    assert_eq!(
        RustCrypto.aes128_ccm16_64_open(&key, &nonce, &aad, &mut buf.clone(), &bad),
        Err(CryptoError::BadTag)
    );
}

#[test]
fn hmac_sha256_rfc4231_test_cases_2_and_6() {
    // RFC 4231 §4.3 (test case 2) and §4.7 (test case 6: a key longer than the block).
    assert_eq!(
        hex::encode(RustCrypto.hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"])),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(
        hex::encode(RustCrypto.hmac_sha256(
            &[0xaa; 131],
            &[b"Test Using Larger Than Block-Size Key - Hash Key First"]
        )),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
}

/// X25519 from an Ed25519 key (RFC 7748 §4.1 map): the secret and public value libsodium's
/// `crypto_sign_ed25519_{sk,pk}_to_curve25519` give for the seed of its `ed25519_convert` test,
/// and the two sides agree; other keys are refused.
#[test]
fn x25519_of_an_ed25519_key_matches_libsodium_and_agrees() {
    use sigil_crypto::AgreementAlgorithm;
    let seed =
        hex::decode("421151a459faeade3d247115f94aedae42318124095afabe4d1451a559faedee").unwrap();
    let sk = SecretKey::from_bytes(SignatureAlgorithm::Ed25519, &seed).unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    assert_eq!(
        hex::encode(pk.as_bytes()),
        "b5076a8474a832daee4dd5b4040983b6623b5f344aca57d4d6ee4baf3f259e6e"
    );
    let x_public = RustCrypto.x25519_public_of_ed25519(&pk).unwrap();
    assert_eq!(x_public.algorithm(), AgreementAlgorithm::X25519);
    assert_eq!(
        hex::encode(x_public.as_bytes()),
        "f1814f0e8ff1043d8a44d25babff3cedcae6c22c3edaa48f857ae70de2baae50"
    );
    let x_secret = RustCrypto.x25519_secret_of_ed25519(&sk).unwrap();
    // libsodium returns the clamped scalar; X25519 clamps the unclamped one the same way.
    let mut clamped = x_secret.to_bytes();
    clamped[0] &= 248;
    clamped[31] &= 127;
    clamped[31] |= 64;
    assert_eq!(
        hex::encode(clamped),
        "8052030376d47112be7f73ed7a019293dd12ad910b654455798b4667d73de166"
    );
    assert_eq!(
        RustCrypto.agreement_public_key(&x_secret).unwrap(),
        x_public
    );
    // An ephemeral X25519 key and the converted key agree from both sides.
    let e = RustCrypto
        .generate_agreement(AgreementAlgorithm::X25519, &mut Counter::new(5, 3))
        .unwrap();
    let e_public = RustCrypto.agreement_public_key(&e).unwrap();
    assert_eq!(
        RustCrypto.agree(&e, x_public.as_bytes()).unwrap(),
        RustCrypto.agree(&x_secret, e_public.as_bytes()).unwrap()
    );
    // A P-256 key has no such map; an Ed25519 key of small order (the identity point) or one
    // that is not a point is refused.
    let p256 = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Counter::new(1, 1))
        .unwrap();
    assert_eq!(
        RustCrypto.x25519_secret_of_ed25519(&p256).map(|_| ()),
        Err(CryptoError::InvalidKey)
    );
    let p256_public = RustCrypto.public_key(&p256).unwrap();
    assert_eq!(
        RustCrypto.x25519_public_of_ed25519(&p256_public),
        Err(CryptoError::InvalidKey)
    );
    let mut identity_point = [0u8; 32];
    identity_point[0] = 1;
    let weak = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &identity_point).unwrap();
    assert_eq!(
        RustCrypto.x25519_public_of_ed25519(&weak),
        Err(CryptoError::InvalidKey)
    );
}
