//! Provisioning: feeding the authorized identity list (RFC 8387 §4) from the command line or
//! from a text file as scanned from device labels or a kit's box.
//!
//! The file format and its refusals are `sigil_identity::list`'s (one identity per line, in any
//! label form, optionally `group` or `device` and a label; `#` comments); the application's
//! trust list is the same format.

use crate::store::{IdentityKind, Store, StoreError};
use sigil_identity::list::{self, ListedKind};
use sigil_identity::Identity;

/// Lengths a DTLS pre-shared key may have, in bytes (128 to 512 bits; the DTLS layer holds at
/// most `sigil_dtls::keys::MAX_PSK_LEN`).
pub const PSK_LEN: std::ops::RangeInclusive<usize> = 16..=64;

#[derive(Debug, thiserror::Error)]
pub enum PskError {
    #[error("a PSK has 16 to 64 bytes, not {0}")]
    Length(usize),
    #[error("{0} is not an active identity: add it first")]
    NotActive(Identity),
    #[error("{0} is revoked: `sigil provision add {0} --reinstate` re-activates it first")]
    Revoked(Identity),
    #[error("no randomness for a new identity")]
    NoRandomness,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks a pre-shared key's length before anything is stored.
pub fn check_psk(key: &[u8]) -> Result<(), PskError> {
    if PSK_LEN.contains(&key.len()) {
        Ok(())
    } else {
        Err(PskError::Length(key.len()))
    }
}

/// Gives an active identity a DTLS pre-shared key (replacing any earlier one).
pub fn set_psk(store: &Store, id: &Identity, key: &[u8], now: i64) -> Result<(), PskError> {
    check_psk(key)?;
    if !store.authorized()?.contains_key(id) {
        if store.revoked_at(id)?.is_some() {
            return Err(PskError::Revoked(*id));
        }
        return Err(PskError::NotActive(*id));
    }
    store.set_psk(id, key, now)?;
    Ok(())
}

/// Adds a node that has only a pre-shared key: a fresh random identity (it has no key pair,
/// so no `I = h(P|O)`; the identity is a name assigned here, whose only proof is the PSK),
/// authorized as a device, with `key` as its PSK. Returns the identity.
pub fn add_psk_node(
    store: &Store,
    label: &str,
    key: &[u8],
    now: i64,
    rng: &mut dyn sigil_crypto::Rng,
) -> Result<Identity, PskError> {
    check_psk(key)?;
    let authorized = store.list_identities()?;
    let id = loop {
        let mut bytes = [0u8; sigil_identity::IDENTITY_LEN];
        rng.fill(&mut bytes).map_err(|_| PskError::NoRandomness)?;
        let id = Identity::from_bytes(bytes);
        // Never a name already used (active or revoked): an identity stays one node's.
        if !authorized.iter().any(|r| r.identity == id.to_string()) {
            break id;
        }
    };
    store.add_identity(&id, IdentityKind::Device, label, now)?;
    store.set_psk(&id, key, now)?;
    store.mark_psk_only(&id)?;
    Ok(id)
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{msg}")]
    Line { line: usize, msg: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One parsed line of an identity list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub identity: Identity,
    pub kind: IdentityKind,
    pub label: String,
}

/// Parses an identity list (`sigil_identity::list`). Every line is checked before anything is
/// returned; the first refused line is the error.
pub fn parse_list(text: &str) -> Result<Vec<Entry>, ImportError> {
    list::entries(text)
        .map(|e| {
            let e = e.map_err(|err| ImportError::Line {
                line: err.line(),
                msg: err.to_string(),
            })?;
            Ok(Entry {
                identity: e.identity,
                kind: match e.kind {
                    ListedKind::Device => IdentityKind::Device,
                    ListedKind::Group => IdentityKind::Group,
                    // Its PSK comes with it: `sigil provision psk-node` makes both.
                    ListedKind::PskNode => {
                        return Err(ImportError::Line {
                            line: e.line,
                            msg: format!(
                                "line {}: a psk-node is made with `sigil provision psk-node`, not imported",
                                e.line
                            ),
                        })
                    }
                },
                label: e.label.to_string(),
            })
        })
        .collect()
}

/// What adding one identity did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    /// It is on the list now.
    New,
    /// It was on the list and active already.
    Present,
    /// It is revoked (since this Unix time) and stays so: re-activating needs `reinstate`.
    Revoked { at: i64 },
    /// It was revoked and is active again (`reinstate`).
    Reinstated,
}

/// Adds one identity. A revoked identity is never re-activated by being added again, as a
/// re-imported label file would (a stolen device would come back): only with `reinstate`.
pub fn add(store: &Store, e: &Entry, now: i64, reinstate: bool) -> Result<Added, StoreError> {
    if let Some(at) = store.revoked_at(&e.identity)? {
        if !reinstate {
            return Ok(Added::Revoked { at });
        }
        store.reinstate_identity(&e.identity, e.kind, &e.label, now)?;
        return Ok(Added::Reinstated);
    }
    Ok(if store.add_identity(&e.identity, e.kind, &e.label, now)? {
        Added::New
    } else {
        Added::Present
    })
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub added: usize,
    /// Already active.
    pub present: usize,
    /// Revoked identities the list names, left revoked (no `reinstate`).
    pub skipped_revoked: Vec<Identity>,
    /// Revoked identities re-activated (`reinstate`).
    pub reinstated: Vec<Identity>,
}

/// Imports a list into the store (see [`add`] for revoked identities).
pub fn import(
    store: &Store,
    text: &str,
    now: i64,
    reinstate: bool,
) -> Result<Imported, ImportError> {
    let entries = parse_list(text)?;
    let mut out = Imported::default();
    for e in &entries {
        match add(store, e, now, reinstate)? {
            Added::New => out.added += 1,
            Added::Present => out.present += 1,
            Added::Revoked { .. } => out.skipped_revoked.push(e.identity),
            Added::Reinstated => out.reinstated.push(e.identity),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_label_forms_kinds_and_comments() {
        let text = "# kit from box 7\n06AF-0505-3D7D-EAAC-9AEF-246D-4B18-8825 kitchen sensor\n\n314cc7bdf939c64edad617b8947d70e0 group kit 7 # scanned\n";
        let v = parse_list(text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[0].identity.to_string(),
            "06af05053d7deaac9aef246d4b188825"
        );
        assert_eq!(v[0].kind, IdentityKind::Device);
        assert_eq!(v[0].label, "kitchen sensor");
        assert_eq!(v[1].kind, IdentityKind::Group);
        assert_eq!(v[1].label, "kit 7");
    }

    #[test]
    fn refuses_short_labels_and_junk_with_line_numbers() {
        let e = parse_list("\n4B188825\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("short labels"), "{e}");
        let e = parse_list("hello\n").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn import_add_revoke_readd() {
        let store = Store::open_in_memory().unwrap();
        let list = "06af05053d7deaac9aef246d4b188825\n06af05053d7deaac9aef246d4b188825\n";
        let r = import(&store, list, 1, false).unwrap();
        assert_eq!((r.added, r.present), (1, 1));
        let id = Identity::parse("06af05053d7deaac9aef246d4b188825").unwrap();
        assert!(store.authorized().unwrap().contains_key(&id));
        store.set_psk(&id, &[7; 16], 1).unwrap();
        assert_eq!(store.psks().unwrap().get(&id), Some(&vec![7u8; 16]));
        assert!(store.revoke_identity(&id, 2).unwrap());
        assert!(
            store.psks().unwrap().is_empty(),
            "a revoked identity keeps no PSK"
        );
        assert!(!store.revoke_identity(&id, 3).unwrap());
        assert!(!store.authorized().unwrap().contains_key(&id));
        // Added or imported again, it stays revoked and is reported as such.
        assert!(!store
            .add_identity(&id, IdentityKind::Device, "", 4)
            .unwrap());
        let r = import(&store, list, 4, false).unwrap();
        assert_eq!(r.skipped_revoked, vec![id, id]);
        assert_eq!((r.added, r.present), (0, 0));
        assert!(!store.authorized().unwrap().contains_key(&id));
        assert_eq!(store.revoked_at(&id).unwrap(), Some(2));
        assert!(matches!(
            set_psk(&store, &id, &[7; 16], 4),
            Err(PskError::Revoked(_))
        ));
        // Only reinstating re-activates it, once.
        let r = import(&store, list, 5, true).unwrap();
        assert_eq!((r.reinstated, r.present), (vec![id], 1));
        assert!(store.authorized().unwrap().contains_key(&id));
        assert_eq!(store.revoked_at(&id).unwrap(), None);
        assert!(store.schema_version().unwrap() >= 6);
    }

    #[test]
    fn a_psk_node_gets_a_fresh_identity_and_its_key() {
        struct Counting(u8);
        impl sigil_crypto::Rng for Counting {
            fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
                // The same bytes twice, then different ones: the second draw repeats the
                // first node's identity and must be skipped.
                let v = if self.0 == 1 { 0 } else { self.0 };
                buf.fill(v);
                self.0 += 1;
                Ok(())
            }
        }
        let store = Store::open_in_memory().unwrap();
        let mut rng = Counting(0);
        let a = add_psk_node(&store, "a", &[1; 16], 1, &mut rng).unwrap();
        let b = add_psk_node(&store, "b", &[2; 32], 1, &mut rng).unwrap();
        assert_ne!(a, b);
        let psks = store.psks().unwrap();
        assert_eq!(psks.get(&a), Some(&vec![1u8; 16]));
        assert_eq!(psks.get(&b), Some(&vec![2u8; 32]));
        // Both are marked PSK-only; an identity given a PSK with `psk` is not.
        let other = Identity::from_bytes([0xee; 16]);
        store
            .add_identity(&other, IdentityKind::Device, "", 1)
            .unwrap();
        set_psk(&store, &other, &[4; 16], 1).unwrap();
        let nodes = store.psk_nodes().unwrap();
        assert!(nodes.contains_key(&a) && nodes.contains_key(&b) && !nodes.contains_key(&other));
        // A new PSK keeps the mark; revoking drops the node.
        set_psk(&store, &a, &[5; 16], 2).unwrap();
        assert_eq!(store.psk_nodes().unwrap().get(&a), Some(&vec![5u8; 16]));
        store.revoke_identity(&a, 3).unwrap();
        assert!(!store.psk_nodes().unwrap().contains_key(&a));
        assert!(add_psk_node(&store, "c", &[3; 8], 1, &mut rng).is_err());
        assert_eq!(store.list_identities().unwrap().len(), 3);
    }
}
