//! CoRE Link Format (RFC 6690 §2): `<target>;attr=value;attr="quoted value",<target>...`
//!
//! [`parse`] yields links without allocating; [`Link::attrs`] yields attributes with quotes
//! removed. [`write_link`] serializes one link into any `core::fmt::Write`.
//!
//! Sigil's registration attributes (docs/wire-formats.md): `key` (base64url public key, RFC
//! 8387 §7 step 1), `alg` (COSE algorithm of the key), `grp` (space-separated base64url keys of
//! the other kit members, §4.1), `io` (base64url other information of I = h(P|O)).

use core::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// A link does not start with `<`.
    ExpectedTarget { at: usize },
    /// No closing `>` for a target.
    UnterminatedTarget { at: usize },
    /// An attribute name is empty or has characters outside RFC 5988 `parmname`.
    BadAttributeName { at: usize },
    /// A quoted string is not closed.
    UnterminatedQuote { at: usize },
    /// Unexpected character after a link or attribute.
    Unexpected { at: usize },
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ExpectedTarget { at } => write!(f, "expected '<' at byte {at}"),
            Self::UnterminatedTarget { at } => write!(f, "unterminated target at byte {at}"),
            Self::BadAttributeName { at } => write!(f, "bad attribute name at byte {at}"),
            Self::UnterminatedQuote { at } => write!(f, "unterminated quoted value at byte {at}"),
            Self::Unexpected { at } => write!(f, "unexpected character at byte {at}"),
        }
    }
}

/// One link: its target URI reference and its raw attribute text (validated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link<'a> {
    pub target: &'a str,
    attrs: &'a str,
}

/// One attribute; `value` is `None` for a bare name (`;obs`), quotes removed otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr<'a> {
    pub name: &'a str,
    pub value: Option<&'a str>,
}

fn is_parmname(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$&+-.^_`|~*".contains(&c)
}

/// One scanned attribute: the name's start and end, the value's start and end if it has one,
/// and the index just past it.
type ScannedAttr = (usize, usize, Option<(usize, usize)>, usize);

/// Scans one attribute starting after `;` at `s[i..]`. Returns the attribute and the index
/// just past it.
fn scan_attr(s: &[u8], mut i: usize, base: usize) -> Result<ScannedAttr, LinkError> {
    let name_start = i;
    while i < s.len() && is_parmname(s[i]) {
        i += 1;
    }
    if i == name_start {
        return Err(LinkError::BadAttributeName { at: base + i });
    }
    let name_end = i;
    if i < s.len() && s[i] == b'=' {
        i += 1;
        if i < s.len() && s[i] == b'"' {
            i += 1;
            let v_start = i;
            while i < s.len() && s[i] != b'"' {
                if s[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            if i >= s.len() {
                return Err(LinkError::UnterminatedQuote { at: base + v_start });
            }
            let v_end = i;
            i += 1;
            Ok((name_start, name_end, Some((v_start, v_end)), i))
        } else {
            let v_start = i;
            while i < s.len() && !matches!(s[i], b';' | b',') && s[i] > b' ' && s[i] != b'"' {
                i += 1;
            }
            Ok((name_start, name_end, Some((v_start, i)), i))
        }
    } else {
        Ok((name_start, name_end, None, i))
    }
}

/// Parses a whole link-format document, validating every link before returning the iterator.
pub fn parse(text: &str) -> Result<Links<'_>, LinkError> {
    let mut it = Links { text, pos: 0 };
    for l in it.clone() {
        l?;
    }
    it.pos = 0;
    Ok(it)
}

/// Iterator over the links of a document.
#[derive(Clone, Debug)]
pub struct Links<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Links<'a> {
    fn next_link(&mut self) -> Result<Option<Link<'a>>, LinkError> {
        let s = self.text.as_bytes();
        let mut i = self.pos;
        while i < s.len() && matches!(s[i], b' ' | b'\n' | b'\r' | b'\t') {
            i += 1;
        }
        if i >= s.len() {
            self.pos = i;
            return Ok(None);
        }
        if s[i] != b'<' {
            return Err(LinkError::ExpectedTarget { at: i });
        }
        let t_start = i + 1;
        let t_end = t_start
            + s[t_start..]
                .iter()
                .position(|c| *c == b'>')
                .ok_or(LinkError::UnterminatedTarget { at: i })?;
        i = t_end + 1;
        let a_start = i;
        while i < s.len() && s[i] == b';' {
            let (_, _, _, next) = scan_attr(s, i + 1, 0)?;
            i = next;
        }
        let a_end = i;
        while i < s.len() && matches!(s[i], b' ' | b'\n' | b'\r' | b'\t') {
            i += 1;
        }
        if i < s.len() {
            if s[i] != b',' {
                return Err(LinkError::Unexpected { at: i });
            }
            i += 1;
        }
        self.pos = i;
        // Byte indices fall on ASCII delimiters, so the slices are valid UTF-8 boundaries.
        Ok(Some(Link {
            target: self.text.get(t_start..t_end).unwrap_or(""),
            attrs: self.text.get(a_start..a_end).unwrap_or(""),
        }))
    }
}

impl<'a> Iterator for Links<'a> {
    type Item = Result<Link<'a>, LinkError>;
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_link() {
            Ok(Some(l)) => Some(Ok(l)),
            Ok(None) => None,
            Err(e) => {
                self.pos = self.text.len();
                Some(Err(e))
            }
        }
    }
}

impl<'a> Link<'a> {
    /// Attributes in order. The text was validated at parse time.
    pub fn attrs(&self) -> impl Iterator<Item = Attr<'a>> + 'a {
        let text = self.attrs;
        let s = text.as_bytes();
        let mut i = 0usize;
        core::iter::from_fn(move || {
            if i >= s.len() || s[i] != b';' {
                return None;
            }
            let (ns, ne, v, next) = scan_attr(s, i + 1, 0).ok()?;
            i = next;
            Some(Attr {
                name: text.get(ns..ne)?,
                value: match v {
                    Some((a, b)) => Some(text.get(a..b)?),
                    None => None,
                },
            })
        })
    }

    /// The first value of attribute `name`.
    pub fn attr(&self, name: &str) -> Option<&'a str> {
        self.attrs().find(|a| a.name == name).and_then(|a| a.value)
    }

    /// True if the link has attribute `name` with `value` among its space-separated values
    /// (how RFC 6690 §3 matches `rt`, `if` and friends).
    pub fn has_value(&self, name: &str, value: &str) -> bool {
        self.attrs()
            .filter(|a| a.name == name)
            .filter_map(|a| a.value)
            .any(|v| v == value || v.split(' ').any(|p| p == value))
    }
}

/// Writes `<target>` followed by `;name=value` for each attribute. Values that are not a
/// plain token are quoted; a `"` or `\` inside a value is escaped.
pub fn write_link<W: fmt::Write>(
    out: &mut W,
    target: &str,
    attrs: &[(&str, Option<&str>)],
) -> fmt::Result {
    write!(out, "<{target}>")?;
    for (name, value) in attrs {
        match value {
            None => write!(out, ";{name}")?,
            Some(v)
                if !v.is_empty()
                    && v.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || b"-._~!$&+*".contains(&c))
                    && v.parse::<i64>().is_ok() =>
            {
                write!(out, ";{name}={v}")?
            }
            Some(v) => {
                write!(out, ";{name}=\"")?;
                for c in v.chars() {
                    if c == '"' || c == '\\' {
                        out.write_char('\\')?;
                    }
                    out.write_char(c)?;
                }
                out.write_char('"')?;
            }
        }
    }
    Ok(())
}

impl core::error::Error for LinkError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6690_example() {
        // RFC 6690 §5, example 1.
        let doc = "</sensors/temp>;if=\"sensor\",</sensors/light>;if=\"sensor\"";
        let links: Vec<_> = parse(doc).unwrap().map(|l| l.unwrap()).collect();
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].target, "/sensors/temp");
        assert_eq!(links[1].attr("if"), Some("sensor"));
    }

    #[test]
    fn attributes_quoted_bare_and_tokens() {
        let doc = "</t>;rt=\"temperature c\";ct=18;obs;key=\"AbC-_\"";
        let l = parse(doc).unwrap().next().unwrap().unwrap();
        assert_eq!(l.attr("ct"), Some("18"));
        assert!(l.has_value("rt", "c"));
        assert_eq!(l.attrs().find(|a| a.name == "obs").unwrap().value, None);
        assert_eq!(l.attr("key"), Some("AbC-_"));
    }

    #[test]
    fn malformed_documents() {
        assert_eq!(parse("x").unwrap_err(), LinkError::ExpectedTarget { at: 0 });
        assert_eq!(
            parse("</a").unwrap_err(),
            LinkError::UnterminatedTarget { at: 0 }
        );
        assert!(matches!(
            parse("</a>;=1").unwrap_err(),
            LinkError::BadAttributeName { .. }
        ));
        assert!(matches!(
            parse("</a>;a=\"x").unwrap_err(),
            LinkError::UnterminatedQuote { .. }
        ));
        assert!(matches!(
            parse("</a> x").unwrap_err(),
            LinkError::Unexpected { .. }
        ));
        assert!(matches!(
            parse("</a>;a=\"\\").unwrap_err(),
            LinkError::UnterminatedQuote { .. }
        ));
        assert_eq!(parse("").unwrap().count(), 0);
    }

    #[test]
    fn write_then_parse() {
        let mut s = String::new();
        write_link(
            &mut s,
            "/t",
            &[
                ("rt", Some("temperature")),
                ("ct", Some("18")),
                ("obs", None),
                ("k", Some("a\"b")),
            ],
        )
        .unwrap();
        assert_eq!(s, "</t>;rt=\"temperature\";ct=18;obs;k=\"a\\\"b\"");
        let l = parse(&s).unwrap().next().unwrap().unwrap();
        assert_eq!(l.attr("rt"), Some("temperature"));
        assert_eq!(l.attr("k"), Some("a\\\"b"));
    }

    extern crate std;
    use std::string::String;
    use std::vec::Vec;
}
