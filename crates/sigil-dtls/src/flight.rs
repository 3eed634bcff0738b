//! Flights (RFC 6347 §4.2.4): the messages sent together and kept for retransmission, the
//! queue of datagrams waiting for the caller, and, for the record carrier only (feature
//! `record-carrier`), the handshake fragments kept when they arrive ahead of their turn
//! (§4.2.2) and the retransmission timer (§4.2.4.1).

#[cfg(feature = "record-carrier")]
use crate::handshake::{Fragment, HEADER_LEN as HS_HEADER_LEN};
use crate::wire::ContentType;
use crate::Error;
#[cfg(feature = "record-carrier")]
use crate::Writer;
#[cfg(feature = "record-carrier")]
use core::time::Duration;
#[cfg(feature = "record-carrier")]
use sigil_time::Instant;

/// Largest handshake message this side reassembles (certificate chains need more room, so
/// the `x509` feature raises it).
#[cfg(not(feature = "x509"))]
pub const MAX_MESSAGE: usize = 512;
#[cfg(all(feature = "x509", not(feature = "rsa")))]
pub const MAX_MESSAGE: usize = 1536;
#[cfg(feature = "rsa")]
pub const MAX_MESSAGE: usize = 3072;
/// Bytes of handshake messages kept for the Finished hash (the first ClientHello and the
/// HelloVerifyRequest are not part of it, RFC 6347 §4.2.1).
#[cfg(not(feature = "x509"))]
pub const MAX_TRANSCRIPT: usize = 2048;
#[cfg(all(feature = "x509", not(feature = "rsa")))]
pub const MAX_TRANSCRIPT: usize = 4096;
#[cfg(feature = "rsa")]
pub const MAX_TRANSCRIPT: usize = 6144;
/// Bytes of handshake messages in one flight.
#[cfg(not(feature = "x509"))]
pub const MAX_FLIGHT: usize = 1024;
#[cfg(all(feature = "x509", not(feature = "rsa")))]
pub const MAX_FLIGHT: usize = 2048;
#[cfg(feature = "rsa")]
pub const MAX_FLIGHT: usize = 3072;
/// Bytes of this side's own certificate chain in Certificate-message form.
#[cfg(all(feature = "x509", not(feature = "rsa")))]
pub const MAX_CHAIN: usize = 1200;
#[cfg(feature = "rsa")]
pub const MAX_CHAIN: usize = 2560;
#[cfg(not(feature = "x509"))]
pub(crate) const MAX_CHAIN: usize = 0;
/// Datagrams waiting to be sent (a flight at a small PMTU takes many: an X.509 flight at a
/// 64-byte PMTU is about 50).
pub const MAX_QUEUED: usize = 64;
/// Largest datagram this side builds.
pub const MAX_DATAGRAM: usize = 1400;
/// Largest application record payload.
pub const MAX_APP_DATA: usize = 1024;
/// Bytes of datagrams waiting to be sent (a flight, or a few application records), with room
/// for the per-datagram headers of a flight cut to a small PMTU.
#[cfg(feature = "record-carrier")]
#[cfg(not(feature = "x509"))]
pub(crate) const SEND_QUEUE_BYTES: usize = MAX_FLIGHT + 1024;
#[cfg(feature = "record-carrier")]
#[cfg(feature = "x509")]
pub(crate) const SEND_QUEUE_BYTES: usize = MAX_FLIGHT + 2048;
/// Bytes of handshake fragments kept when they arrive ahead of the message this side expects
/// (RFC 6347 §4.2.2: when the first datagram of a flight is lost, the rest is kept for when the
/// retransmission fills the gap).
#[cfg(feature = "record-carrier")]
#[cfg(not(feature = "x509"))]
pub(crate) const AHEAD_BYTES: usize = 512;
#[cfg(feature = "record-carrier")]
#[cfg(feature = "x509")]
pub(crate) const AHEAD_BYTES: usize = 2048;
/// How far ahead of the expected message a kept fragment may be.
#[cfg(feature = "record-carrier")]
pub(crate) const AHEAD_MESSAGES: u16 = 4;
/// Bytes of received application records waiting for the caller.
pub(crate) const RECEIVE_QUEUE_BYTES: usize = MAX_APP_DATA + 512;

#[derive(Clone, Copy)]
pub(crate) struct OutMessage {
    pub content_type: ContentType,
    pub epoch: u16,
    pub start: usize,
    pub len: usize,
}

/// A flight: the handshake messages (and ChangeCipherSpec) sent together, kept so the whole
/// flight can be sent again with fresh record numbers (RFC 6347 §4.2.4).
pub(crate) struct Flight {
    pub buf: [u8; MAX_FLIGHT],
    pub used: usize,
    pub msgs: [Option<OutMessage>; 6],
}

impl Flight {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [0; MAX_FLIGHT],
            used: 0,
            msgs: [None; 6],
        }
    }

    pub(crate) fn clear(&mut self) {
        self.used = 0;
        self.msgs = [None; 6];
    }

    pub(crate) fn push(
        &mut self,
        content_type: ContentType,
        epoch: u16,
        bytes: &[u8],
    ) -> Result<(), Error> {
        let slot = self
            .msgs
            .iter_mut()
            .find(|m| m.is_none())
            .ok_or(Error::BufferTooSmall)?;
        let end = self.used + bytes.len();
        if end > MAX_FLIGHT {
            return Err(Error::BufferTooSmall);
        }
        self.buf[self.used..end].copy_from_slice(bytes);
        *slot = Some(OutMessage {
            content_type,
            epoch,
            start: self.used,
            len: bytes.len(),
        });
        self.used = end;
        Ok(())
    }
}

/// Datagrams (or application records) waiting to be taken, in `N` bytes.
pub(crate) struct Queue<const N: usize> {
    buf: [u8; N],
    lens: [u16; MAX_QUEUED],
    n: usize,
    used: usize,
}

impl<const N: usize> Queue<N> {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [0; N],
            lens: [0; MAX_QUEUED],
            n: 0,
            used: 0,
        }
    }

    pub(crate) fn push(&mut self, d: &[u8]) -> Result<(), Error> {
        if self.n == MAX_QUEUED || self.used + d.len() > N {
            return Err(Error::BufferTooSmall);
        }
        self.buf[self.used..self.used + d.len()].copy_from_slice(d);
        self.lens[self.n] = d.len() as u16;
        self.n += 1;
        self.used += d.len();
        Ok(())
    }

    pub(crate) fn pop(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.n == 0 {
            return None;
        }
        let len = usize::from(self.lens[0]);
        if out.len() < len {
            return None;
        }
        out[..len].copy_from_slice(&self.buf[..len]);
        self.buf.copy_within(len..self.used, 0);
        self.lens.copy_within(1..self.n, 0);
        self.n -= 1;
        self.used -= len;
        Some(len)
    }
}

/// Epoch-0 handshake fragments that arrived ahead of the expected message, each stored as
/// `len (u16) || fragment (header and body)`, oldest first; bounded by [`AHEAD_BYTES`].
#[cfg(feature = "record-carrier")]
pub(crate) struct Ahead {
    buf: [u8; AHEAD_BYTES],
    used: usize,
}

#[cfg(feature = "record-carrier")]
impl Ahead {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [0; AHEAD_BYTES],
            used: 0,
        }
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        let mut at = 0;
        core::iter::from_fn(move || {
            if at + 2 > self.used {
                return None;
            }
            let len = usize::from(u16::from_be_bytes([self.buf[at], self.buf[at + 1]]));
            let start = at;
            at += 2 + len;
            Some((start, &self.buf[start + 2..start + 2 + len]))
        })
    }

    /// Keeps `f` unless an identical fragment is kept already or there is no room (then it
    /// is dropped: the peer's retransmission brings it again).
    pub(crate) fn keep(&mut self, f: &Fragment<'_>) -> bool {
        let len = HS_HEADER_LEN + f.body.len();
        if self.used + 2 + len > AHEAD_BYTES {
            return false;
        }
        let duplicate = self.entries().any(|(_, e)| {
            Fragment::parse(e).is_ok_and(|(k, _)| {
                k.message_seq == f.message_seq && k.offset == f.offset && k.body == f.body
            })
        });
        if duplicate {
            return true;
        }
        let start = self.used;
        self.buf[start..start + 2].copy_from_slice(&(len as u16).to_be_bytes());
        let mut w = Writer::new(&mut self.buf[start + 2..start + 2 + len]);
        if f.write(&mut w).is_err() {
            return false;
        }
        self.used += 2 + len;
        true
    }

    /// Removes and copies into `out` the first kept fragment of message `seq`, dropping any
    /// kept for messages before it. Returns its length.
    pub(crate) fn take(&mut self, seq: u16, out: &mut [u8]) -> Option<usize> {
        loop {
            let (start, n, msg_seq) = self.entries().find_map(|(start, e)| {
                let (k, _) = Fragment::parse(e).ok()?;
                (k.message_seq <= seq).then_some((start, e.len(), k.message_seq))
            })?;
            let found = msg_seq == seq && n <= out.len();
            if found {
                out[..n].copy_from_slice(&self.buf[start + 2..start + 2 + n]);
            }
            self.buf.copy_within(start + 2 + n..self.used, start);
            self.used -= 2 + n;
            if found {
                return Some(n);
            }
        }
    }
}

/// The retransmission timer of the last flight (RFC 6347 §4.2.4.1): it runs from when the
/// flight's first datagram leaves, doubles on each expiry up to the maximum, and gives up
/// after the configured number of retransmissions.
#[cfg(feature = "record-carrier")]
pub(crate) struct Timer {
    pub deadline: Option<Instant>,
    pub timeout: Duration,
    pub retransmissions: u32,
    /// Times the flight went out again in answer to a retransmission of the peer's previous
    /// flight; capped like `retransmissions`, since anyone can send what looks like one.
    pub answers: u32,
    /// The deadline was set when the flight was built; the first datagram handed to the caller
    /// sets it again from that moment.
    pub armed_by_send: bool,
}

#[cfg(feature = "record-carrier")]
impl Timer {
    pub(crate) fn new(initial: Duration) -> Self {
        Self {
            deadline: None,
            timeout: initial,
            retransmissions: 0,
            answers: 0,
            armed_by_send: false,
        }
    }

    /// Arms the timer for a flight built at `now`.
    pub(crate) fn arm(&mut self, now: Instant) {
        self.deadline = Some(now.saturating_add(self.timeout));
        self.armed_by_send = true;
    }

    /// A datagram of the flight leaves at `now`: the first one restarts the timer from here
    /// (a datagram cannot leave before its flight was built, so it never moves earlier).
    pub(crate) fn sent(&mut self, now: Instant) {
        if core::mem::take(&mut self.armed_by_send) {
            if let Some(d) = self.deadline {
                self.deadline = Some(d.max(now.saturating_add(self.timeout)));
            }
        }
    }
}
