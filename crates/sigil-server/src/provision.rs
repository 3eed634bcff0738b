//! Provisioning: feeding the authorized identity list (RFC 8387 §4) from the command line or
//! from a text file as scanned from device labels or a kit's box.
//!
//! File format: one identity per line, in any label form (32 hex digits; `-`, `:`, `_` and
//! spaces ignored), optionally followed by `group` or `device` and a free-text label. `#`
//! starts a comment. The short last-digits form is refused: it is not unique enough to
//! authorize anything.

use crate::store::{IdentityKind, Store, StoreError};
use sigil_identity::Identity;

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("line {line}: {msg}")]
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

/// Parses an identity list. Every line is checked before anything is returned.
pub fn parse_list(text: &str) -> Result<Vec<Entry>, ImportError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let err = |msg: String| ImportError::Line { line: i + 1, msg };
        // The identity is the leading run of hex digits and separators.
        let mut split = line.len();
        let mut digits = 0;
        for (pos, c) in line.char_indices() {
            if c.is_ascii_hexdigit() {
                digits += 1;
                if digits == 32 {
                    split = pos + 1;
                    break;
                }
            } else if !matches!(c, '-' | ':' | '_' | ' ') {
                split = pos;
                break;
            }
        }
        let (id_text, rest) = line.split_at(split);
        let identity = Identity::parse(id_text).map_err(|_| {
            let n = id_text.chars().filter(|c| c.is_ascii_hexdigit()).count();
            if n > 0 && n < 32 {
                err(format!("'{}' has {n} hex digits: short labels cannot authorize a device, scan the full 32-digit identity", id_text.trim()))
            } else {
                err(format!("'{line}' does not start with a 32-digit identity"))
            }
        })?;
        let mut words = rest.split_whitespace().peekable();
        let kind = match words.peek().copied() {
            Some("group") => {
                words.next();
                IdentityKind::Group
            }
            Some("device") => {
                words.next();
                IdentityKind::Device
            }
            _ => IdentityKind::Device,
        };
        let label = words.collect::<Vec<_>>().join(" ");
        out.push(Entry {
            identity,
            kind,
            label,
        });
    }
    Ok(out)
}

/// Imports a list into the store; returns (added, already present).
pub fn import(store: &Store, text: &str, now: i64) -> Result<(usize, usize), ImportError> {
    let entries = parse_list(text)?;
    let mut added = 0;
    for e in &entries {
        if store.add_identity(&e.identity, e.kind, &e.label, now)? {
            added += 1;
        }
    }
    Ok((added, entries.len() - added))
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
        let (a, d) = import(
            &store,
            "06af05053d7deaac9aef246d4b188825\n06af05053d7deaac9aef246d4b188825\n",
            1,
        )
        .unwrap();
        assert_eq!((a, d), (1, 1));
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
        assert!(store
            .add_identity(&id, IdentityKind::Device, "", 4)
            .unwrap());
        assert!(store.authorized().unwrap().contains_key(&id));
        assert_eq!(store.schema_version().unwrap(), 2);
    }
}
