//! Who a request speaks for: the one authentication type below both the coaps:// layer
//! ([`crate::secure`], which produces it) and the handlers (which check it).

use sigil_crypto::PublicKey;
use sigil_identity::Identity;
use std::collections::{HashMap, HashSet};

/// Who a DTLS session authenticated (RFC 7252 §9.1.3). Over coaps:// the RD and broker accept
/// registrations, updates, removals and publications only for the authenticated identity's
/// own entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAuth {
    /// The pre-shared key provisioned for this identity.
    Psk(Identity),
    /// A raw public key whose identity `h(P)` is on the authorized list.
    RawPublicKey { identity: Identity, key: PublicKey },
}

impl PeerAuth {
    pub fn identity(&self) -> &Identity {
        match self {
            Self::Psk(id) | Self::RawPublicKey { identity: id, .. } => id,
        }
    }

    /// Whether this peer may act for the registration of `ep` with `key`: a PSK names the
    /// identity; a raw public key must be the registered key itself.
    pub fn speaks_for(&self, ep: &Identity, key: &PublicKey) -> bool {
        match self {
            Self::Psk(id) => id == ep,
            Self::RawPublicKey { key: k, .. } => k == key,
        }
    }
}

/// Whether `auth` (if any) forbids acting for `ep`/`key`: plain CoAP carries no
/// authentication and is checked by signatures instead; a session must speak for the entry.
pub fn mismatched(auth: Option<&PeerAuth>, ep: &Identity, key: &PublicKey) -> bool {
    auth.is_some_and(|a| !a.speaks_for(ep, key))
}

/// What DTLS trusts, taken from the authorized list: identities (raw public keys are pinned to
/// them) and the pre-shared keys provisioned for some of them.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub authorized: HashSet<Identity>,
    pub psks: HashMap<Identity, Vec<u8>>,
}
