//! Minimal JSON support without a heap: a writer into a byte slice, string escaping, and a
//! strict parser for the flat objects used as JWS protected headers.

use core::fmt;

/// `core::fmt::Write` into a caller-owned byte slice.
pub struct SliceWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl<'b> SliceWriter<'b> {
    pub fn new(buf: &'b mut [u8]) -> Self {
        Self { buf, len: 0 }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let out = self
            .buf
            .get_mut(self.len..self.len + s.len())
            .ok_or(fmt::Error)?;
        out.copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

pub fn write_string<W: fmt::Write>(w: &mut W, s: &str) -> fmt::Result {
    w.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => w.write_str("\\\"")?,
            '\\' => w.write_str("\\\\")?,
            c if (c as u32) < 0x20 => write!(w, "\\u{:04x}", c as u32)?,
            c => w.write_char(c)?,
        }
    }
    w.write_char('"')
}

/// Writes a finite number in the shortest form that reads back to the same f64.
pub fn write_number<W: fmt::Write>(w: &mut W, v: f64) -> fmt::Result {
    if !v.is_finite() {
        return Err(fmt::Error);
    }
    if let Some(i) = crate::cbor::exact_int(v) {
        write!(w, "{i}")
    } else {
        write!(w, "{v:?}")
    }
}

pub fn write_base64url<W: fmt::Write>(w: &mut W, data: &[u8]) -> fmt::Result {
    use base64::Engine;
    let mut chunk = [0u8; 64];
    for part in data.chunks(48) {
        let n = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode_slice(part, &mut chunk)
            .map_err(|_| fmt::Error)?;
        // 48-byte chunks encode to exactly 64 characters with no padding, so chunk boundaries
        // never change the output.
        w.write_str(core::str::from_utf8(&chunk[..n]).map_err(|_| fmt::Error)?)?;
    }
    Ok(())
}

/// A value in a flat JSON object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlatValue<'a> {
    /// A string without escape sequences (raw text between the quotes).
    Str(&'a str),
    /// A non-negative integer.
    UInt(u64),
    /// Any other value (escaped string, negative or fractional number, bool, null, nested).
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatJsonError;

/// Calls `f(key, value)` for each member of a flat JSON object. Nested objects or arrays are
/// rejected; keys with escapes are rejected. Duplicate keys are the caller's to detect.
pub fn parse_flat_object<'a>(
    text: &'a str,
    mut f: impl FnMut(&'a str, FlatValue<'a>) -> Result<(), FlatJsonError>,
) -> Result<(), FlatJsonError> {
    let s = text.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| {
        while *i < s.len() && matches!(s[*i], b' ' | b'\t' | b'\n' | b'\r') {
            *i += 1;
        }
    };
    let string = |i: &mut usize| -> Result<(&'a str, bool), FlatJsonError> {
        if s.get(*i) != Some(&b'"') {
            return Err(FlatJsonError);
        }
        *i += 1;
        let start = *i;
        let mut escaped = false;
        while *i < s.len() && s[*i] != b'"' {
            if s[*i] == b'\\' {
                escaped = true;
                *i += 1;
            } else if s[*i] < 0x20 {
                return Err(FlatJsonError);
            }
            *i += 1;
        }
        if *i >= s.len() {
            return Err(FlatJsonError);
        }
        let out = text.get(start..*i).ok_or(FlatJsonError)?;
        *i += 1;
        Ok((out, escaped))
    };
    ws(&mut i);
    if s.get(i) != Some(&b'{') {
        return Err(FlatJsonError);
    }
    i += 1;
    ws(&mut i);
    if s.get(i) == Some(&b'}') {
        i += 1;
        ws(&mut i);
        return if i == s.len() {
            Ok(())
        } else {
            Err(FlatJsonError)
        };
    }
    loop {
        ws(&mut i);
        let (key, esc) = string(&mut i)?;
        if esc {
            return Err(FlatJsonError);
        }
        ws(&mut i);
        if s.get(i) != Some(&b':') {
            return Err(FlatJsonError);
        }
        i += 1;
        ws(&mut i);
        let value = match s.get(i) {
            Some(b'"') => {
                let (v, esc) = string(&mut i)?;
                if esc {
                    FlatValue::Other
                } else {
                    FlatValue::Str(v)
                }
            }
            Some(c) if c.is_ascii_digit() || *c == b'-' => {
                let start = i;
                while i < s.len() && matches!(s[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let t = text.get(start..i).ok_or(FlatJsonError)?;
                if t.len() > 1 && t.starts_with('0') {
                    return Err(FlatJsonError);
                }
                match t.parse::<u64>() {
                    Ok(v) => FlatValue::UInt(v),
                    Err(_) if t.parse::<f64>().is_ok() => FlatValue::Other,
                    Err(_) => return Err(FlatJsonError),
                }
            }
            Some(b't') if s[i..].starts_with(b"true") => {
                i += 4;
                FlatValue::Other
            }
            Some(b'f') if s[i..].starts_with(b"false") => {
                i += 5;
                FlatValue::Other
            }
            Some(b'n') if s[i..].starts_with(b"null") => {
                i += 4;
                FlatValue::Other
            }
            _ => return Err(FlatJsonError),
        };
        f(key, value)?;
        ws(&mut i);
        match s.get(i) {
            Some(b',') => i += 1,
            Some(b'}') => {
                i += 1;
                ws(&mut i);
                return if i == s.len() {
                    Ok(())
                } else {
                    Err(FlatJsonError)
                };
            }
            _ => return Err(FlatJsonError),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_objects() {
        let mut seen = 0;
        parse_flat_object(
            r#" {"alg":"EdDSA", "seq": 42, "x": true, "y":"a\"b"} "#,
            |k, v| {
                match k {
                    "alg" => assert_eq!(v, FlatValue::Str("EdDSA")),
                    "seq" => assert_eq!(v, FlatValue::UInt(42)),
                    _ => assert_eq!(v, FlatValue::Other),
                }
                seen += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, 4);
        for bad in [
            "",
            "{",
            "{\"a\"}",
            "{\"a\":{}}",
            "{\"a\":[1]}",
            "{\"a\":1,}",
            "{} x",
            "{\"a\":01}",
            "{\"a\":\"x",
        ] {
            assert!(parse_flat_object(bad, |_, _| Ok(())).is_err(), "{bad}");
        }
    }
}
