//! The key announcement: how a device publishes the key behind its identity in CoRE Link
//! Format (RFC 6690 §2) when it registers (RFC 8387 §7 step 1), and how the Resource Directory
//! hands it on in a resource lookup (RFC 9176 §6).
//!
//! ```text
//! ;key="<base64url P>";alg=<COSE alg>[;grp="<alg>:<base64url> …"][;io="<base64url O>"]
//! ```
//!
//! - `key`: the public key, base64url without padding (RFC 4648 §5).
//! - `alg`: its COSE algorithm (RFC 9053 §2: -8 EdDSA, -7 ES256); Ed25519 when absent.
//! - `grp`: the other kit members' keys, space-separated `alg:base64url` words (RFC 8387 §4.1).
//! - `io`: the other information O of `I = h(P|O)` (§4).
//!
//! Parsing takes attribute name/value pairs (quotes removed, as `sigil_coap::link` yields
//! them), so this crate needs no CoAP code; emitting writes into any `core::fmt::Write`, or a
//! caller's buffer with [`KeyAnnouncement::emit_into`]. Neither allocates. The layout is in
//! `docs/wire-formats.md`.

use crate::b64;
use core::borrow::Borrow;
use core::fmt;
use sigil_crypto::{PublicKey, SignatureAlgorithm, MAX_PUBLIC_KEY_LEN};

/// Link attribute carrying the public key.
pub const ATTR_KEY: &str = "key";
/// Link attribute carrying the key's COSE algorithm.
pub const ATTR_ALG: &str = "alg";
/// Link attribute carrying the other kit members' keys.
pub const ATTR_GRP: &str = "grp";
/// Link attribute carrying the other information O.
pub const ATTR_IO: &str = "io";

/// Most bytes of other information O an announcement carries.
pub const MAX_OTHER_INFO: usize = 64;

/// Why the key attributes of a link cannot be taken as a key announcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnnounceError {
    /// No `key` attribute (but `alg`, `grp` or `io`).
    MissingKey,
    /// One of the four attributes appears twice in the link.
    Repeated(&'static str),
    /// One of the four attributes has no value (`;key`).
    NoValue(&'static str),
    /// `key` is not base64url, or not a valid key for `alg`.
    BadKey,
    /// `alg` is not a COSE signature algorithm Sigil knows.
    UnknownAlgorithm,
    /// `grp` is empty, has more than [`crate::MAX_GROUP_MEMBERS`] - 1 keys, or a word is not
    /// `alg:base64url` naming a valid key.
    BadGroup,
    /// `io` is not base64url or longer than [`MAX_OTHER_INFO`] bytes.
    BadOtherInfo,
    /// The caller's buffer is too small for the emitted attributes.
    BufferTooSmall,
}

impl fmt::Display for AnnounceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingKey => f.write_str("alg, grp or io without a key attribute"),
            Self::Repeated(a) => write!(f, "attribute {a} appears twice"),
            Self::NoValue(a) => write!(f, "attribute {a} has no value"),
            Self::BadKey => f.write_str("key is not a base64url public key for alg"),
            Self::UnknownAlgorithm => f.write_str("alg is not a known COSE signature algorithm"),
            Self::BadGroup => f.write_str("grp is not a list of alg:base64url keys"),
            Self::BadOtherInfo => f.write_str("io is not base64url of at most 64 bytes"),
            Self::BufferTooSmall => f.write_str("buffer too small for the key announcement"),
        }
    }
}

impl core::error::Error for AnnounceError {}

/// A parsed key announcement. The group keys stay in their validated text form and are
/// decoded one at a time by [`KeyAnnouncement::group`], so a parse needs no room for 63 keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyAnnouncement<'a> {
    key: PublicKey,
    group: Option<&'a str>,
    other: [u8; MAX_OTHER_INFO],
    other_len: usize,
}

fn decode_key(alg: SignatureAlgorithm, text: &str) -> Option<PublicKey> {
    let mut buf = [0u8; MAX_PUBLIC_KEY_LEN];
    PublicKey::from_bytes(alg, b64::decode(text, &mut buf)?).ok()
}

fn decode_group_word(word: &str) -> Option<PublicKey> {
    let (alg, key) = word.split_once(':')?;
    let alg = SignatureAlgorithm::from_cose(alg.parse().ok()?)?;
    decode_key(alg, key)
}

impl<'a> KeyAnnouncement<'a> {
    /// An announcement to emit: the key and its other information (the kit members' keys
    /// are passed to [`KeyAnnouncement::emit`]). `None` when `other` exceeds [`MAX_OTHER_INFO`].
    pub fn new(key: PublicKey, other: &[u8]) -> Option<Self> {
        let mut o = [0u8; MAX_OTHER_INFO];
        o.get_mut(..other.len())?.copy_from_slice(other);
        Some(Self {
            key,
            group: None,
            other: o,
            other_len: other.len(),
        })
    }

    /// Finds the announcement among a link's attributes (name, value with quotes removed).
    /// `Ok(None)` when the link carries none of `key`, `alg`, `grp`, `io`; other attributes
    /// are ignored. Every one of the four may appear at most once.
    pub fn parse<I>(attrs: I) -> Result<Option<Self>, AnnounceError>
    where
        I: IntoIterator<Item = (&'a str, Option<&'a str>)>,
    {
        let mut found: [Option<&'a str>; 4] = [None; 4];
        const NAMES: [&str; 4] = [ATTR_KEY, ATTR_ALG, ATTR_GRP, ATTR_IO];
        for (name, value) in attrs {
            let Some(i) = NAMES.iter().position(|n| *n == name) else {
                continue;
            };
            match (found[i], value) {
                (Some(_), _) => return Err(AnnounceError::Repeated(NAMES[i])),
                (None, None) => return Err(AnnounceError::NoValue(NAMES[i])),
                (None, Some(v)) => found[i] = Some(v),
            }
        }
        let [key, alg, grp, io] = found;
        let Some(key) = key else {
            return match (alg, grp, io) {
                (None, None, None) => Ok(None),
                _ => Err(AnnounceError::MissingKey),
            };
        };
        let alg = match alg {
            None => SignatureAlgorithm::Ed25519,
            Some(a) => a
                .parse::<i64>()
                .ok()
                .and_then(SignatureAlgorithm::from_cose)
                .ok_or(AnnounceError::UnknownAlgorithm)?,
        };
        let key = decode_key(alg, key).ok_or(AnnounceError::BadKey)?;
        if let Some(g) = grp {
            let mut n = 0;
            for word in g.split(' ').filter(|w| !w.is_empty()) {
                n += 1;
                if n >= crate::MAX_GROUP_MEMBERS || decode_group_word(word).is_none() {
                    return Err(AnnounceError::BadGroup);
                }
            }
            if n == 0 {
                return Err(AnnounceError::BadGroup);
            }
        }
        let mut other = [0u8; MAX_OTHER_INFO];
        let other_len = match io {
            None => 0,
            Some(t) => b64::decode(t, &mut other)
                .ok_or(AnnounceError::BadOtherInfo)?
                .len(),
        };
        Ok(Some(Self {
            key,
            group: grp,
            other,
            other_len,
        }))
    }

    /// The announced public key.
    pub fn key(&self) -> &PublicKey {
        &self.key
    }

    /// The other kit members' keys (§4.1), in the order announced; empty outside a kit.
    pub fn group(&self) -> GroupKeys<'a> {
        GroupKeys(self.group.unwrap_or("").split(' '))
    }

    /// True when the announcement names kit members (`grp`).
    pub fn in_group(&self) -> bool {
        self.group.is_some()
    }

    /// The other information O (empty when none).
    pub fn other_info(&self) -> &[u8] {
        &self.other[..self.other_len]
    }

    /// Writes the attributes, each preceded by `;`; `group` are the other kit members' keys
    /// (empty outside a kit), e.g. `announcement.group()` to pass a parsed one on.
    pub fn emit<W, G>(&self, w: &mut W, group: G) -> fmt::Result
    where
        W: fmt::Write + ?Sized,
        G: IntoIterator,
        G::Item: Borrow<PublicKey>,
    {
        write!(w, ";{ATTR_KEY}=\"")?;
        b64::encode(w, self.key.as_bytes())?;
        write!(w, "\";{ATTR_ALG}={}", self.key.algorithm().cose())?;
        let mut group = group.into_iter().peekable();
        if group.peek().is_some() {
            write!(w, ";{ATTR_GRP}=\"")?;
            for (i, k) in group.enumerate() {
                if i > 0 {
                    w.write_char(' ')?;
                }
                write_group_word(w, k.borrow())?;
            }
            w.write_char('"')?;
        }
        if self.other_len > 0 {
            write!(w, ";{ATTR_IO}=\"")?;
            b64::encode(w, self.other_info())?;
            w.write_char('"')?;
        }
        Ok(())
    }

    /// [`KeyAnnouncement::emit`] into `out`, returning the bytes written.
    pub fn emit_into<G>(&self, out: &mut [u8], group: G) -> Result<usize, AnnounceError>
    where
        G: IntoIterator,
        G::Item: Borrow<PublicKey>,
    {
        let mut w = SliceWriter { buf: out, len: 0 };
        self.emit(&mut w, group)
            .map_err(|_| AnnounceError::BufferTooSmall)?;
        Ok(w.len)
    }
}

/// Writes one `grp` word, `alg:base64url` (also the form the server stores kit keys in).
pub fn write_group_word<W: fmt::Write + ?Sized>(w: &mut W, key: &PublicKey) -> fmt::Result {
    write!(w, "{}:", key.algorithm().cose())?;
    b64::encode(w, key.as_bytes())
}

/// Parses a `grp` value (space-separated `alg:base64url` words) on its own, e.g. as stored.
/// `None` if any word is malformed; an empty text is an empty group.
pub fn parse_group(text: &str) -> Option<GroupKeys<'_>> {
    text.split(' ')
        .filter(|w| !w.is_empty())
        .all(|w| decode_group_word(w).is_some())
        .then(|| GroupKeys(text.split(' ')))
}

/// The keys of a validated `grp` value. See [`KeyAnnouncement::group`].
#[derive(Clone, Debug)]
pub struct GroupKeys<'a>(core::str::Split<'a, char>);

impl Iterator for GroupKeys<'_> {
    type Item = PublicKey;
    fn next(&mut self) -> Option<PublicKey> {
        loop {
            let w = self.0.next()?;
            if !w.is_empty() {
                // Validated at parse time; a word that does not decode is skipped, never
                // reached.
                if let Some(k) = decode_group_word(w) {
                    return Some(k);
                }
            }
        }
    }
}

struct SliceWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
