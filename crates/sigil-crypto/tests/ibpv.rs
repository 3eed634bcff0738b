//! The precomputed-pair comparison option (feature `ibpv`): its pairs are real pairs, its
//! signatures pass the standard verifiers, and its ephemeral keys agree with a peer.
#![cfg(feature = "ibpv")]

use p256::ecdsa::signature::Verifier;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::ProjectivePoint;
use sigil_crypto::ibpv::{Ibpv, ENTRY_BYTES};
use sigil_crypto::{
    AgreementAlgorithm, CryptoError, CryptoProvider, Rng, RustCrypto, SignatureAlgorithm,
};
use sigil_testkit::Seeded;

const N: usize = 64;
const L: usize = 12;

fn table(seed: u64) -> Box<Ibpv<N>> {
    let mut t = Box::new(Ibpv::<N>::empty());
    t.fill(&mut Seeded::new(seed)).unwrap();
    t
}

#[test]
fn a_fresh_pair_is_a_scalar_and_its_multiple_of_the_generator() {
    let t = table(1);
    let mut rng = Seeded::new(2);
    let mut seen = Vec::new();
    for _ in 0..20 {
        let (r, big_r) = t.pair::<L>(&mut rng).unwrap();
        assert_eq!((ProjectivePoint::GENERATOR * *r).to_affine(), big_r);
        seen.push(r.to_bytes());
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 20, "twenty draws gave a repeated nonce");
}

#[test]
fn a_signature_verifies_with_p256_and_with_the_provider() {
    let t = table(3);
    let mut rng = Seeded::new(4);
    let sk = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded::new(5))
        .unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(pk.as_bytes()).unwrap();
    for msg in [&b"sample"[..], b"", &[0xa5; 300][..]] {
        let sig = t.sign::<L>(&mut rng, &sk, msg).unwrap();
        let parsed = p256::ecdsa::Signature::from_slice(&sig.0).unwrap();
        vk.verify(msg, &parsed).unwrap();
        RustCrypto.verify(&pk, msg, &sig.0).unwrap();
        let mut other = msg.to_vec();
        other.push(1);
        assert_eq!(
            RustCrypto.verify(&pk, &other, &sig.0),
            Err(CryptoError::BadSignature)
        );
    }
    // Two signatures over the same message take different nonces, so differ.
    let a = t.sign::<L>(&mut rng, &sk, b"sample").unwrap();
    let b = t.sign::<L>(&mut rng, &sk, b"sample").unwrap();
    assert_ne!(a.0[..32], b.0[..32]);
}

#[test]
fn both_sides_of_an_ephemeral_agreement_agree() {
    let t = table(6);
    let mut rng = Seeded::new(7);
    let (mine, my_public) = t.agreement_secret::<L>(&mut rng).unwrap();
    // The public value handed out is the one the provider derives from the secret.
    assert_eq!(RustCrypto.agreement_public_key(&mine).unwrap(), my_public);
    let peer = RustCrypto
        .generate_agreement(AgreementAlgorithm::P256, &mut Seeded::new(8))
        .unwrap();
    let peer_public = RustCrypto.agreement_public_key(&peer).unwrap();
    let ours = RustCrypto.agree(&mine, peer_public.as_bytes()).unwrap();
    let theirs = RustCrypto.agree(&peer, my_public.as_bytes()).unwrap();
    assert_eq!(ours, theirs);
    // And with p256's own ECDH on the peer's side.
    let peer_sk = p256::SecretKey::from_slice(&peer.to_bytes()).unwrap();
    let my_pk = p256::PublicKey::from_sec1_bytes(my_public.as_bytes()).unwrap();
    let shared = p256::ecdh::diffie_hellman(peer_sk.to_nonzero_scalar(), my_pk.as_affine());
    assert_eq!(shared.raw_secret_bytes()[..], ours[..]);
}

#[test]
fn the_table_is_what_the_rng_gave() {
    // Same seed, same table: the first pair of each is the same.
    let (a, b) = (table(9), table(9));
    let pa = a.pair::<L>(&mut Seeded::new(10)).unwrap();
    let pb = b.pair::<L>(&mut Seeded::new(10)).unwrap();
    assert_eq!(pa.0.to_bytes(), pb.0.to_bytes());
    assert_eq!(pa.1.to_encoded_point(false), pb.1.to_encoded_point(false));
    // A different table gives a different pair for the same choice of entries.
    let c = table(11);
    let pc = c.pair::<L>(&mut Seeded::new(10)).unwrap();
    assert_ne!(pa.0.to_bytes(), pc.0.to_bytes());
    assert_eq!(Ibpv::<N>::table_bytes(), N * ENTRY_BYTES);
}

struct Failing;
impl Rng for Failing {
    fn fill(&mut self, _: &mut [u8]) -> Result<(), CryptoError> {
        Err(CryptoError::Rng)
    }
}

#[test]
fn misuse_is_refused() {
    let mut t = Box::new(Ibpv::<N>::empty());
    // Not filled yet.
    assert_eq!(
        t.pair::<L>(&mut Seeded::new(1)).err(),
        Some(CryptoError::InvalidKey)
    );
    // A failing RNG during setup leaves the table unusable.
    assert_eq!(t.fill(&mut Failing), Err(CryptoError::Rng));
    assert_eq!(
        t.pair::<L>(&mut Seeded::new(1)).err(),
        Some(CryptoError::InvalidKey)
    );
    t.fill(&mut Seeded::new(1)).unwrap();
    // More entries per sum than the table holds, or none.
    assert_eq!(
        t.pair::<{ N + 1 }>(&mut Seeded::new(1)).err(),
        Some(CryptoError::Unsupported)
    );
    assert_eq!(
        t.pair::<0>(&mut Seeded::new(1)).err(),
        Some(CryptoError::Unsupported)
    );
    assert_eq!(t.pair::<L>(&mut Failing).err(), Some(CryptoError::Rng));
    // An Ed25519 key cannot sign here.
    let ed = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Seeded::new(2))
        .unwrap();
    assert_eq!(
        t.sign::<L>(&mut Seeded::new(3), &ed, b"x").err(),
        Some(CryptoError::Unsupported)
    );
}

#[test]
fn the_joint_pass_is_the_sum_of_the_two_multiplications() {
    use p256::elliptic_curve::Field;
    use sigil_crypto::shamir;
    let mut rng = rand_core_rng(12);
    for _ in 0..8 {
        let (u1, u2, k) = (
            p256::Scalar::random(&mut rng),
            p256::Scalar::random(&mut rng),
            p256::Scalar::random(&mut rng),
        );
        let q = ProjectivePoint::GENERATOR * k;
        assert_eq!(
            shamir::lincomb(&ProjectivePoint::GENERATOR, &u1, &q, &u2),
            ProjectivePoint::GENERATOR * u1 + q * u2
        );
    }
    // Edge scalars: zero and n - 1.
    let q = ProjectivePoint::GENERATOR * p256::Scalar::from(5u64);
    let minus_one = -p256::Scalar::ONE;
    for (a, b) in [
        (p256::Scalar::ZERO, minus_one),
        (minus_one, p256::Scalar::ZERO),
        (minus_one, minus_one),
    ] {
        assert_eq!(
            shamir::lincomb(&ProjectivePoint::GENERATOR, &a, &q, &b),
            ProjectivePoint::GENERATOR * a + q * b
        );
    }
}

#[test]
fn both_ways_of_verifying_accept_the_rfc6979_vector_and_reject_a_change() {
    use sigil_crypto::shamir::{verify_prehash, Combine};
    // RFC 6979 A.2.5, SHA-256, message "sample".
    let public = hex::decode(concat!(
        "04",
        "60fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb6",
        "7903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299"
    ))
    .unwrap();
    let sig: [u8; 64] = hex::decode(concat!(
        "efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716",
        "f7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8"
    ))
    .unwrap()
    .try_into()
    .unwrap();
    let digest = RustCrypto.sha256(&[b"sample"]);
    for how in [Combine::Joint, Combine::Separate] {
        assert!(verify_prehash(&public, &digest, &sig, how));
        let mut bad = sig;
        bad[63] ^= 1;
        assert!(!verify_prehash(&public, &digest, &bad, how));
        let other = RustCrypto.sha256(&[b"samplf"]);
        assert!(!verify_prehash(&public, &other, &sig, how));
        assert!(!verify_prehash(&public[..64], &digest, &sig, how));
        assert!(!verify_prehash(&public, &digest, &[0; 64], how));
    }
}

/// A `rand_core` RNG over the test's deterministic bytes, for `Field::random`.
fn rand_core_rng(seed: u64) -> impl p256::elliptic_curve::rand_core::RngCore {
    struct R(Seeded);
    impl p256::elliptic_curve::rand_core::RngCore for R {
        fn next_u32(&mut self) -> u32 {
            let mut b = [0; 4];
            self.fill_bytes(&mut b);
            u32::from_le_bytes(b)
        }
        fn next_u64(&mut self) -> u64 {
            self.0.next_u64()
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            self.0.fill(dest).unwrap();
        }
        fn try_fill_bytes(
            &mut self,
            dest: &mut [u8],
        ) -> Result<(), p256::elliptic_curve::rand_core::Error> {
            self.fill_bytes(dest);
            Ok(())
        }
    }
    R(Seeded::new(seed))
}
