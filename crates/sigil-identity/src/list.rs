//! The identity list (RFC 8387 §4): the text an installer feeds to `sigil provision import`
//! and an application to `sigil app --trust`, as scanned from device labels or a kit's box.
//!
//! One identity per line in any label form (32 hex digits; `-`, `:`, `_` and spaces between
//! them are ignored), optionally followed by `device`, `group` or `psk-node` and a free-text
//! label. `#`
//! starts a comment. Refused, with the line number: the short last-digits form (not unique
//! enough to authorize anything), more than 32 digits, and anything but a space between the
//! identity and the rest. A label whose first word could be more digits needs `device` or
//! `group` before it. Parsing allocates nothing: [`entries`] yields borrowed lines.

use crate::{Identity, IDENTITY_LEN};
use core::fmt;

/// What a listed identity stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListedKind {
    /// One device's `I = h(P|O)` (or a kit member's `Idev`).
    Device,
    /// A kit's `Igrp` (§4.1): admits every member that proves membership.
    Group,
    /// A node with only a pre-shared key: its identity was assigned, not derived from a key,
    /// so only a list that says so lets an application take its MACed or session readings.
    PskNode,
}

/// One line of an identity list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListEntry<'a> {
    /// 1-based line number.
    pub line: usize,
    pub identity: Identity,
    pub kind: ListedKind,
    /// The rest of the line, trimmed (may be empty).
    pub label: &'a str,
}

/// Why a line is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListError<'a> {
    /// Fewer than 32 digits: a short label cannot authorize a device.
    ShortLabel { line: usize, digits: usize },
    /// More than 32 digits, or digits run on into the label.
    TooLong { line: usize, text: &'a str },
    /// The line does not start with an identity, or something other than a space follows it.
    Malformed { line: usize, text: &'a str },
}

impl ListError<'_> {
    /// 1-based number of the refused line.
    pub fn line(&self) -> usize {
        match self {
            Self::ShortLabel { line, .. }
            | Self::TooLong { line, .. }
            | Self::Malformed { line, .. } => *line,
        }
    }
}

impl fmt::Display for ListError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ShortLabel { line, digits } => write!(
                f,
                "line {line}: {digits} hex digits: short labels cannot authorize a device, scan the full 32-digit identity"
            ),
            Self::TooLong { line, text } => write!(
                f,
                "line {line}: '{text}' has more than 32 hex digits (write `device` or `group` before a label that starts with hex digits)"
            ),
            Self::Malformed { line, text } => {
                write!(f, "line {line}: '{text}' does not start with a 32-digit identity")
            }
        }
    }
}

impl core::error::Error for ListError<'_> {}

fn is_separator(c: u8) -> bool {
    matches!(c, b'-' | b':' | b'_' | b' ')
}

/// Parses one line (comment already removed, trimmed, not empty).
fn parse_line(line: usize, text: &str) -> Result<ListEntry<'_>, ListError<'_>> {
    let bytes = text.as_bytes();
    let mut digits = 0;
    let mut end = bytes.len();
    for (pos, &c) in bytes.iter().enumerate() {
        if c.is_ascii_hexdigit() {
            digits += 1;
            if digits == 2 * IDENTITY_LEN {
                end = pos + 1;
                break;
            }
        } else if !is_separator(c) {
            end = pos;
            break;
        }
    }
    if digits == 0 {
        return Err(ListError::Malformed { line, text });
    }
    if digits < 2 * IDENTITY_LEN {
        // Stopped at a foreign character or the end of the line.
        // A short label ends the line or is followed by a space; a foreign character glued to
        // the digits is not a label form at all.
        let glued = end < bytes.len() && end > 0 && !is_separator(bytes[end - 1]);
        return Err(if glued {
            ListError::Malformed { line, text }
        } else {
            ListError::ShortLabel { line, digits }
        });
    }
    let (id_text, rest) = text.split_at(end);
    match rest.bytes().next() {
        None => {}
        Some(c) if c.is_ascii_hexdigit() || matches!(c, b'-' | b':' | b'_') => {
            return Err(ListError::TooLong { line, text })
        }
        Some(c) if !c.is_ascii_whitespace() => return Err(ListError::Malformed { line, text }),
        Some(_) => {}
    }
    let rest = rest.trim();
    // The first word of the rest must not read as more of the identity.
    let first = rest.split_ascii_whitespace().next().unwrap_or("");
    if !first.is_empty()
        && first
            .bytes()
            .all(|c| c.is_ascii_hexdigit() || is_separator(c))
    {
        return Err(ListError::TooLong { line, text });
    }
    let identity = Identity::parse(id_text).map_err(|_| ListError::Malformed { line, text })?;
    let (kind, label) = match first {
        "group" => (ListedKind::Group, rest["group".len()..].trim_start()),
        "device" => (ListedKind::Device, rest["device".len()..].trim_start()),
        "psk-node" => (ListedKind::PskNode, rest["psk-node".len()..].trim_start()),
        _ => (ListedKind::Device, rest),
    };
    Ok(ListEntry {
        line,
        identity,
        kind,
        label,
    })
}

/// The entries of an identity list, in order, each line checked as it is reached. Blank and
/// comment-only lines are skipped. Collect the results before acting on any of them if a
/// refused line must stop the whole list (as `sigil provision import` does).
pub fn entries(text: &str) -> impl Iterator<Item = Result<ListEntry<'_>, ListError<'_>>> + '_ {
    text.lines().enumerate().filter_map(|(i, raw)| {
        let line = raw.split('#').next().unwrap_or("").trim();
        (!line.is_empty()).then(|| parse_line(i + 1, line))
    })
}
