//! The record carrier (RFC 6347 §4.2): a handshake's flights cut into datagrams of at most the
//! PMTU, fragment reassembly, messages kept ahead of a gap, and the retransmission timer.

use super::{next_seq, read_alert, Config, Cx, Hs, HsIo, Next, RecordLayer};
use crate::flight::{
    Ahead, Flight, Queue, Timer, AHEAD_MESSAGES, MAX_DATAGRAM, MAX_MESSAGE, SEND_QUEUE_BYTES,
};
use crate::handshake::{Fragment, Reassembler, HEADER_LEN as HS_HEADER_LEN};
use crate::record::Record;
use crate::traffic::Took;
use crate::trust::Trust;
use crate::wire::{ContentType, HandshakeType};
use crate::{Error, Writer};
use sigil_crypto::CryptoProvider;
use sigil_time::Instant;

/// The record carrier's own part of a handshake: the datagrams waiting for the caller and
/// the flight's retransmission timer.
pub(crate) struct RecordIo {
    pub queue: Queue<SEND_QUEUE_BYTES>,
    pub timer: Timer,
}

impl RecordIo {
    pub(super) fn new(config: &Config) -> Self {
        Self {
            queue: Queue::new(),
            timer: Timer::new(config.initial_timeout),
        }
    }

    /// Records the flight's messages into datagrams of at most the PMTU, fragmenting
    /// handshake messages that do not fit, and queues them. Every transmission uses fresh
    /// record sequence numbers.
    pub(super) fn send_flight<C: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &C,
        rl: &mut RecordLayer,
        flight: &Flight,
        (config, now): (&Config, Instant),
        retransmission: bool,
    ) -> Result<(), Error> {
        if !retransmission {
            // A new flight starts with the initial timeout and a fresh retransmission budget.
            self.timer.timeout = config.initial_timeout;
            self.timer.retransmissions = 0;
            self.timer.answers = 0;
        }
        // During the handshake the queue holds only flight datagrams, and any the caller has
        // not sent yet belong to an earlier (re)transmission this one supersedes.
        self.queue = Queue::new();
        let pmtu = config.pmtu.min(MAX_DATAGRAM);
        pack_flight(crypto, rl, flight, pmtu, |d| self.queue.push(d))?;
        self.timer.arm(now);
        Ok(())
    }

    /// Sends the flight a transition marked ready, if any (a new flight).
    pub(super) fn send_ready<C: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &C,
        rl: &mut RecordLayer,
        io: &mut HsIo,
        parts: (&Config, Instant),
    ) -> Result<(), Error> {
        if core::mem::take(&mut io.flight_ready) {
            self.send_flight(crypto, rl, &io.flight, parts, false)?;
        }
        Ok(())
    }
}

/// Cuts `flight` into datagrams of at most `pmtu` bytes (fragmenting handshake messages, never
/// the ClientHello) and hands each to `out`.
pub(crate) fn pack_flight<C: CryptoProvider + ?Sized>(
    crypto: &C,
    rl: &mut RecordLayer,
    flight: &Flight,
    pmtu: usize,
    mut out: impl FnMut(&[u8]) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut dgram = [0u8; MAX_DATAGRAM];
    let mut used = 0;
    for m in flight.msgs.iter().flatten() {
        let bytes = flight
            .buf
            .get(m.start..m.start + m.len)
            .ok_or(Error::BufferTooSmall)?;
        let overhead = rl.overhead(m.epoch);
        if m.content_type != ContentType::HANDSHAKE {
            let mut rec = [0u8; 64];
            let n = rl.seal(crypto, m.content_type, m.epoch, bytes, &mut rec)?;
            if used + n > pmtu {
                out(&dgram[..used])?;
                used = 0;
            }
            dgram[used..used + n].copy_from_slice(&rec[..n]);
            used += n;
            continue;
        }
        let (f, _) = Fragment::parse(bytes)?;
        // A ClientHello always goes whole: a stateless server (the cookie exchange) can only
        // answer one it sees in a single datagram. Below the PMTU, the network layer (6LoWPAN,
        // IPv6) fragments it instead.
        let pmtu = if f.msg_type == HandshakeType::CLIENT_HELLO {
            MAX_DATAGRAM
        } else {
            pmtu
        };
        let mut offset = 0usize;
        loop {
            let room = pmtu.saturating_sub(used + overhead + HS_HEADER_LEN);
            if room == 0 || (room < f.body.len() - offset && used > 0) {
                if used == 0 {
                    return Err(Error::BufferTooSmall); // PMTU below one header
                }
                out(&dgram[..used])?;
                used = 0;
                continue;
            }
            let take = room.min(f.body.len() - offset);
            let part = Fragment {
                offset: offset as u32,
                body: &f.body[offset..offset + take],
                ..f
            };
            let mut plain = [0u8; MAX_MESSAGE + HS_HEADER_LEN];
            let mut w = Writer::new(&mut plain);
            part.write(&mut w)?;
            let pn = w.len();
            let n = rl.seal(
                crypto,
                ContentType::HANDSHAKE,
                m.epoch,
                &plain[..pn],
                &mut dgram[used..],
            )?;
            used += n;
            offset += take;
            if offset >= f.body.len() {
                break;
            }
        }
    }
    if used > 0 {
        out(&dgram[..used])?;
    }
    Ok(())
}

/// A connection in its handshake.
pub(crate) struct Handshaking {
    pub(super) rl: RecordLayer,
    /// `None` only after a failure (the state was consumed by a transition that failed).
    pub(super) state: Option<Hs>,
    pub(super) io: HsIo,
    pub(super) out: RecordIo,
    pub(super) next_recv_msg: u16,
    pub(super) reassembler: Reassembler<MAX_MESSAGE>,
    pub(super) ahead: Ahead,
    pub(super) failed: Option<Error>,
    pub(super) dropped: u32,
}

impl Handshaking {
    /// Fails the handshake with a fatal alert (sent in the current write epoch).
    pub(super) fn fail<C: CryptoProvider>(&mut self, crypto: &C, e: Error) -> Result<(), Error> {
        if self.failed.is_some() {
            return Err(e);
        }
        let mut out = [0u8; 64];
        if let Some(n) = self.rl.alert_record(crypto, &e, &mut out) {
            let _ = self.out.queue.push(&out[..n]);
        }
        self.failed = Some(e);
        self.state = None;
        self.out.timer.deadline = None;
        Err(e)
    }

    /// One record: what became of it, and `Some(_)` when the handshake just completed.
    pub(super) fn handle_record<C: CryptoProvider, T: Trust>(
        &mut self,
        parts: (&C, &T, &Config),
        now: Instant,
        rec: &Record<'_>,
    ) -> Result<(Took, Option<crate::traffic::Established>), Error> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let crypto = parts.0;
        let mut buf = [0u8; MAX_DATAGRAM];
        let (ct, epoch, plain) = match self.rl.open(crypto, rec, &mut buf) {
            Ok(x) => x,
            Err(e) if e.alert().is_none() => {
                self.dropped += 1;
                return Ok((Took::Dropped, None));
            }
            Err(e) => return self.fail(crypto, e).map(|()| (Took::Dropped, None)),
        };
        match self.take(parts, now, ct, epoch, plain) {
            Ok(done) => Ok((Took::in_epoch(epoch), done)),
            Err(e) => self.error(crypto, e).map(|()| (Took::Dropped, None)),
        }
    }

    /// What an opened record carried; an error is the record's (see [`Self::error`]).
    fn take<C: CryptoProvider, T: Trust>(
        &mut self,
        (crypto, trust, config): (&C, &T, &Config),
        now: Instant,
        ct: ContentType,
        epoch: u16,
        plain: &[u8],
    ) -> Result<Option<crate::traffic::Established>, Error> {
        // Once the peer protects its records, a malformed plaintext one is not the peer's:
        // dropped rather than fatal.
        let after_ccs = epoch < self.rl.read_epoch;
        let forged = |e: Error| {
            if after_ccs && e.alert().is_some() {
                Error::Unauthenticated(
                    "malformed plaintext record after the peer's ChangeCipherSpec",
                )
            } else {
                e
            }
        };
        let r = match ct {
            ContentType::HANDSHAKE => {
                let mut rest = plain;
                let mut done = None;
                while !rest.is_empty() && done.is_none() {
                    match Fragment::parse(rest) {
                        Ok((f, next)) => {
                            rest = next;
                            done = self.handle_fragment((crypto, trust, config), now, epoch, &f)?;
                        }
                        Err(e) => return Err(forged(e)),
                    }
                }
                return Ok(done);
            }
            ContentType::CHANGE_CIPHER_SPEC => self.handle_ccs(epoch, plain).map_err(forged),
            // Once the peer's records are protected, an epoch-0 record other than a
            // retransmission (handshake, ChangeCipherSpec) is unauthenticated (anyone can
            // forge it): dropped, so a spoofed datagram cannot end the handshake.
            _ if epoch < self.rl.read_epoch => Err(Error::Unauthenticated(
                "plaintext record after the peer's ChangeCipherSpec",
            )),
            ContentType::ALERT => match read_alert(plain) {
                Ok(Some(e)) => {
                    self.failed = Some(e);
                    self.state = None;
                    self.out.timer.deadline = None;
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            },
            // Never before the peer's Finished verified (CVE-2020-24585's class): a protected
            // record that overtook the Finished is dropped, a plaintext one refused.
            ContentType::APPLICATION_DATA if epoch == 1 => Err(Error::EarlyApplicationData),
            ContentType::APPLICATION_DATA => Err(Error::UnexpectedMessage(
                "application data before the handshake completed",
            )),
            _ => Err(Error::UnexpectedMessage("unknown content type")),
        };
        r.map(|()| None)
    }

    /// An error from a record: dropped when it warrants no alert, else fatal.
    fn error<C: CryptoProvider>(&mut self, crypto: &C, e: Error) -> Result<(), Error> {
        if e.alert().is_none() && self.state.is_some() {
            self.dropped += 1;
            return Ok(());
        }
        self.fail(crypto, e)
    }

    fn handle_ccs(&mut self, epoch: u16, plain: &[u8]) -> Result<(), Error> {
        if plain != [1] {
            return Err(Error::Decode("ChangeCipherSpec"));
        }
        match self.state.take() {
            // CCS is only valid where the handshake expects it: an early one (before the keys
            // exist) is the CVE-2017-7243 class of bug.
            Some(Hs::ExpectChangeCipherSpec(s)) if epoch == 0 => {
                self.rl.read_epoch = 1;
                // The peer's next message (Finished) comes in epoch 1: epoch-0 fragments held
                // for it or beyond were not the peer's and must not be joined to it.
                self.reassembler.reset();
                self.ahead = Ahead::new();
                self.state = Some(Hs::ExpectFinished(s.handle_ccs()));
                Ok(())
            }
            // A retransmitted CCS while the Finished is awaited: ignore.
            Some(s @ Hs::ExpectFinished(_)) => {
                self.state = Some(s);
                Ok(())
            }
            other => {
                self.state = other;
                Err(Error::UnexpectedChangeCipherSpec)
            }
        }
    }

    fn handle_fragment<C: CryptoProvider, T: Trust>(
        &mut self,
        parts: (&C, &T, &Config),
        now: Instant,
        epoch: u16,
        f: &Fragment<'_>,
    ) -> Result<Option<crate::traffic::Established>, Error> {
        let (crypto, _, config) = parts;
        if f.message_seq < self.next_recv_msg {
            // A retransmission of the peer's previous flight: our answer was lost, send our
            // last flight again (RFC 6347 §4.2.4). One trigger per retransmitted flight, not
            // one per fragment: only the end of the last message of the peer's previous
            // flight (the fragment every complete retransmission carries exactly once).
            let ends_flight = f.message_seq + 1 == self.next_recv_msg
                && f.offset as usize + f.body.len() == f.length as usize;
            // At most `max_retransmissions` answers per flight: an epoch-0 fragment can be
            // forged by anyone, and each answer is a whole flight (no reflector).
            if self.io.flight.used > 0
                && ends_flight
                && self.out.timer.deadline.is_some()
                && self.out.timer.answers < config.max_retransmissions
            {
                self.out.timer.answers += 1;
                // A full send queue (the caller is not draining) drops the retransmission
                // rather than failing the connection.
                match self.out.send_flight(
                    crypto,
                    &mut self.rl,
                    &self.io.flight,
                    (config, now),
                    true,
                ) {
                    Err(Error::BufferTooSmall) => self.dropped += 1,
                    r => r?,
                }
            }
            return Ok(None);
        }
        // After the peer's ChangeCipherSpec its new messages are protected: a plaintext one
        // is not the peer's (a retransmission of an older one was handled above).
        if epoch < self.rl.read_epoch {
            return Err(Error::Unauthenticated(
                "plaintext handshake message after the peer's ChangeCipherSpec",
            ));
        }
        if f.message_seq > self.next_recv_msg {
            // Ahead of the expected message (an earlier datagram of the flight was lost):
            // kept, within bounds, until the gap is filled. Only epoch 0 carries them.
            if epoch == 0
                && f.message_seq - self.next_recv_msg <= AHEAD_MESSAGES
                && !self.ahead.keep(f)
            {
                self.dropped += 1;
            }
            return Ok(None);
        }
        let mut body = [0u8; MAX_MESSAGE];
        let len = match self.reassembler.add(f)? {
            Some(b) => {
                body[..b.len()].copy_from_slice(b);
                b.len()
            }
            None => return Ok(None),
        };
        let whole = Fragment {
            body: &body[..len],
            offset: 0,
            ..*f
        };
        self.next_recv_msg = next_seq(self.next_recv_msg)?;
        let state = self.state.take().ok_or(Error::NotEstablished)?;
        let mut cx = Cx {
            crypto,
            trust: parts.1,
            config,
            rl: &mut self.rl,
            io: &mut self.io,
        };
        let next = state.handle(&whole, epoch, &mut cx)?;
        self.out
            .send_ready(crypto, &mut self.rl, &mut self.io, (config, now))?;
        match next {
            Next::Hs(s) => self.state = Some(s),
            Next::Traffic(done) => return Ok(Some(done)),
        }
        self.replay_ahead(parts, now)
    }

    /// Hands kept fragments of the now expected message to [`Self::handle_fragment`], as if
    /// they had just arrived, until none is kept for it.
    fn replay_ahead<C: CryptoProvider, T: Trust>(
        &mut self,
        parts: (&C, &T, &Config),
        now: Instant,
    ) -> Result<Option<crate::traffic::Established>, Error> {
        let mut buf = [0u8; HS_HEADER_LEN + MAX_MESSAGE];
        // Each replayed fragment either completes a message (which replays the next one's
        // from within) or is taken out of the store, so this ends.
        while let Some(n) = self.ahead.take(self.next_recv_msg, &mut buf) {
            let (f, _) = Fragment::parse(&buf[..n])?;
            let seq = self.next_recv_msg;
            let done = self.handle_fragment(parts, now, 0, &f)?;
            if done.is_some() || self.next_recv_msg != seq {
                return Ok(done);
            }
        }
        Ok(None)
    }
}
