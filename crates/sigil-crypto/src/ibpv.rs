//! Precomputed nonce pairs for ECDSA and ECDH on P-256 (the BPV generator, which the
//! DTLS-as-a-CoAP-resource paper uses under the name IBPV). **A comparison option, not for
//! production use**: docs/security.md says why, docs/device-costs.md what it saves.
//!
//! At setup, [`Ibpv::fill`] draws `N` scalars `k_i` from the RNG and stores the pairs
//! `(k_i, k_i·G)`. Each fresh pair `(r, r·G)` is then the sum of `L` distinct entries chosen at
//! random: `r = Σ k_i mod n`, `R = Σ P_i`, which costs `L - 1` point additions and one
//! conversion to affine coordinates instead of a scalar multiplication. The pair is the ECDSA
//! nonce ([`Ibpv::sign`]) or an ephemeral ECDH key ([`Ibpv::agreement_secret`]).
//!
//! Every `r` lies in a set of at most `C(N, L)` values, fewer than the group order for every
//! table that fits a microcontroller's RAM: the nonces are not uniform, which ECDSA's security
//! argument assumes. The table is as secret as the signing key: anyone who reads it can
//! recover the key from one signature by trying subsets.
//!
//! The curve arithmetic is the `p256` crate's (`ProjectivePoint`, `Scalar`); nothing here is new
//! field arithmetic. Signing and the sums are constant-time only as far as `p256` is; the
//! choice of table indices (memory access pattern) is not hidden.

use crate::{
    AgreementAlgorithm, AgreementSecret, CryptoError, Rng, SecretKey, Signature, SignatureAlgorithm,
};
use p256::elliptic_curve::ops::{Invert, Reduce};
use p256::elliptic_curve::point::AffineCoordinates;
use p256::elliptic_curve::Field;
use p256::{AffinePoint, FieldBytes, NonZeroScalar, ProjectivePoint, Scalar, U256};
use zeroize::Zeroize;

/// Bytes one table entry takes when serialised: the 32-byte scalar and the two 32-byte
/// coordinates of its point.
pub const ENTRY_BYTES: usize = 96;

/// A table of `N` precomputed pairs `(k_i, k_i·G)`.
pub struct Ibpv<const N: usize> {
    k: [Scalar; N],
    p: [AffinePoint; N],
    filled: bool,
}

impl<const N: usize> Ibpv<N> {
    /// Table indices are drawn as 16-bit values, so `N` is at most 2^16; a table needs at
    /// least two entries.
    const VALID: () = assert!(N >= 2 && N <= 1 << 16, "N must be in 2..=65536");

    /// An empty table, usable as a `static` initialiser; [`fill`](Self::fill) it before use.
    pub const fn empty() -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::VALID;
        Self {
            k: [Scalar::ZERO; N],
            p: [AffinePoint::IDENTITY; N],
            filled: false,
        }
    }

    /// Bytes of the table when serialised (`N` × [`ENTRY_BYTES`]); the in-memory value is
    /// `size_of::<Ibpv<N>>()`.
    pub const fn table_bytes() -> usize {
        N * ENTRY_BYTES
    }

    /// The setup step: `N` fresh scalars from `rng` and their multiples of the generator
    /// (`N` scalar multiplications). Replaces whatever the table held.
    pub fn fill(&mut self, rng: &mut dyn Rng) -> Result<(), CryptoError> {
        self.filled = false;
        for i in 0..N {
            let k = random_nonzero(rng)?;
            self.p[i] = (ProjectivePoint::GENERATOR * *k).to_affine();
            self.k[i] = *k;
        }
        self.filled = true;
        Ok(())
    }

    /// A fresh pair `(r, r·G)`: the sum of `L` distinct entries chosen with `rng`.
    /// Fails with [`CryptoError::Unsupported`] if `L` is not in `1..=N` and with
    /// [`CryptoError::InvalidKey`] before [`fill`](Self::fill).
    pub fn pair<const L: usize>(
        &self,
        rng: &mut dyn Rng,
    ) -> Result<(NonZeroScalar, AffinePoint), CryptoError> {
        if !self.filled {
            return Err(CryptoError::InvalidKey);
        }
        if L == 0 || L > N {
            return Err(CryptoError::Unsupported);
        }
        // A sum of zero has probability about C(N, L)^-1 over the table; draw again.
        for _ in 0..8 {
            let idx = distinct_indices::<L>(N, rng)?;
            let mut r = Scalar::ZERO;
            let mut acc = ProjectivePoint::IDENTITY;
            for &i in &idx {
                let i = usize::from(i);
                r += self.k[i];
                acc += self.p[i];
            }
            let r = Option::<NonZeroScalar>::from(NonZeroScalar::new(r));
            if let Some(r) = r {
                return Ok((r, acc.to_affine()));
            }
        }
        Err(CryptoError::Rng)
    }

    /// ECDSA P-256 with SHA-256 (FIPS 186-5 §6.4.1) over `message`, its nonce from
    /// [`pair`](Self::pair). The signature is an ordinary one: any ECDSA verifier accepts it.
    pub fn sign<const L: usize>(
        &self,
        rng: &mut dyn Rng,
        key: &SecretKey,
        message: &[u8],
    ) -> Result<Signature, CryptoError> {
        if key.algorithm() != SignatureAlgorithm::EcdsaP256 {
            return Err(CryptoError::Unsupported);
        }
        let mut d_bytes = key.to_bytes();
        let d = NonZeroScalar::try_from(&d_bytes[..]).map_err(|_| CryptoError::InvalidKey);
        d_bytes.zeroize();
        let d = d?;
        let digest = crate::rustcrypto::sha256(&[message]);
        // P-256's order and SHA-256 are both 256 bits: the digest reduced mod n is e.
        let e = <Scalar as Reduce<U256>>::reduce_bytes(&FieldBytes::from(digest));
        for _ in 0..8 {
            let (k, big_r) = self.pair::<L>(rng)?;
            let r = <Scalar as Reduce<U256>>::reduce_bytes(&big_r.x());
            if bool::from(r.is_zero()) {
                continue;
            }
            let k_inv = k.invert();
            let s = *k_inv * (e + r * *d);
            if bool::from(s.is_zero()) {
                continue;
            }
            let mut out = [0u8; 64];
            out[..32].copy_from_slice(&r.to_bytes());
            out[32..].copy_from_slice(&s.to_bytes());
            return Ok(Signature(out));
        }
        Err(CryptoError::Rng)
    }

    /// An ephemeral P-256 key-agreement secret whose public value `r·G` was summed from the
    /// table: both are returned, so no scalar multiplication by the generator is needed. The
    /// shared secret is then the provider's [`agree`](crate::CryptoProvider::agree).
    pub fn agreement_secret<const L: usize>(
        &self,
        rng: &mut dyn Rng,
    ) -> Result<(AgreementSecret, crate::AgreementPublicKey), CryptoError> {
        use p256::elliptic_curve::sec1::ToEncodedPoint;
        let (r, big_r) = self.pair::<L>(rng)?;
        let mut bytes: [u8; 32] = r.to_bytes().into();
        let secret = AgreementSecret::from_bytes(AgreementAlgorithm::P256, &bytes);
        bytes.zeroize();
        let public = crate::AgreementPublicKey::from_bytes(
            AgreementAlgorithm::P256,
            big_r.to_encoded_point(false).as_bytes(),
        )?;
        Ok((secret?, public))
    }
}

impl<const N: usize> Drop for Ibpv<N> {
    fn drop(&mut self) {
        // The points are secret too: with them, the subset behind each signature can be
        // searched for, and enough known subsets give the scalars by linear algebra.
        for (k, p) in self.k.iter_mut().zip(self.p.iter_mut()) {
            *k = Scalar::ZERO;
            *p = AffinePoint::IDENTITY;
        }
        self.filled = false;
    }
}

/// A uniformly random scalar in [1, n-1] (rejection sampling, as the portable backend's keys).
fn random_nonzero(rng: &mut dyn Rng) -> Result<NonZeroScalar, CryptoError> {
    let bytes = crate::rustcrypto::p256_scalar(rng)?;
    NonZeroScalar::try_from(&bytes[..]).map_err(|_| CryptoError::Rng)
}

/// `L` distinct indices below `n`, uniformly among the `L`-subsets: 16-bit draws masked to the
/// next power of two and rejected when out of range or already taken.
fn distinct_indices<const L: usize>(n: usize, rng: &mut dyn Rng) -> Result<[u16; L], CryptoError> {
    let mask = n.next_power_of_two() - 1;
    let mut out = [0u16; L];
    let mut have = 0;
    // Each draw is accepted with probability above 1/2 · (n - L + 1)/n; the bound is far from
    // reached with a working RNG.
    let mut budget = 64 * L + 256;
    while have < L {
        if budget == 0 {
            return Err(CryptoError::Rng);
        }
        budget -= 1;
        let mut b = [0u8; 2];
        rng.fill(&mut b)?;
        let i = usize::from(u16::from_le_bytes(b)) & mask;
        if i >= n || out[..have].iter().any(|&j| usize::from(j) == i) {
            continue;
        }
        out[have] = i as u16;
        have += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter(u32);
    impl Rng for Counter {
        fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
            for b in buf {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 17;
                self.0 ^= self.0 << 5;
                *b = self.0 as u8;
            }
            Ok(())
        }
    }

    #[test]
    fn indices_are_distinct_and_in_range() {
        let mut rng = Counter(7);
        for _ in 0..200 {
            let idx = distinct_indices::<12>(13, &mut rng).unwrap();
            for (a, &i) in idx.iter().enumerate() {
                assert!(usize::from(i) < 13);
                assert!(idx[a + 1..].iter().all(|&j| j != i));
            }
        }
    }

    #[test]
    fn every_index_is_drawn() {
        let mut rng = Counter(9);
        let mut seen = [0u32; 40];
        for _ in 0..400 {
            for i in distinct_indices::<4>(40, &mut rng).unwrap() {
                seen[usize::from(i)] += 1;
            }
        }
        // 1600 draws over 40 indices: 40 each on average; none starved or favoured 3×.
        assert!(seen.iter().all(|&c| (13..=120).contains(&c)), "{seen:?}");
    }
}
