//! A public key that is not a point of its curve is refused where it is made
//! (`PublicKey::from_bytes`, `AgreementPublicKey::from_bytes`), not at a later verification.

use sigil_crypto::{
    AgreementAlgorithm, AgreementPublicKey, CryptoError, CryptoProvider, PublicKey, RustCrypto,
    SecretKey, SignatureAlgorithm,
};

fn p256_key() -> Vec<u8> {
    let sk = SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, &[7; 32]).unwrap();
    RustCrypto.public_key(&sk).unwrap().as_bytes().to_vec()
}

/// The field prime of Curve25519 plus `k`, little-endian: a non-canonical encoding of `y = k`.
fn ed25519_prime_plus(k: u8) -> [u8; 32] {
    let mut b = [0xff; 32];
    b[0] = 0xed + k;
    b[31] = 0x7f;
    b
}

#[test]
fn a_p256_point_off_the_curve_is_refused() {
    let good = p256_key();
    assert!(PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &good).is_ok());
    assert!(AgreementPublicKey::from_bytes(AgreementAlgorithm::P256, &good).is_ok());
    // One bit of y flipped: (x, y') is not on the curve.
    let mut off = good.clone();
    off[64] ^= 1;
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &off),
        Err(CryptoError::InvalidKey)
    );
    assert_eq!(
        AgreementPublicKey::from_bytes(AgreementAlgorithm::P256, &off).map(|_| ()),
        Err(CryptoError::InvalidKey)
    );
    // Coordinates at or above the field prime, and the all-zero "point".
    let mut big = good.clone();
    big[1..33].fill(0xff);
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &big),
        Err(CryptoError::InvalidKey)
    );
    let mut zero = [0u8; 65];
    zero[0] = 4;
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &zero),
        Err(CryptoError::InvalidKey)
    );
    // The prefix and length checks stay.
    let mut compressed = good.clone();
    compressed[0] = 2;
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &compressed),
        Err(CryptoError::InvalidKey)
    );
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &good[..64]),
        Err(CryptoError::KeyLength)
    );
}

#[test]
fn an_ed25519_encoding_that_is_not_a_canonical_point_is_refused() {
    let sk = SecretKey::from_bytes(SignatureAlgorithm::Ed25519, &[9; 32]).unwrap();
    let good = RustCrypto.public_key(&sk).unwrap();
    assert!(PublicKey::from_bytes(SignatureAlgorithm::Ed25519, good.as_bytes()).is_ok());
    // y = p + 1 and y = p + 2 decode (as y = 1 and y = 2) only by reduction modulo p.
    for k in [1, 2] {
        assert_eq!(
            PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &ed25519_prime_plus(k)),
            Err(CryptoError::InvalidKey),
            "y = p + {k}"
        );
    }
    // y = 2 has no x on the curve (x^2 = (y^2 - 1) / (d y^2 + 1) is not a square).
    let mut two = [0u8; 32];
    two[0] = 2;
    assert_eq!(
        PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &two),
        Err(CryptoError::InvalidKey)
    );
    // Canonical small-order points decode; strict verification refuses every signature
    // under them.
    let mut one = [0u8; 32];
    one[0] = 1;
    let weak = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &one).unwrap();
    assert!(RustCrypto.verify(&weak, b"m", &[0; 64]).is_err());
}
