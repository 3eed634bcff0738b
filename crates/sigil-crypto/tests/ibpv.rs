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
