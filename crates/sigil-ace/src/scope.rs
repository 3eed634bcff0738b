//! The scope claim in the shape of AIF (RFC 9237 §2): an array of `[object, permissions]`
//! pairs, the form draft-ietf-ace-coap-pubsub-profile uses for topics.
//!
//! An object is a text path: a topic name (`temp-3f2a…`) or `rd`, the resource directory.
//! Permissions are a bitmask whose bits follow AIF's REST-method numbering (RFC 9237 §2.3), so
//! a generic AIF reader sees the methods each permission stands for:
//!
//! | bit | value | Sigil permission            | method                      |
//! |-----|-------|-----------------------------|-----------------------------|
//! | 0   | 1     | [`Permissions::READ`]       | GET (read, Observe = subscribe; on `rd`: lookup) |
//! | 2   | 4     | [`Permissions::PUBLISH`]    | PUT (publish to the topic)  |
//!
//! RD lookup is [`Permissions::READ`] on the object [`RD_OBJECT`]. Other bits are carried but
//! grant nothing here. Read never implies publish: each is its own bit.

use crate::error::{Malformed, TokenError};
use sigil_objects::cbor::{Decoder, Encoder};

/// Most `[object, permissions]` pairs a scope may hold.
pub const MAX_SCOPE_ENTRIES: usize = 16;
/// Longest object (topic name or path), in bytes.
pub const MAX_OBJECT_LEN: usize = 64;
/// The object naming the resource directory's lookup interface.
pub const RD_OBJECT: &str = "rd";

/// A permission bitmask (AIF REST-method bits, RFC 9237 §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Permissions(pub u32);

impl Permissions {
    /// Read a topic, subscribe to it (GET with Observe), or look up the RD (on `rd`).
    pub const READ: Self = Self(1);
    /// Publish to a topic (PUT).
    pub const PUBLISH: Self = Self(4);
    /// Read and publish.
    pub const READ_PUBLISH: Self = Self(1 | 4);

    /// Whether every bit of `wanted` is granted here (an empty `wanted` is never granted).
    pub const fn contains(self, wanted: Self) -> bool {
        wanted.0 != 0 && self.0 & wanted.0 == wanted.0
    }
}

/// One `[object, permissions]` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeEntry<'a> {
    pub object: &'a str,
    pub permissions: Permissions,
}

#[derive(Clone, Copy, Debug)]
enum Repr<'a> {
    /// Pairs given by the issuer, to encode.
    Entries(&'a [ScopeEntry<'a>]),
    /// The received CBOR, already checked by [`Scope::parse`].
    Encoded { bytes: &'a [u8], count: usize },
}

/// An AIF scope: either the pairs an issuer puts in a token or the checked bytes a resource
/// server received.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a>(Repr<'a>);

impl<'a> Scope<'a> {
    /// A scope from pairs; the bounds are checked when the token is encoded.
    pub const fn new(entries: &'a [ScopeEntry<'a>]) -> Self {
        Self(Repr::Entries(entries))
    }

    /// Reads one AIF scope item from `d`, checking every bound.
    pub(crate) fn parse(d: &mut Decoder<'a>) -> Result<Self, TokenError> {
        let raw = d.raw_item()?;
        let mut r = Decoder::new(raw);
        let count = r.array().map_err(|_| Malformed::Scope("not an array"))?;
        if count > MAX_SCOPE_ENTRIES {
            return Err(Malformed::Scope("too many entries").into());
        }
        for _ in 0..count {
            read_entry(&mut r)?;
        }
        r.finish()?;
        Ok(Self(Repr::Encoded { bytes: raw, count }))
    }

    pub(crate) fn encode(&self, e: &mut Encoder<'_>) -> Result<(), TokenError> {
        e.array(self.len())?;
        for entry in self.iter() {
            check_object(entry.object)?;
            e.array(2)?
                .text(entry.object)?
                .u64(u64::from(entry.permissions.0))?;
        }
        if self.len() > MAX_SCOPE_ENTRIES {
            return Err(Malformed::Scope("too many entries").into());
        }
        Ok(())
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        match self.0 {
            Repr::Entries(e) => e.len(),
            Repr::Encoded { count, .. } => count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pairs, in token order.
    pub fn iter(&self) -> ScopeIter<'a> {
        match self.0 {
            Repr::Entries(e) => ScopeIter::Entries(e.iter()),
            Repr::Encoded { bytes, count } => {
                let mut d = Decoder::new(bytes);
                // Checked by `parse`: the array head is there.
                let _ = d.array();
                ScopeIter::Encoded { d, left: count }
            }
        }
    }

    /// Whether this scope grants `wanted` on `object` (exact match of the object name).
    pub fn allows(&self, object: &str, wanted: Permissions) -> bool {
        self.iter()
            .any(|e| e.object == object && e.permissions.contains(wanted))
    }
}

/// Iterator over a scope's pairs.
pub enum ScopeIter<'a> {
    #[doc(hidden)]
    Entries(core::slice::Iter<'a, ScopeEntry<'a>>),
    #[doc(hidden)]
    Encoded { d: Decoder<'a>, left: usize },
}

impl<'a> Iterator for ScopeIter<'a> {
    type Item = ScopeEntry<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::Entries(it) => it.next().copied(),
            Self::Encoded { d, left } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                // The bytes passed `parse`, so this cannot fail; stop rather than panic if it did.
                read_entry(d).ok()
            }
        }
    }
}

fn check_object(object: &str) -> Result<(), TokenError> {
    if object.is_empty() {
        return Err(Malformed::Scope("empty object").into());
    }
    if object.len() > MAX_OBJECT_LEN {
        return Err(Malformed::Scope("object too long").into());
    }
    Ok(())
}

fn read_entry<'a>(d: &mut Decoder<'a>) -> Result<ScopeEntry<'a>, TokenError> {
    if d.array()
        .map_err(|_| Malformed::Scope("entry is not an array"))?
        != 2
    {
        return Err(Malformed::Scope("entry is not a pair").into());
    }
    let object = d
        .text()
        .map_err(|_| Malformed::Scope("object is not a text string"))?;
    check_object(object)?;
    let bits = d
        .u64()
        .map_err(|_| Malformed::Scope("permissions are not an unsigned integer"))?;
    let bits = u32::try_from(bits).map_err(|_| Malformed::Scope("permissions out of range"))?;
    Ok(ScopeEntry {
        object,
        permissions: Permissions(bits),
    })
}
