//! The binding of an announced key to an identity (RFC 8387 §4, §4.1), checked the same way by
//! the Resource Directory at registration and by the application before it trusts a key it
//! looked up: the key must hash to the claimed identity, and that identity (or the kit's group
//! identity) must be on the checker's own list.

use crate::{sorted, Identity, IdentityError, DOMAIN_GROUP, MAX_GROUP_MEMBERS};
use core::fmt;
use sigil_crypto::{CryptoProvider, PublicKey};

/// Why an announced key does not bind to the claimed identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingError {
    /// `I = h(P|O)` cannot be computed (other information too long).
    BadKey,
    /// The kit keys do not form a group: too many, or a key listed twice (§4.1).
    BadGroup,
    /// The key (with `O`, or with the kit's keys) hashes to another identity.
    Mismatch,
}

impl fmt::Display for BindingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::BadKey => "the identity of the key cannot be computed",
            Self::BadGroup => "the kit keys do not form a group",
            Self::Mismatch => "the key does not hash to the claimed identity",
        })
    }
}

impl core::error::Error for BindingError {}

/// What an announced key proves: the device identity it hashes to and, for a kit member, the
/// kit's group identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// `I = h(P|O)`, or for a kit member `Idev = h(Pdev|Potherdev1|…)` (§4.1).
    pub device: Identity,
    /// `Igrp = h(Pdev1|…|Pdevm)` over the key and `others`, for a kit member.
    pub group: Option<Identity>,
}

impl Binding {
    /// The identities of `key`. Outside a kit (`others` empty) the device identity is
    /// `h(P|O)` with `other_info`; in a kit it is `Idev`, which hashes keys only (§4.1), so
    /// `other_info` is not part of it.
    pub fn of<C: CryptoProvider + ?Sized>(
        crypto: &C,
        key: &PublicKey,
        others: &[PublicKey],
        other_info: &[u8],
    ) -> Result<Self, BindingError> {
        if others.is_empty() {
            let device =
                Identity::of_key(crypto, key, other_info).map_err(|_| BindingError::BadKey)?;
            return Ok(Self {
                device,
                group: None,
            });
        }
        let device =
            Identity::of_member(crypto, key, others).map_err(|_| BindingError::BadGroup)?;
        Ok(Self {
            device,
            group: Some(group_of(crypto, key, others).map_err(|_| BindingError::BadGroup)?),
        })
    }

    /// [`Binding::of`], and the device identity must be `claimed` (the endpoint name of a
    /// registration, or the `ep` a directory lists the key under).
    pub fn check<C: CryptoProvider + ?Sized>(
        crypto: &C,
        claimed: &Identity,
        key: &PublicKey,
        others: &[PublicKey],
        other_info: &[u8],
    ) -> Result<Self, BindingError> {
        let b = Self::of(crypto, key, others, other_info)?;
        if b.device != *claimed {
            return Err(BindingError::Mismatch);
        }
        Ok(b)
    }

    /// The identity on a list that admits this key: the device identity itself, else the
    /// kit's group identity (§4.1). `None` when neither is listed.
    pub fn authorized_by(&self, is_listed: impl Fn(&Identity) -> bool) -> Option<Identity> {
        if is_listed(&self.device) {
            return Some(self.device);
        }
        self.group.filter(|g| is_listed(g))
    }
}

/// `Igrp` of the kit made of `own` and `others`, without copying the keys.
fn group_of<C: CryptoProvider + ?Sized>(
    crypto: &C,
    own: &PublicKey,
    others: &[PublicKey],
) -> Result<Identity, IdentityError> {
    if others.len() + 1 > MAX_GROUP_MEMBERS {
        return Err(IdentityError::GroupSize);
    }
    let mut scratch = [own; MAX_GROUP_MEMBERS];
    let n = sorted(others, own, &mut scratch)?;
    // Own key goes last, then the whole list is put back into canonical order.
    scratch[n] = own;
    let list = &mut scratch[..n + 1];
    list.sort_unstable_by(|a, b| crate::key_order(a, b));
    if list.windows(2).any(|w| w[0] == w[1]) {
        return Err(IdentityError::DuplicateKey);
    }
    Ok(Identity::hash_keys(crypto, DOMAIN_GROUP, None, list))
}
