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
}
