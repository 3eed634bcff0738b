//! Handshake messages: the DTLS handshake header and its fragments (RFC 6347 §4.2.2), bounded
//! reassembly (§4.2.3), and the hello messages (§4.2.1; RFC 5246 §7.4.1).

use crate::wire::{CipherSuite, ExtensionType, HandshakeType, ProtocolVersion};
use crate::{Error, Reader, Writer};

/// Length of the DTLS handshake header: type, length, message_seq, fragment_offset,
/// fragment_length.
pub const HEADER_LEN: usize = 12;
/// Longest cookie in DTLS 1.2 (RFC 6347 §4.2.1: `opaque cookie<0..2^8-1>`).
pub const MAX_COOKIE_LEN: usize = 255;

/// One handshake fragment as carried in a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragment<'a> {
    pub msg_type: HandshakeType,
    /// Length of the whole message.
    pub length: u32,
    pub message_seq: u16,
    pub offset: u32,
    pub body: &'a [u8],
}

impl<'a> Fragment<'a> {
    /// Parses the fragment at the start of `buf`; returns it and the bytes after it (a record
    /// may carry several handshake fragments).
    pub fn parse(buf: &'a [u8]) -> Result<(Self, &'a [u8]), Error> {
        let mut r = Reader::new(buf);
        let msg_type = HandshakeType(r.u8("handshake header")?);
        let length = r.u24("handshake header")?;
        let message_seq = r.u16("handshake header")?;
        let offset = r.u24("handshake header")?;
        let fragment_length = r.u24("handshake header")?;
        if u64::from(offset) + u64::from(fragment_length) > u64::from(length) {
            return Err(Error::FragmentOutOfRange);
        }
        if fragment_length == 0 && length != 0 {
            return Err(Error::ZeroLengthFragment);
        }
        let body = r.take(fragment_length as usize, "handshake fragment")?;
        Ok((
            Fragment {
                msg_type,
                length,
                message_seq,
                offset,
                body,
            },
            r.rest(),
        ))
    }

    /// Whether this fragment is a whole message.
    pub fn is_whole(&self) -> bool {
        self.offset == 0 && self.body.len() as u32 == self.length
    }

    pub fn write(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        w.u8(self.msg_type.0)?;
        w.u24(self.length)?;
        w.u16(self.message_seq)?;
        w.u24(self.offset)?;
        w.u24(self.body.len() as u32)?;
        w.bytes(self.body)
    }
}

#[cfg(feature = "record-carrier")]
/// Most disjoint byte ranges one message may arrive in before the reassembler gives up.
pub const MAX_RANGES: usize = 8;

/// Reassembles one handshake message at a time from its fragments, in a fixed buffer of `N`
/// bytes: a message longer than `N` is refused before anything is buffered, so a peer cannot
/// make this side hold more than `N` bytes (CVE-2022-29189's class of unbounded buffering).
#[cfg(feature = "record-carrier")]
pub struct Reassembler<const N: usize> {
    buf: [u8; N],
    current: Option<(HandshakeType, u32, u16)>,
    /// Received byte ranges [start, end), sorted and merged.
    ranges: [(u32, u32); MAX_RANGES],
    nranges: usize,
}

#[cfg(feature = "record-carrier")]
impl<const N: usize> Default for Reassembler<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "record-carrier")]
impl<const N: usize> Reassembler<N> {
    pub const fn new() -> Self {
        Self {
            buf: [0; N],
            current: None,
            ranges: [(0, 0); MAX_RANGES],
            nranges: 0,
        }
    }

    /// Forgets the message in progress.
    pub fn reset(&mut self) {
        self.current = None;
        self.nranges = 0;
    }

    /// The message in progress: type, total length, message_seq.
    pub fn current(&self) -> Option<(HandshakeType, u32, u16)> {
        self.current
    }

    /// Adds a fragment. Returns the whole message body once every byte has arrived.
    ///
    /// The first fragment fixes the message's type, length and message_seq; a later fragment
    /// that disagrees on any of them is refused rather than merged (fragments of different
    /// messages must never be combined).
    pub fn add(&mut self, f: &Fragment<'_>) -> Result<Option<&[u8]>, Error> {
        if f.length as usize > N {
            return Err(Error::MessageTooLarge {
                length: f.length,
                capacity: N,
            });
        }
        match self.current {
            None => {
                self.current = Some((f.msg_type, f.length, f.message_seq));
                self.nranges = 0;
            }
            Some(c) if c != (f.msg_type, f.length, f.message_seq) => {
                return Err(Error::FragmentMismatch)
            }
            Some(_) => {}
        }
        let start = f.offset;
        let end = f.offset + f.body.len() as u32;
        // Bytes already held must agree with the new fragment where they overlap.
        for &(s, e) in &self.ranges[..self.nranges] {
            let (os, oe) = (s.max(start), e.min(end));
            if os < oe
                && self.buf[os as usize..oe as usize]
                    != f.body[(os - start) as usize..(oe - start) as usize]
            {
                return Err(Error::FragmentConflict);
            }
        }
        self.buf[start as usize..end as usize].copy_from_slice(f.body);
        self.insert_range(start, end)?;
        let (_, length, _) = self
            .current
            .unwrap_or((f.msg_type, f.length, f.message_seq));
        if length == 0 || (self.nranges == 1 && self.ranges[0] == (0, length)) {
            self.current = None;
            self.nranges = 0;
            return Ok(Some(&self.buf[..length as usize]));
        }
        Ok(None)
    }

    fn insert_range(&mut self, start: u32, end: u32) -> Result<(), Error> {
        if start == end {
            return Ok(());
        }
        let mut merged = (start, end);
        let mut out = [(0u32, 0u32); MAX_RANGES];
        let mut n = 0;
        let mut placed = false;
        for &(s, e) in &self.ranges[..self.nranges] {
            if e < merged.0 {
                out[n] = (s, e);
                n += 1;
            } else if s > merged.1 {
                if !placed {
                    if n == MAX_RANGES {
                        return Err(Error::TooFragmented);
                    }
                    out[n] = merged;
                    n += 1;
                    placed = true;
                }
                if n == MAX_RANGES {
                    return Err(Error::TooFragmented);
                }
                out[n] = (s, e);
                n += 1;
            } else {
                merged = (merged.0.min(s), merged.1.max(e));
            }
        }
        if !placed {
            if n == MAX_RANGES {
                return Err(Error::TooFragmented);
            }
            out[n] = merged;
            n += 1;
        }
        self.ranges = out;
        self.nranges = n;
        Ok(())
    }
}

/// The extensions block of a hello: `Extension extensions<0..2^16-1>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Extensions<'a> {
    raw: &'a [u8],
}

impl<'a> Extensions<'a> {
    /// Checks the block's framing and that no extension type repeats (RFC 5246 §7.4.1.4).
    pub fn parse(raw: &'a [u8]) -> Result<Self, Error> {
        let mut seen = [0u16; 32];
        let mut n = 0;
        let mut r = Reader::new(raw);
        while !r.is_empty() {
            let t = r.u16("extension type")?;
            r.vec16(0, usize::from(u16::MAX), "extension data")?;
            if seen[..n].contains(&t) {
                return Err(Error::DuplicateExtension(t));
            }
            if n == seen.len() {
                return Err(Error::Decode("too many extensions"));
            }
            seen[n] = t;
            n += 1;
        }
        Ok(Self { raw })
    }

    /// The data of extension `t`, if present.
    pub fn get(&self, t: ExtensionType) -> Option<&'a [u8]> {
        self.iter().find(|(ty, _)| *ty == t).map(|(_, d)| d)
    }

    /// Every extension, in order (framing was checked by [`Extensions::parse`]).
    pub fn iter(&self) -> impl Iterator<Item = (ExtensionType, &'a [u8])> + 'a {
        let mut r = Reader::new(self.raw);
        core::iter::from_fn(move || {
            let t = r.u16("extension type").ok()?;
            let d = r.vec16(0, usize::from(u16::MAX), "extension data").ok()?;
            Some((ExtensionType(t), d))
        })
    }

    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }
}

/// ClientHello (RFC 6347 §4.2.1: RFC 5246's with a cookie after the session ID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientHello<'a> {
    pub version: ProtocolVersion,
    pub random: &'a [u8; 32],
    pub session_id: &'a [u8],
    pub cookie: &'a [u8],
    /// The raw suite list: an even number of bytes, at least one suite.
    suites: &'a [u8],
    pub compression_methods: &'a [u8],
    pub extensions: Extensions<'a>,
}

impl<'a> ClientHello<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(body);
        let version = ProtocolVersion(r.u16("ClientHello version")?);
        let random: &[u8; 32] = r
            .take(32, "ClientHello random")?
            .try_into()
            .map_err(|_| Error::Decode("ClientHello random"))?;
        let session_id = r.vec8(0, 32, "ClientHello session_id")?;
        let cookie = r.vec8(0, MAX_COOKIE_LEN, "ClientHello cookie")?;
        let suites = r.vec16(2, 0xfffe, "ClientHello cipher_suites")?;
        if suites.len() % 2 != 0 {
            return Err(Error::OddCipherSuiteList);
        }
        let compression_methods = r.vec8(1, 255, "ClientHello compression_methods")?;
        if !compression_methods.contains(&0) {
            return Err(Error::NoNullCompression);
        }
        let extensions = if r.is_empty() {
            Extensions::default()
        } else {
            Extensions::parse(r.vec16(0, 0xffff, "ClientHello extensions")?)?
        };
        r.finish("ClientHello")?;
        Ok(Self {
            version,
            random,
            session_id,
            cookie,
            suites,
            compression_methods,
            extensions,
        })
    }

    pub fn cipher_suites(&self) -> impl Iterator<Item = CipherSuite> + 'a {
        self.suites
            .chunks_exact(2)
            .map(|c| CipherSuite(u16::from_be_bytes([c[0], c[1]])))
    }

    /// The bytes a cookie is bound to (RFC 6347 §4.2.1: the server computes the cookie over
    /// the ClientHello's parameters). Everything but the cookie itself: version, random,
    /// session ID, suites, compression, extensions.
    pub fn cookie_input(&self) -> [&'a [u8]; 5] {
        [
            self.random,
            self.session_id,
            self.suites,
            self.compression_methods,
            self.extensions.raw(),
        ]
    }
}

/// What a client puts in its ClientHello.
#[derive(Clone, Copy, Debug)]
pub struct ClientHelloParams<'a> {
    pub random: &'a [u8; 32],
    pub session_id: &'a [u8],
    pub cookie: &'a [u8],
    pub cipher_suites: &'a [CipherSuite],
    /// Pre-encoded extensions (each type, length, data).
    pub extensions: &'a [u8],
}

impl ClientHelloParams<'_> {
    /// Writes the ClientHello body (without the handshake header).
    pub fn write(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        w.u16(ProtocolVersion::DTLS_1_2.0)?;
        w.bytes(self.random)?;
        w.vec8(self.session_id)?;
        w.vec8(self.cookie)?;
        let at = w.reserve_u16()?;
        for s in self.cipher_suites {
            w.u16(s.0)?;
        }
        w.fill_u16(at)?;
        w.vec8(&[0])?;
        if !self.extensions.is_empty() {
            w.vec16(self.extensions)?;
        }
        Ok(())
    }
}

/// HelloVerifyRequest (RFC 6347 §4.2.1): `server_version`, `cookie<0..2^8-1>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloVerifyRequest<'a> {
    pub server_version: ProtocolVersion,
    pub cookie: &'a [u8],
}

impl<'a> HelloVerifyRequest<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(body);
        let server_version = ProtocolVersion(r.u16("HelloVerifyRequest version")?);
        let cookie = r.vec8(0, MAX_COOKIE_LEN, "HelloVerifyRequest cookie")?;
        r.finish("HelloVerifyRequest")?;
        Ok(Self {
            server_version,
            cookie,
        })
    }

    pub fn write(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        w.u16(self.server_version.0)?;
        w.vec8(self.cookie)
    }
}

/// ServerHello (RFC 5246 §7.4.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerHello<'a> {
    pub version: ProtocolVersion,
    pub random: &'a [u8; 32],
    pub session_id: &'a [u8],
    pub cipher_suite: CipherSuite,
    pub compression_method: u8,
    pub extensions: Extensions<'a>,
}

impl<'a> ServerHello<'a> {
    pub fn parse(body: &'a [u8]) -> Result<Self, Error> {
        let mut r = Reader::new(body);
        let version = ProtocolVersion(r.u16("ServerHello version")?);
        let random: &[u8; 32] = r
            .take(32, "ServerHello random")?
            .try_into()
            .map_err(|_| Error::Decode("ServerHello random"))?;
        let session_id = r.vec8(0, 32, "ServerHello session_id")?;
        let cipher_suite = CipherSuite(r.u16("ServerHello cipher_suite")?);
        let compression_method = r.u8("ServerHello compression_method")?;
        let extensions = if r.is_empty() {
            Extensions::default()
        } else {
            Extensions::parse(r.vec16(0, 0xffff, "ServerHello extensions")?)?
        };
        r.finish("ServerHello")?;
        Ok(Self {
            version,
            random,
            session_id,
            cipher_suite,
            compression_method,
            extensions,
        })
    }

    pub fn write(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        w.u16(self.version.0)?;
        w.bytes(self.random)?;
        w.vec8(self.session_id)?;
        w.u16(self.cipher_suite.0)?;
        w.u8(self.compression_method)?;
        if !self.extensions.raw().is_empty() {
            w.vec16(self.extensions.raw())?;
        }
        Ok(())
    }
}
