//! `u1·G + u2·Q` in one joint pass (Shamir's trick, interleaved with 2-bit windows), on the
//! `p256` crate's point arithmetic. **For the comparison in docs/device-costs.md only**:
//! `p256` 0.13's ECDSA verification computes the same sum as two separate scalar
//! multiplications (its `LinearCombination` is the trait's default), while `p256-cm4`'s
//! verification already runs one joint pass. Variable time: for public inputs (signature
//! verification) only.

use p256::elliptic_curve::group::Group;
use p256::elliptic_curve::ops::{Invert, Reduce};
use p256::elliptic_curve::point::AffineCoordinates;
use p256::{ProjectivePoint, Scalar, U256};

/// `u1·x + u2·y`: one doubling per bit of the scalars and at most one addition per two bits,
/// from a table of the 16 sums `i·x + j·y` (i, j < 4).
pub fn lincomb(
    x: &ProjectivePoint,
    u1: &Scalar,
    y: &ProjectivePoint,
    u2: &Scalar,
) -> ProjectivePoint {
    let mut t = [ProjectivePoint::IDENTITY; 16];
    t[1] = *x;
    t[2] = x.double();
    t[3] = t[2] + x;
    for j in 1..4 {
        t[4 * j] = t[4 * (j - 1)] + y;
        for i in 1..4 {
            t[4 * j + i] = t[4 * j] + t[i];
        }
    }
    let (a, b) = (u1.to_bytes(), u2.to_bytes());
    let mut acc = ProjectivePoint::IDENTITY;
    for (&ab, &bb) in a.iter().zip(b.iter()) {
        for shift in [6u8, 4, 2, 0] {
            acc = acc.double().double();
            let idx = usize::from((ab >> shift) & 3) + 4 * usize::from((bb >> shift) & 3);
            if idx != 0 {
                acc += t[idx];
            }
        }
    }
    acc
}

/// How an ECDSA verification computes `u1·G + u2·Q`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// [`lincomb`]: one joint pass.
    Joint,
    /// Two scalar multiplications and an addition (what `p256` 0.13 does).
    Separate,
}

/// ECDSA P-256 verification (FIPS 186-5 §6.4.2) of `(r, s)` over the SHA-256 `digest` under
/// the SEC 1 public key `public`, with the final sum computed as `how` says. `false` for any
/// malformed input or a signature that does not verify.
pub fn verify_prehash(public: &[u8], digest: &[u8; 32], sig: &[u8; 64], how: Combine) -> bool {
    let Ok(q) = p256::PublicKey::from_sec1_bytes(public) else {
        return false;
    };
    let r = p256::NonZeroScalar::try_from(&sig[..32]);
    let s = p256::NonZeroScalar::try_from(&sig[32..]);
    let (Ok(r), Ok(s)) = (r, s) else {
        return false;
    };
    let e = <Scalar as Reduce<U256>>::reduce_bytes(&(*digest).into());
    // Public values: the variable-time inversion, as `ecdsa`'s own verification uses.
    let w = *s.invert_vartime();
    let (u1, u2) = (e * w, *r * w);
    let q = q.to_projective();
    let sum = match how {
        Combine::Joint => lincomb(&ProjectivePoint::GENERATOR, &u1, &q, &u2),
        Combine::Separate => ProjectivePoint::GENERATOR * u1 + q * u2,
    };
    if bool::from(sum.is_identity()) {
        return false;
    }
    <Scalar as Reduce<U256>>::reduce_bytes(&sum.to_affine().x()) == *r
}
