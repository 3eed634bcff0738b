//! A small CBOR (RFC 8949) encoder and decoder: definite lengths only, bounded nesting, no
//! allocation. Enough for SenML-CBOR and COSE headers; anything else is an error, never a panic.

use core::fmt;

/// Deepest nesting the decoder follows before refusing (protects the stack in `skip`).
pub const MAX_DEPTH: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CborError {
    /// The input ends inside an item.
    Eof,
    /// An item of another major type was expected.
    UnexpectedType { expected: &'static str },
    /// Indefinite-length items and reserved additional-information values are not accepted.
    Unsupported,
    /// An integer does not fit the target type.
    Overflow,
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep,
    /// A text string is not UTF-8.
    InvalidUtf8,
    /// Bytes remain after the top-level item.
    TrailingBytes,
    /// The output buffer is full.
    BufferTooSmall,
    /// A map has the same key twice.
    DuplicateKey,
}

impl fmt::Display for CborError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Eof => f.write_str("CBOR input ends inside an item"),
            Self::UnexpectedType { expected } => write!(f, "expected CBOR {expected}"),
            Self::Unsupported => f.write_str("indefinite length or reserved CBOR encoding"),
            Self::Overflow => f.write_str("CBOR integer out of range"),
            Self::TooDeep => f.write_str("CBOR nesting too deep"),
            Self::InvalidUtf8 => f.write_str("CBOR text string is not UTF-8"),
            Self::TrailingBytes => f.write_str("bytes after the CBOR item"),
            Self::BufferTooSmall => f.write_str("CBOR output buffer too small"),
            Self::DuplicateKey => f.write_str("duplicate key in CBOR map"),
        }
    }
}

/// Writes CBOR into a caller-owned buffer, in the preferred (shortest) serialization.
pub struct Encoder<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl<'b> Encoder<'b> {
    pub fn new(buf: &'b mut [u8]) -> Self {
        Self { buf, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn finish(self) -> usize {
        self.len
    }

    pub fn raw(&mut self, bytes: &[u8]) -> Result<&mut Self, CborError> {
        let out = self
            .buf
            .get_mut(self.len..self.len + bytes.len())
            .ok_or(CborError::BufferTooSmall)?;
        out.copy_from_slice(bytes);
        self.len += bytes.len();
        Ok(self)
    }

    fn head(&mut self, major: u8, value: u64) -> Result<&mut Self, CborError> {
        let m = major << 5;
        match value {
            0..=23 => self.raw(&[m | value as u8]),
            24..=0xff => self.raw(&[m | 24, value as u8]),
            0x100..=0xffff => {
                self.raw(&[m | 25])?;
                self.raw(&(value as u16).to_be_bytes())
            }
            0x1_0000..=0xffff_ffff => {
                self.raw(&[m | 26])?;
                self.raw(&(value as u32).to_be_bytes())
            }
            _ => {
                self.raw(&[m | 27])?;
                self.raw(&value.to_be_bytes())
            }
        }
    }

    pub fn u64(&mut self, v: u64) -> Result<&mut Self, CborError> {
        self.head(0, v)
    }

    pub fn i64(&mut self, v: i64) -> Result<&mut Self, CborError> {
        if v >= 0 {
            self.head(0, v as u64)
        } else {
            self.head(1, (-1 - v) as u64)
        }
    }

    pub fn bytes(&mut self, v: &[u8]) -> Result<&mut Self, CborError> {
        self.head(2, v.len() as u64)?;
        self.raw(v)
    }

    /// Writes a byte-string header for `len` bytes that the caller appends next.
    pub fn bytes_header(&mut self, len: usize) -> Result<&mut Self, CborError> {
        self.head(2, len as u64)
    }

    pub fn text(&mut self, v: &str) -> Result<&mut Self, CborError> {
        self.head(3, v.len() as u64)?;
        self.raw(v.as_bytes())
    }

    pub fn array(&mut self, len: usize) -> Result<&mut Self, CborError> {
        self.head(4, len as u64)
    }

    pub fn map(&mut self, len: usize) -> Result<&mut Self, CborError> {
        self.head(5, len as u64)
    }

    pub fn tag(&mut self, tag: u64) -> Result<&mut Self, CborError> {
        self.head(6, tag)
    }

    pub fn bool(&mut self, v: bool) -> Result<&mut Self, CborError> {
        self.raw(&[if v { 0xf5 } else { 0xf4 }])
    }

    /// A number in the shortest form that keeps its value: an integer if it is integral and
    /// fits, else half, single or double precision (RFC 8949 §4.2.2 preferred serialization;
    /// RFC 8428 §6 allows integers for SenML values).
    pub fn number(&mut self, v: f64) -> Result<&mut Self, CborError> {
        if let Some(i) = exact_int(v) {
            return self.i64(i);
        }
        self.float(v)
    }

    /// A float in the shortest IEEE 754 width that represents it exactly.
    pub fn float(&mut self, v: f64) -> Result<&mut Self, CborError> {
        let h = half::f16::from_f64(v);
        if h.to_f64() == v || (v.is_nan() && h.is_nan()) {
            self.raw(&[0xf9])?;
            return self.raw(&h.to_bits().to_be_bytes());
        }
        let s = v as f32;
        if f64::from(s) == v {
            self.raw(&[0xfa])?;
            return self.raw(&s.to_bits().to_be_bytes());
        }
        self.raw(&[0xfb])?;
        self.raw(&v.to_bits().to_be_bytes())
    }
}

/// `v` as an integer if it is integral, within ±2^53 and not negative zero.
pub fn exact_int(v: f64) -> Option<i64> {
    const LIMIT: f64 = 9_007_199_254_740_992.0;
    if v > -LIMIT && v < LIMIT && (v as i64) as f64 == v && !(v == 0.0 && v.is_sign_negative()) {
        Some(v as i64)
    } else {
        None
    }
}

/// A decoded item head.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Item<'a> {
    Unsigned(u64),
    /// A negative integer, as the CBOR argument `n` meaning `-1 - n`.
    Negative(u64),
    Bytes(&'a [u8]),
    Text(&'a str),
    Array(usize),
    Map(usize),
    Tag(u64),
    Bool(bool),
    Null,
    Undefined,
    Float(f64),
    Simple(u8),
}

/// Reads CBOR items one by one from a borrowed slice.
#[derive(Clone, Debug)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn is_at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// Fails with [`CborError::TrailingBytes`] unless all input was consumed.
    pub fn finish(&self) -> Result<(), CborError> {
        if self.is_at_end() {
            Ok(())
        } else {
            Err(CborError::TrailingBytes)
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CborError> {
        let end = self.pos.checked_add(n).ok_or(CborError::Eof)?;
        let s = self.buf.get(self.pos..end).ok_or(CborError::Eof)?;
        self.pos = end;
        Ok(s)
    }

    fn argument(&mut self, info: u8) -> Result<u64, CborError> {
        Ok(match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.take(1)?[0]),
            25 => {
                let b = self.take(2)?;
                u64::from(u16::from_be_bytes([b[0], b[1]]))
            }
            26 => {
                let b = self.take(4)?;
                u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            }
            27 => {
                let b = self.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_be_bytes(a)
            }
            _ => return Err(CborError::Unsupported),
        })
    }

    /// Reads the next item head (for strings, the whole string).
    pub fn item(&mut self) -> Result<Item<'a>, CborError> {
        let first = self.take(1)?[0];
        let major = first >> 5;
        let info = first & 0x1f;
        if major == 7 {
            return Ok(match info {
                20 => Item::Bool(false),
                21 => Item::Bool(true),
                22 => Item::Null,
                23 => Item::Undefined,
                0..=19 => Item::Simple(info),
                24 => {
                    let v = self.take(1)?[0];
                    if v < 32 {
                        return Err(CborError::Unsupported);
                    }
                    Item::Simple(v)
                }
                25 => {
                    let b = self.take(2)?;
                    Item::Float(half::f16::from_bits(u16::from_be_bytes([b[0], b[1]])).to_f64())
                }
                26 => {
                    let b = self.take(4)?;
                    Item::Float(f64::from(f32::from_bits(u32::from_be_bytes([
                        b[0], b[1], b[2], b[3],
                    ]))))
                }
                27 => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    Item::Float(f64::from_bits(u64::from_be_bytes(a)))
                }
                _ => return Err(CborError::Unsupported),
            });
        }
        let arg = self.argument(info)?;
        Ok(match major {
            0 => Item::Unsigned(arg),
            1 => Item::Negative(arg),
            2 => Item::Bytes(self.take(usize::try_from(arg).map_err(|_| CborError::Eof)?)?),
            3 => {
                let b = self.take(usize::try_from(arg).map_err(|_| CborError::Eof)?)?;
                Item::Text(core::str::from_utf8(b).map_err(|_| CborError::InvalidUtf8)?)
            }
            4 => Item::Array(self.count(arg)?),
            5 => Item::Map(self.count(arg)?),
            _ => Item::Tag(arg),
        })
    }

    /// A container count, bounded by the bytes left (each element takes at least one byte), so
    /// a hostile length cannot make a caller loop for long.
    fn count(&self, arg: u64) -> Result<usize, CborError> {
        let left = (self.buf.len() - self.pos) as u64;
        if arg > left {
            return Err(CborError::Eof);
        }
        Ok(arg as usize)
    }

    pub fn peek(&self) -> Result<Item<'a>, CborError> {
        self.clone().item()
    }

    pub fn u64(&mut self) -> Result<u64, CborError> {
        match self.item()? {
            Item::Unsigned(v) => Ok(v),
            _ => Err(CborError::UnexpectedType {
                expected: "unsigned integer",
            }),
        }
    }

    pub fn i64(&mut self) -> Result<i64, CborError> {
        match self.item()? {
            Item::Unsigned(v) => i64::try_from(v).map_err(|_| CborError::Overflow),
            Item::Negative(v) => {
                let v = i64::try_from(v).map_err(|_| CborError::Overflow)?;
                Ok(-1 - v)
            }
            _ => Err(CborError::UnexpectedType {
                expected: "integer",
            }),
        }
    }

    pub fn bytes(&mut self) -> Result<&'a [u8], CborError> {
        match self.item()? {
            Item::Bytes(b) => Ok(b),
            _ => Err(CborError::UnexpectedType {
                expected: "byte string",
            }),
        }
    }

    pub fn text(&mut self) -> Result<&'a str, CborError> {
        match self.item()? {
            Item::Text(t) => Ok(t),
            _ => Err(CborError::UnexpectedType {
                expected: "text string",
            }),
        }
    }

    pub fn array(&mut self) -> Result<usize, CborError> {
        match self.item()? {
            Item::Array(n) => Ok(n),
            _ => Err(CborError::UnexpectedType { expected: "array" }),
        }
    }

    pub fn map(&mut self) -> Result<usize, CborError> {
        match self.item()? {
            Item::Map(n) => Ok(n),
            _ => Err(CborError::UnexpectedType { expected: "map" }),
        }
    }

    /// Any number (integer or float) as f64.
    pub fn number(&mut self) -> Result<f64, CborError> {
        match self.item()? {
            Item::Unsigned(v) => Ok(v as f64),
            Item::Negative(v) => Ok(-1.0 - v as f64),
            Item::Float(f) => Ok(f),
            _ => Err(CborError::UnexpectedType { expected: "number" }),
        }
    }

    pub fn bool(&mut self) -> Result<bool, CborError> {
        match self.item()? {
            Item::Bool(b) => Ok(b),
            _ => Err(CborError::UnexpectedType { expected: "bool" }),
        }
    }

    /// Skips one whole item, including nested containers, up to [`MAX_DEPTH`] deep.
    pub fn skip(&mut self) -> Result<(), CborError> {
        self.skip_at(0)
    }

    fn skip_at(&mut self, depth: usize) -> Result<(), CborError> {
        if depth > MAX_DEPTH {
            return Err(CborError::TooDeep);
        }
        match self.item()? {
            Item::Array(n) => {
                for _ in 0..n {
                    self.skip_at(depth + 1)?;
                }
            }
            Item::Map(n) => {
                for _ in 0..n {
                    self.skip_at(depth + 1)?;
                    self.skip_at(depth + 1)?;
                }
            }
            Item::Tag(_) => self.skip_at(depth + 1)?,
            _ => {}
        }
        Ok(())
    }

    /// The raw encoded bytes of the next item (for keeping received structures exact).
    pub fn raw_item(&mut self) -> Result<&'a [u8], CborError> {
        let start = self.pos;
        self.skip()?;
        Ok(&self.buf[start..self.pos])
    }
}

impl core::error::Error for CborError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: impl FnOnce(&mut Encoder) -> Result<(), CborError>) -> ([u8; 32], usize) {
        let mut buf = [0u8; 32];
        let mut e = Encoder::new(&mut buf);
        f(&mut e).unwrap();
        let n = e.finish();
        (buf, n)
    }

    #[test]
    fn rfc8949_appendix_a_examples() {
        // (value, expected encoding) from RFC 8949 Appendix A.
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (23, &[0x17]),
            (24, &[0x18, 0x18]),
            (1000, &[0x19, 0x03, 0xe8]),
            (1_000_000, &[0x1a, 0x00, 0x0f, 0x42, 0x40]),
            (-1, &[0x20]),
            (-1000, &[0x39, 0x03, 0xe7]),
        ];
        for (v, want) in cases {
            let (b, n) = enc(|e| e.i64(*v).map(|_| ()));
            assert_eq!(&b[..n], *want, "{v}");
            assert_eq!(Decoder::new(want).i64().unwrap(), *v);
        }
        let floats: &[(f64, &[u8])] = &[
            (1.5, &[0xf9, 0x3e, 0x00]),
            (65504.0, &[0xf9, 0x7b, 0xff]),
            (100000.5, &[0xfa, 0x47, 0xc3, 0x50, 0x40]),
            (1.1, &[0xfb, 0x3f, 0xf1, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a]),
            (
                -4.1,
                &[0xfb, 0xc0, 0x10, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66],
            ),
        ];
        for (v, want) in floats {
            let (b, n) = enc(|e| e.float(*v).map(|_| ()));
            assert_eq!(&b[..n], *want, "{v}");
            assert_eq!(Decoder::new(want).number().unwrap(), *v);
        }
    }

    #[test]
    fn hostile_lengths_and_depth() {
        assert_eq!(
            Decoder::new(&[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).bytes(),
            Err(CborError::Eof)
        );
        assert_eq!(
            Decoder::new(&[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).array(),
            Err(CborError::Eof)
        );
        assert_eq!(Decoder::new(&[0x5f]).bytes(), Err(CborError::Unsupported));
        let deep = [0x81u8; 40];
        assert_eq!(Decoder::new(&deep).skip(), Err(CborError::TooDeep));
        assert_eq!(
            Decoder::new(&[0x62, 0xff, 0xfe]).text(),
            Err(CborError::InvalidUtf8)
        );
        assert_eq!(
            Decoder::new(&[0x3b, 0xff, 0, 0, 0, 0, 0, 0, 0]).i64(),
            Err(CborError::Overflow)
        );
    }
}
