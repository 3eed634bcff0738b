//! Bounds-checked reading and writing of the TLS presentation language (RFC 5246 §4): every
//! read returns the bytes asked for or [`Error::Decode`], every write fits the caller's buffer
//! or returns [`Error::BufferTooSmall`]; nothing here panics on input.

use crate::{record, Error};

/// A bounds-checked reader over received bytes: every read either returns the bytes asked
/// for or [`Error::Decode`], never panics.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.at..]
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Error> {
        if n > self.remaining() {
            return Err(Error::Decode(what));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, Error> {
        Ok(self.take(1, what)?[0])
    }

    pub fn u16(&mut self, what: &'static str) -> Result<u16, Error> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u24(&mut self, what: &'static str) -> Result<u32, Error> {
        let b = self.take(3, what)?;
        Ok(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }

    pub fn u48(&mut self, what: &'static str) -> Result<u64, Error> {
        let b = self.take(6, what)?;
        Ok(u64::from_be_bytes([
            0, 0, b[0], b[1], b[2], b[3], b[4], b[5],
        ]))
    }

    /// A vector with a one-byte length prefix (RFC 5246 §4.3), its length within `min..=max`.
    pub fn vec8(&mut self, min: usize, max: usize, what: &'static str) -> Result<&'a [u8], Error> {
        let n = self.u8(what)? as usize;
        if n < min || n > max {
            return Err(Error::Decode(what));
        }
        self.take(n, what)
    }

    /// A vector with a two-byte length prefix, its length within `min..=max`.
    pub fn vec16(&mut self, min: usize, max: usize, what: &'static str) -> Result<&'a [u8], Error> {
        let n = self.u16(what)? as usize;
        if n < min || n > max {
            return Err(Error::Decode(what));
        }
        self.take(n, what)
    }

    /// Fails unless every byte was consumed: trailing bytes are a decode error (RFC 5246 §7.4).
    pub fn finish(&self, what: &'static str) -> Result<(), Error> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(Error::Decode(what))
        }
    }
}

/// A writer into a caller-owned buffer: every write either fits or returns
/// [`Error::BufferTooSmall`].
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, at: 0 }
    }

    pub fn len(&self) -> usize {
        self.at
    }

    pub fn is_empty(&self) -> bool {
        self.at == 0
    }

    pub fn bytes(&mut self, b: &[u8]) -> Result<(), Error> {
        let end = self.at.checked_add(b.len()).ok_or(Error::BufferTooSmall)?;
        self.buf
            .get_mut(self.at..end)
            .ok_or(Error::BufferTooSmall)?
            .copy_from_slice(b);
        self.at = end;
        Ok(())
    }

    pub fn u8(&mut self, v: u8) -> Result<(), Error> {
        self.bytes(&[v])
    }

    pub fn u16(&mut self, v: u16) -> Result<(), Error> {
        self.bytes(&v.to_be_bytes())
    }

    pub fn u24(&mut self, v: u32) -> Result<(), Error> {
        if v > 0xFF_FFFF {
            return Err(Error::BufferTooSmall);
        }
        self.bytes(&v.to_be_bytes()[1..])
    }

    pub fn u48(&mut self, v: u64) -> Result<(), Error> {
        if v > record::MAX_SEQUENCE {
            return Err(Error::SequenceExhausted);
        }
        self.bytes(&v.to_be_bytes()[2..])
    }

    /// Writes a one-byte length prefix, then `body`.
    pub fn vec8(&mut self, body: &[u8]) -> Result<(), Error> {
        let n = u8::try_from(body.len()).map_err(|_| Error::BufferTooSmall)?;
        self.u8(n)?;
        self.bytes(body)
    }

    /// Writes a two-byte length prefix, then `body`.
    pub fn vec16(&mut self, body: &[u8]) -> Result<(), Error> {
        let n = u16::try_from(body.len()).map_err(|_| Error::BufferTooSmall)?;
        self.u16(n)?;
        self.bytes(body)
    }

    /// Reserves a two-byte length to be filled by [`Writer::fill_u16`] once the body is written.
    pub fn reserve_u16(&mut self) -> Result<usize, Error> {
        let at = self.at;
        self.u16(0)?;
        Ok(at)
    }

    /// Writes the length of everything after the two bytes at `at`.
    pub fn fill_u16(&mut self, at: usize) -> Result<(), Error> {
        let n = u16::try_from(self.at - at - 2).map_err(|_| Error::BufferTooSmall)?;
        self.buf[at..at + 2].copy_from_slice(&n.to_be_bytes());
        Ok(())
    }

    pub fn written(&self) -> &[u8] {
        &self.buf[..self.at]
    }
}
