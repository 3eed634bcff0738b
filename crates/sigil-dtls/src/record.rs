//! The DTLS record layer (RFC 6347 §4.1): headers, the records of a datagram, and the
//! anti-replay window.

use crate::wire::{ContentType, ProtocolVersion};
use crate::{Error, Reader, Writer};

/// Length of the DTLSPlaintext header: type, version, epoch, 48-bit sequence number, length.
pub const HEADER_LEN: usize = 13;
/// Largest sequence number in an epoch (48 bits).
pub const MAX_SEQUENCE: u64 = (1 << 48) - 1;
/// Largest record fragment accepted: 2^14 plaintext plus 2048 bytes of expansion
/// (RFC 5246 §6.2.3; RFC 6347 §4.1 keeps the limit).
pub const MAX_FRAGMENT: usize = (1 << 14) + 2048;

/// A record header as it appears on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub content_type: ContentType,
    pub version: ProtocolVersion,
    pub epoch: u16,
    pub sequence: u64,
    pub length: u16,
}

impl RecordHeader {
    /// The 8-byte `epoch || sequence_number` that DTLS uses where TLS has its implicit
    /// sequence number (MAC input, AEAD nonce; RFC 6347 §4.1.2.1).
    pub fn seq_num(&self) -> [u8; 8] {
        ((u64::from(self.epoch) << 48) | self.sequence).to_be_bytes()
    }

    pub fn write(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        w.u8(self.content_type.0)?;
        w.u16(self.version.0)?;
        w.u16(self.epoch)?;
        w.u48(self.sequence)?;
        w.u16(self.length)
    }
}

/// One record of a datagram: its header and its (still protected) fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub header: RecordHeader,
    /// The connection ID of a `tls12_cid` record (RFC 9146 §4), empty otherwise.
    pub cid: &'a [u8],
    pub fragment: &'a [u8],
}

impl<'a> Record<'a> {
    /// Parses the record at the start of `buf`; returns it and the bytes after it.
    ///
    /// Checks what can be checked without keys: a DTLS version (1.0 is accepted in a
    /// ClientHello record, RFC 6347 §4.2.1), the length against the datagram and
    /// [`MAX_FRAGMENT`]. Records with a connection ID (content type 25) are not parsed here.
    pub fn parse(buf: &'a [u8]) -> Result<(Self, &'a [u8]), Error> {
        Self::parse_with_cid(buf, 0)
    }

    /// Parses a record where `tls12_cid` records carry a `cid_len`-byte connection ID (the
    /// length this side chose for the IDs it receives; RFC 9146 §4).
    pub fn parse_with_cid(buf: &'a [u8], cid_len: usize) -> Result<(Self, &'a [u8]), Error> {
        let mut r = Reader::new(buf);
        let content_type = ContentType(r.u8("record header")?);
        let version = ProtocolVersion(r.u16("record header")?);
        let epoch = r.u16("record header")?;
        let sequence = r.u48("record header")?;
        let cid = if content_type == ContentType::TLS12_CID {
            r.take(cid_len, "record connection ID")?
        } else {
            &[]
        };
        let length = r.u16("record header")?;
        if version != ProtocolVersion::DTLS_1_2 && version != ProtocolVersion::DTLS_1_0 {
            return Err(Error::BadRecordVersion(version.0));
        }
        if usize::from(length) > MAX_FRAGMENT {
            return Err(Error::RecordOverflow);
        }
        let fragment = r.take(usize::from(length), "record fragment")?;
        Ok((
            Record {
                header: RecordHeader {
                    content_type,
                    version,
                    epoch,
                    sequence,
                    length,
                },
                cid,
                fragment,
            },
            r.rest(),
        ))
    }
}

/// The records of one datagram, in order (a datagram may carry several, RFC 6347 §4.1.1).
/// After the first malformed record the rest of the datagram is unusable and iteration stops.
pub struct Records<'a> {
    rest: &'a [u8],
    cid_len: usize,
    failed: bool,
}

impl<'a> Records<'a> {
    pub fn new(datagram: &'a [u8]) -> Self {
        Self::with_cid(datagram, 0)
    }

    /// Records of a datagram whose `tls12_cid` records carry `cid_len`-byte IDs.
    pub fn with_cid(datagram: &'a [u8], cid_len: usize) -> Self {
        Self {
            rest: datagram,
            cid_len,
            failed: false,
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        match Record::parse_with_cid(self.rest, self.cid_len) {
            Ok((rec, rest)) => {
                self.rest = rest;
                Some(Ok(rec))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// The anti-replay window of RFC 6347 §4.1.2.6 for one epoch: 64 sequence numbers wide.
///
/// [`ReplayWindow::check`] says whether a number may be new; only after the record has
/// authenticated does [`ReplayWindow::accept`] move the window, so a forged record with a
/// far-future number cannot push genuine ones out of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayWindow {
    /// Highest accepted sequence number, or `None` before the first record.
    top: Option<u64>,
    /// Bit i set: `top - i` was accepted.
    seen: u64,
}

impl ReplayWindow {
    /// Width of the window (the RFC asks for at least 32).
    pub const WIDTH: u64 = 64;

    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `sequence` may be a new record: right of the window, or inside it and unseen.
    pub fn check(&self, sequence: u64) -> Result<(), Error> {
        let Some(top) = self.top else {
            return Ok(());
        };
        if sequence > top {
            return Ok(());
        }
        let back = top - sequence;
        if back >= Self::WIDTH || self.seen & (1 << back) != 0 {
            return Err(Error::Replayed);
        }
        Ok(())
    }

    /// Records `sequence` as received. Call only after the record authenticated.
    pub fn accept(&mut self, sequence: u64) {
        match self.top {
            None => {
                self.top = Some(sequence);
                self.seen = 1;
            }
            Some(top) if sequence > top => {
                let shift = sequence - top;
                self.seen = if shift >= Self::WIDTH {
                    0
                } else {
                    self.seen << shift
                };
                self.seen |= 1;
                self.top = Some(sequence);
            }
            Some(top) => {
                let back = top - sequence;
                if back < Self::WIDTH {
                    self.seen |= 1 << back;
                }
            }
        }
    }

    /// The highest accepted sequence number.
    pub fn highest(&self) -> Option<u64> {
        self.top
    }

    /// The window as (highest accepted, bitmap of the 64 numbers up to it), for saving it.
    pub fn parts(&self) -> (Option<u64>, u64) {
        (self.top, self.seen)
    }

    /// A window from [`ReplayWindow::parts`]; `None` when they cannot come from a window
    /// (a bitmap without a highest number, a highest number not marked seen, or one beyond
    /// [`MAX_SEQUENCE`]).
    pub fn from_parts(top: Option<u64>, seen: u64) -> Option<Self> {
        match top {
            None if seen == 0 => Some(Self::new()),
            Some(t) if t <= MAX_SEQUENCE && seen & 1 == 1 => Some(Self { top, seen }),
            _ => None,
        }
    }
}

/// One epoch-0 record with a plaintext body written by `body` (RFC 6347 §4.1).
pub(crate) fn plaintext_record(
    ct: ContentType,
    sequence: u64,
    body: impl FnOnce(&mut Writer<'_>) -> Result<(), Error>,
    out: &mut [u8],
) -> Result<usize, Error> {
    let mut w = Writer::new(out);
    w.bytes(&[0; HEADER_LEN])?;
    body(&mut w)?;
    let n = w.len();
    let mut hw = Writer::new(&mut out[..HEADER_LEN]);
    RecordHeader {
        content_type: ct,
        version: ProtocolVersion::DTLS_1_2,
        epoch: 0,
        sequence,
        length: u16::try_from(n - HEADER_LEN).map_err(|_| Error::RecordOverflow)?,
    }
    .write(&mut hw)?;
    Ok(n)
}

/// What a server needs to know about a datagram's first record before it has any state for
/// the peer, read once with every bound checked (the smoltcp `new_checked` idea, as a plain
/// value): a caller never indexes record bytes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordFacts<'a> {
    pub content_type: ContentType,
    pub epoch: u16,
    pub sequence: u64,
    /// The connection ID of a `tls12_cid` record (RFC 9146 §4), read with the length the
    /// caller's IDs have; empty otherwise.
    pub cid: &'a [u8],
    /// The type of the first handshake message in an epoch-0 handshake record (read from
    /// its header; the message may be fragmented or malformed).
    pub handshake_type: Option<crate::wire::HandshakeType>,
    /// Set when the record is an epoch-0 handshake record holding a whole, well-formed
    /// ClientHello.
    pub client_hello: Option<ClientHelloFacts<'a>>,
}

/// The parts of a ClientHello a server looks at before creating state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientHelloFacts<'a> {
    /// The client random (tells a new handshake from a retransmitted one).
    pub random: &'a [u8; 32],
    /// The session the client asks to resume (RFC 5246 §7.4.1.2), if it names one of the
    /// 32-byte IDs Sigil issues.
    pub requested_session: Option<&'a [u8; 32]>,
    /// Whether it carries a cookie (the second ClientHello of the exchange).
    pub has_cookie: bool,
}

impl<'a> RecordFacts<'a> {
    /// Reads the first record of `datagram`; `cid_len` is the length of the connection IDs
    /// this side hands out (0: none).
    pub fn parse(datagram: &'a [u8], cid_len: usize) -> Result<Self, Error> {
        let (rec, _) = Record::parse_with_cid(datagram, cid_len)?;
        let h = rec.header;
        let plain_handshake = h.content_type == ContentType::HANDSHAKE && h.epoch == 0;
        let handshake_type = rec
            .fragment
            .first()
            .filter(|_| plain_handshake)
            .map(|t| crate::wire::HandshakeType(*t));
        let client_hello = if plain_handshake {
            crate::handshake::Fragment::parse(rec.fragment)
                .ok()
                .filter(|(f, _)| {
                    f.msg_type == crate::wire::HandshakeType::CLIENT_HELLO && f.is_whole()
                })
                .and_then(|(f, _)| crate::handshake::ClientHello::parse(f.body).ok())
                .map(|ch| ClientHelloFacts {
                    random: ch.random,
                    requested_session: ch.session_id.try_into().ok(),
                    has_cookie: !ch.cookie.is_empty(),
                })
        } else {
            None
        };
        Ok(Self {
            content_type: h.content_type,
            epoch: h.epoch,
            sequence: h.sequence,
            cid: rec.cid,
            handshake_type,
            client_hello,
        })
    }

    /// Whether the record is an epoch-0 handshake record starting with a ClientHello (a new
    /// handshake, a retransmission, or a malformed one for the cookie check to refuse).
    pub fn is_client_hello(&self) -> bool {
        self.handshake_type == Some(crate::wire::HandshakeType::CLIENT_HELLO)
    }
}
