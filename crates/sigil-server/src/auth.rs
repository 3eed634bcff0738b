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
    /// A raw public key whose identity `h(P)` is on the authorized list, or that a token held
    /// at `/authz-info` binds (RFC 9202 §3.2).
    RawPublicKey { identity: Identity, key: PublicKey },
    /// The symmetric proof-of-possession key of an access token (RFC 9202 §3.3): the PSK
    /// identity is the token's kid; `subject` is the client the AC issued the token to. Such a
    /// session may do what the token's scope allows ([`crate::authz::Tokens`]): read, and
    /// publish to its subject's own topic; it speaks for no registration.
    Token { kid: Vec<u8>, subject: Identity },
}

impl PeerAuth {
    pub fn identity(&self) -> &Identity {
        match self {
            Self::Psk(id)
            | Self::RawPublicKey { identity: id, .. }
            | Self::Token { subject: id, .. } => id,
        }
    }

    /// Whether this peer may act for the registration of `ep` with `key`: a PSK names the
    /// identity; a raw public key must be the registered key itself (a registration without
    /// a key, made by a PSK-only node, has none to match).
    pub fn speaks_for(&self, ep: &Identity, key: Option<&PublicKey>) -> bool {
        match self {
            Self::Psk(id) => id == ep,
            Self::RawPublicKey { key: k, .. } => key == Some(k),
            Self::Token { .. } => false,
        }
    }
}

/// Whether `auth` (if any) forbids acting for `ep`/`key`: plain CoAP carries no
/// authentication and is checked by signatures instead; a session must speak for the entry.
pub fn mismatched(auth: Option<&PeerAuth>, ep: &Identity, key: Option<&PublicKey>) -> bool {
    auth.is_some_and(|a| !a.speaks_for(ep, key))
}

/// What DTLS trusts, taken from the authorized list: identities (raw public keys are pinned to
/// them) and the pre-shared keys provisioned for some of them; and the PoP keys of the access
/// tokens held.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    pub authorized: HashSet<Identity>,
    pub psks: HashMap<Identity, Vec<u8>>,
    /// The symmetric PoP keys of the tokens held (`/authz-info`), by kid, with their subject.
    pub token_psks: HashMap<Vec<u8>, (Vec<u8>, Identity)>,
    /// The identities of the raw public keys tokens bind.
    pub token_keys: HashSet<Identity>,
    /// The PSK-only nodes: their sessions are never kept across a restart, since their
    /// session readings have no number of their own (docs/security.md).
    pub psk_nodes: HashSet<Identity>,
    /// The revoked identities: live sessions speaking for one of them end
    /// ([`crate::secure::SecureLayer`]).
    pub revoked: HashSet<Identity>,
}
