//! The established connection: keys, the proofs the handshake made, who the peer is, and
//! the session. No transcript, no reassembly, no kept fragments, no flight buffer: those
//! belonged to the handshake and are gone. What remains of the handshake is this side's
//! Finished, when it sent the last flight, so it can answer a retransmitted final flight of
//! the peer (RFC 6347 §4.2.4).

use crate::conn::{read_alert, Config, RecordLayer, State};
use crate::finished::FinishedVerified;
use crate::flight::{Queue, MAX_APP_DATA, MAX_DATAGRAM, RECEIVE_QUEUE_BYTES};
use crate::handshake::Fragment;
use crate::keys::VERIFY_DATA_LEN;
use crate::record::Record;
use crate::trust::Peer;
use crate::wire::{AlertDescription, AlertLevel, CipherSuite, ContentType, HandshakeType};
use crate::{Error, Writer};
use sigil_crypto::{CryptoProvider, PublicKey};
use sigil_time::Instant;

/// Bytes of datagrams an established connection holds for the caller: a few application
/// records, or this side's final flight again.
pub(crate) const TRAFFIC_QUEUE_BYTES: usize = 2048;

/// What one received datagram's records came to. A record that fails its checks is discarded,
/// not fatal (RFC 6347 §4.1.2.7), so a datagram the connection took without error may still
/// have carried nothing of the peer's: a caller that acts on the datagram itself (follows a
/// connection ID to its new address, RFC 9146 §6) asks [`Received::is_authenticated`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// Records opened under the peer's keys (epoch 1) that passed the replay window.
    pub authenticated: u16,
    /// Records taken without protection (epoch 0: the handshake before the peer's
    /// ChangeCipherSpec, or a retransmission of it after): anyone could have sent them.
    pub unprotected: u16,
    /// Records discarded: a bad MAC, a replay, an unknown epoch, a missing or wrong connection
    /// ID, a forged plaintext record, or a malformed one (which ends the datagram).
    pub dropped: u16,
}

impl Received {
    /// Whether the datagram held at least one record and every one of them authenticated
    /// under the peer's keys and was new.
    pub fn is_authenticated(&self) -> bool {
        self.authenticated > 0 && self.unprotected == 0 && self.dropped == 0
    }

    pub(crate) fn count(&mut self, took: Took) {
        let n = match took {
            Took::Authenticated => &mut self.authenticated,
            Took::Unprotected => &mut self.unprotected,
            Took::Dropped => &mut self.dropped,
        };
        *n = n.saturating_add(1);
    }
}

/// What became of one received record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Took {
    Authenticated,
    Unprotected,
    Dropped,
}

impl Took {
    /// A record taken in `epoch`.
    pub(crate) fn in_epoch(epoch: u16) -> Self {
        if epoch == 0 {
            Self::Unprotected
        } else {
            Self::Authenticated
        }
    }
}

/// What a full handshake leaves for an abbreviated one (RFC 5246 §7.3; RFC 7627 §5.3: the
/// master secret is an extended one). Keep it as secret as a key. Only an established
/// connection makes one, so it carries who the peer was proven to be.
#[derive(Clone)]
pub struct Session {
    pub id: [u8; 32],
    pub suite: CipherSuite,
    pub master: [u8; 48],
    peer: Peer,
}

impl Session {
    /// The PSK identity the session was authenticated with (empty for key-based sessions).
    pub fn psk_identity(&self) -> &[u8] {
        self.peer.psk_identity()
    }

    /// The peer's public key the session was authenticated with, if any.
    pub fn peer_public_key(&self) -> Option<&PublicKey> {
        self.peer.public_key()
    }

    pub(crate) fn peer(&self) -> &Peer {
        &self.peer
    }
}

impl core::fmt::Debug for Session {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Session({:?}, <secret>)", self.suite)
    }
}

/// What the handshake hands to the established state: only the Finished check makes the
/// `finished` proof, and `peer` holds the peer's.
pub(crate) struct Established {
    pub finished: FinishedVerified,
    pub peer: Peer,
    pub suite: CipherSuite,
    pub master: [u8; 48],
    pub session_id: Option<[u8; 32]>,
    pub resumed: bool,
    /// This side sent the final flight: its Finished (verify_data, message_seq).
    pub final_flight: Option<([u8; VERIFY_DATA_LEN], u16)>,
}

/// The established connection without crypto provider: keys, proofs, peer, queues.
pub struct TrafficCore {
    rl: RecordLayer,
    queue: Queue<TRAFFIC_QUEUE_BYTES>,
    app: Queue<RECEIVE_QUEUE_BYTES>,
    #[allow(dead_code)]
    finished: FinishedVerified,
    peer: Peer,
    suite: CipherSuite,
    master: [u8; 48],
    session_id: Option<[u8; 32]>,
    resumed: bool,
    final_flight: Option<([u8; VERIFY_DATA_LEN], u16)>,
    next_recv_msg: u16,
    pmtu: u16,
    failed: Option<Error>,
    pub(crate) dropped: u32,
    /// Epoch-1 sequence numbers at or beyond this are not reserved in the caller's storage
    /// ([`crate::saved`]); never sealed. `None` until the first reservation: a connection
    /// that is never saved is bounded only by [`crate::record::MAX_SEQUENCE`].
    write_limit: Option<u64>,
    /// The peer's records numbered at most this may have been accepted, as last persisted
    /// ([`Traffic::save_marking_reads`], [`Traffic::persisted`]); `None` when the caller does
    /// not keep a read mark.
    read_limit: Option<u64>,
}

impl TrafficCore {
    /// The negotiated cipher suite.
    pub fn suite(&self) -> CipherSuite {
        self.suite
    }

    /// Takes the record layer and the datagrams not yet sent from the handshake.
    pub(crate) fn new<const N: usize>(
        rl: &mut RecordLayer,
        pending: &mut Queue<N>,
        done: Established,
        next_recv_msg: u16,
        dropped: u32,
        config: &Config,
    ) -> Self {
        let rl = core::mem::replace(rl, RecordLayer::new(rl.aead));
        let mut t = Self {
            rl,
            queue: Queue::new(),
            app: Queue::new(),
            finished: done.finished,
            peer: done.peer,
            suite: done.suite,
            master: done.master,
            session_id: done.session_id,
            resumed: done.resumed,
            final_flight: done.final_flight,
            next_recv_msg,
            pmtu: config.pmtu.min(MAX_DATAGRAM) as u16,
            failed: None,
            dropped,
            write_limit: None,
            read_limit: None,
        };
        let mut d = [0u8; MAX_DATAGRAM];
        while let Some(n) = pending.pop(&mut d) {
            if t.queue.push(&d[..n]).is_err() {
                t.dropped += 1;
            }
        }
        t
    }

    pub(crate) fn state(&self) -> State {
        match self.failed {
            Some(e) => State::Failed(e),
            None => State::Established,
        }
    }

    /// Who the peer is, with the proof.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    pub fn resumed(&self) -> bool {
        self.resumed
    }

    /// The connection ID the peer puts in its records to us (RFC 9146), if negotiated.
    pub fn connection_id(&self) -> &[u8] {
        self.rl.own_cid()
    }

    /// The session a later handshake may resume, if the handshake gave it an ID.
    pub fn session(&self) -> Option<Session> {
        Some(Session {
            id: self.session_id?,
            suite: self.suite,
            master: self.master,
            peer: self.peer.clone(),
        })
    }

    pub(crate) fn close<C: CryptoProvider>(&mut self, crypto: &C) -> Result<(), Error> {
        if self.failed.is_some() {
            return Err(Error::NotEstablished);
        }
        self.check_reserved()?;
        let mut out = [0u8; 64];
        let n = self.rl.seal(
            crypto,
            ContentType::ALERT,
            1,
            &[AlertLevel::WARNING.0, AlertDescription::CLOSE_NOTIFY.0],
            &mut out,
        )?;
        self.queue.push(&out[..n])?;
        self.failed = Some(Error::PeerAlert(AlertDescription::CLOSE_NOTIFY.0));
        Ok(())
    }

    pub(crate) fn poll_transmit(&mut self, out: &mut [u8]) -> Option<usize> {
        self.queue.pop(out)
    }

    /// Whether the next epoch-1 record's sequence number is inside the persisted reservation.
    fn check_reserved(&self) -> Result<(), Error> {
        if self.rl.write_seq[1] < self.write_limit() {
            Ok(())
        } else {
            Err(Error::ReservationExhausted)
        }
    }

    /// The next epoch-1 sequence number this side would write.
    pub fn next_write_sequence(&self) -> u64 {
        self.rl.write_seq[1]
    }

    /// Sequence numbers below this may be sealed: the reservation last persisted
    /// (`MAX_SEQUENCE + 1` before any).
    pub fn write_limit(&self) -> u64 {
        self.write_limit.unwrap_or(crate::record::MAX_SEQUENCE + 1)
    }

    /// Records that may still be sealed before a new reservation must be persisted.
    pub fn reserved_left(&self) -> u64 {
        self.write_limit().saturating_sub(self.rl.write_seq[1])
    }

    /// The highest sequence number of the peer's records accepted (epoch 1), if any.
    pub fn highest_read(&self) -> Option<u64> {
        self.rl.replay[1].highest()
    }

    /// The read mark last persisted ([`Traffic::save_marking_reads`]), if the caller keeps
    /// one.
    pub fn read_mark(&self) -> Option<u64> {
        self.read_limit
    }

    /// Whether a record above the persisted read mark has been accepted: the caller keeping
    /// a read mark persists a new one ([`Traffic::save_marking_reads`]) before it acts on
    /// what such a record carried, so that after a restore no record it acted on is
    /// accepted again.
    pub fn read_mark_passed(&self) -> bool {
        match (self.read_limit, self.highest_read()) {
            (Some(mark), Some(top)) => top > mark,
            _ => false,
        }
    }

    /// What [`crate::saved::SavedAssociation`] takes from an established connection, with
    /// the write sequence reserved up to `until` and the read mark `read_mark`.
    pub(crate) fn export(&self, until: u64, read_mark: Option<u64>) -> crate::saved::Parts {
        let keys = self.rl.keys.as_ref();
        crate::saved::Parts {
            suite: self.suite,
            write: keys.map(|k| (k.write.key, k.write.salt)),
            read: keys.map(|k| (k.read.key, k.read.salt)),
            own_cid: crate::saved::Cid::of(self.rl.own_cid()),
            peer_cid: crate::saved::Cid::of(self.rl.peer_cid()),
            peer: self.peer.clone(),
            master: self.master,
            session_id: self.session_id,
            resumed: self.resumed,
            replay: self.rl.replay[1],
            next_write: until,
            next_recv_msg: self.next_recv_msg,
            read_mark,
        }
    }

    /// Raises the read mark to `mark` once the caller persisted it.
    pub(crate) fn set_read_limit(&mut self, mark: u64) {
        self.read_limit = Some(self.read_limit.map_or(mark, |l| l.max(mark)));
    }

    /// Sets the reservation to `until` once the caller persisted it; a later reservation
    /// never lowers it.
    pub(crate) fn set_write_limit(&mut self, until: u64) {
        let until = until.min(crate::record::MAX_SEQUENCE + 1);
        self.write_limit = Some(self.write_limit.map_or(until, |l| l.max(until)));
    }

    /// The established state again from a saved association: writing starts at its
    /// reservation, and nothing is sealed until a new one is persisted.
    pub(crate) fn restore(p: crate::saved::Parts, vouched: &crate::saved::Vouched) -> Self {
        let aead = crate::conn::aead_of(p.suite);
        let mut rl = RecordLayer::new(aead);
        if let (Some(w), Some(r)) = (p.write, p.read) {
            rl.keys = Some(crate::conn::Epoch1 {
                write: crate::protection::RecordKeys {
                    aead,
                    key: w.0,
                    salt: w.1,
                },
                read: crate::protection::RecordKeys {
                    aead,
                    key: r.0,
                    salt: r.1,
                },
            });
        }
        // The lengths were checked by the decoder (at most MAX_CID each).
        let _ = rl.set_cids(p.own_cid.as_slice(), p.peer_cid.as_slice());
        rl.read_epoch = 1;
        rl.write_epoch = 1;
        rl.write_seq = [0, p.next_write];
        // With a read mark, every record numbered up to it counts as seen: what was accepted
        // (and acted on) before the save, and since, up to the mark, is never taken again.
        rl.replay[1] = match p.read_mark {
            Some(mark) => {
                crate::record::ReplayWindow::from_parts(Some(mark), u64::MAX).unwrap_or(p.replay)
            }
            None => p.replay,
        };
        Self {
            rl,
            queue: Queue::new(),
            app: Queue::new(),
            finished: FinishedVerified::restored(vouched),
            peer: p.peer,
            suite: p.suite,
            master: p.master,
            session_id: p.session_id,
            resumed: p.resumed,
            final_flight: None,
            next_recv_msg: p.next_recv_msg,
            pmtu: MAX_DATAGRAM as u16,
            failed: None,
            dropped: 0,
            write_limit: Some(p.next_write),
            read_limit: p.read_mark,
        }
    }

    pub(crate) fn poll_app_data(&mut self, out: &mut [u8]) -> Option<usize> {
        self.app.pop(out)
    }

    pub(crate) fn send<C: CryptoProvider>(&mut self, crypto: &C, data: &[u8]) -> Result<(), Error> {
        if self.failed.is_some() {
            return Err(Error::NotEstablished);
        }
        self.check_reserved()?;
        let mut out = [0u8; MAX_DATAGRAM];
        let n = self
            .rl
            .seal(crypto, ContentType::APPLICATION_DATA, 1, data, &mut out)?;
        self.queue.push(&out[..n])
    }

    fn fail<C: CryptoProvider>(&mut self, crypto: &C, e: Error) -> Result<(), Error> {
        if self.failed.is_some() {
            return Err(e);
        }
        let mut out = [0u8; 64];
        // Without a reserved sequence number the alert is not sent (the peer times out).
        if self.check_reserved().is_ok() {
            if let Some(n) = self.rl.alert_record(crypto, &e, &mut out) {
                let _ = self.queue.push(&out[..n]);
            }
        }
        self.failed = Some(e);
        Err(e)
    }

    pub(crate) fn handle_record<C: CryptoProvider>(
        &mut self,
        crypto: &C,
        rec: &Record<'_>,
    ) -> Result<Took, Error> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let r = self.record(crypto, rec);
        match r {
            Err(e) if e.alert().is_none() => {
                self.dropped += 1;
                Ok(Took::Dropped)
            }
            Err(e) => self.fail(crypto, e).map(|()| Took::Dropped),
            Ok(epoch) => Ok(Took::in_epoch(epoch)),
        }
    }

    /// One record; the epoch it was taken in.
    fn record<C: CryptoProvider>(&mut self, crypto: &C, rec: &Record<'_>) -> Result<u16, Error> {
        let mut buf = [0u8; MAX_DATAGRAM];
        let (ct, epoch, plain) = self.rl.open(crypto, rec, &mut buf)?;
        self.take(crypto, ct, epoch, plain).map(|()| epoch)
    }

    /// What an opened record carried.
    fn take<C: CryptoProvider>(
        &mut self,
        crypto: &C,
        ct: ContentType,
        epoch: u16,
        plain: &[u8],
    ) -> Result<(), Error> {
        match ct {
            // Epoch 0 is unauthenticated after the handshake: a plaintext handshake message
            // (old or new) changes nothing and is never answered (no reflection).
            ContentType::HANDSHAKE if epoch == 0 => Ok(()),
            ContentType::HANDSHAKE => {
                let mut rest = plain;
                while !rest.is_empty() {
                    let (f, next) = Fragment::parse(rest)?;
                    rest = next;
                    self.handle_fragment(crypto, &f)?;
                }
                Ok(())
            }
            // A retransmitted ChangeCipherSpec: ignored.
            ContentType::CHANGE_CIPHER_SPEC => Ok(()),
            // Any other epoch-0 record (alert, application data, an unknown type) is
            // unauthenticated (anyone can forge it): dropped, so a spoofed datagram cannot end
            // the connection. Application data is never taken from epoch 0 (CVE-2020-24585's
            // class).
            _ if epoch == 0 => Err(Error::Unauthenticated(
                "plaintext record after the handshake",
            )),
            ContentType::ALERT => {
                if let Some(e) = read_alert(plain)? {
                    self.failed = Some(e);
                }
                Ok(())
            }
            ContentType::APPLICATION_DATA => {
                if plain.len() > MAX_APP_DATA {
                    return Err(Error::RecordOverflow);
                }
                if self.app.push(plain).is_err() {
                    // The caller is not draining: drop, as a full socket buffer would.
                    self.dropped += 1;
                }
                Ok(())
            }
            _ => Err(Error::UnexpectedMessage("unknown content type")),
        }
    }

    /// An authenticated handshake fragment after the handshake: the peer's Finished again
    /// (its final flight was retransmitted, so ours was lost: send it again), or anything new,
    /// which would be a renegotiation (refused, RFC 5746).
    fn handle_fragment<C: CryptoProvider>(
        &mut self,
        crypto: &C,
        f: &Fragment<'_>,
    ) -> Result<(), Error> {
        if f.message_seq >= self.next_recv_msg {
            return Err(Error::UnexpectedHandshake(f.msg_type.0));
        }
        // One answer per retransmitted flight: on the fragment that ends the peer's Finished.
        let ends_flight = f.message_seq + 1 == self.next_recv_msg
            && f.offset as usize + f.body.len() == f.length as usize;
        if let (true, Some((vd, seq))) = (ends_flight, self.final_flight) {
            // A full send queue (the caller is not draining) drops the retransmission.
            if self.resend_final_flight(crypto, &vd, seq).is_err() {
                self.dropped += 1;
            }
        }
        Ok(())
    }

    /// ChangeCipherSpec (epoch 0) and Finished (epoch 1), in one datagram when the PMTU
    /// allows, with fresh record sequence numbers.
    fn resend_final_flight<C: CryptoProvider>(
        &mut self,
        crypto: &C,
        vd: &[u8; VERIFY_DATA_LEN],
        seq: u16,
    ) -> Result<(), Error> {
        self.check_reserved()?;
        let mut d = [0u8; 128];
        let ccs = self
            .rl
            .seal(crypto, ContentType::CHANGE_CIPHER_SPEC, 0, &[1], &mut d)?;
        let mut msg = [0u8; 12 + VERIFY_DATA_LEN];
        let mut w = Writer::new(&mut msg);
        Fragment {
            msg_type: HandshakeType::FINISHED,
            length: VERIFY_DATA_LEN as u32,
            message_seq: seq,
            offset: 0,
            body: vd,
        }
        .write(&mut w)?;
        let mut fin = [0u8; 96];
        let n = self
            .rl
            .seal(crypto, ContentType::HANDSHAKE, 1, &msg, &mut fin)?;
        if ccs + n <= usize::from(self.pmtu) {
            d[ccs..ccs + n].copy_from_slice(&fin[..n]);
            self.queue.push(&d[..ccs + n])
        } else {
            self.queue.push(&d[..ccs])?;
            self.queue.push(&fin[..n])
        }
    }
}

/// An established connection on its own, without the handshake's buffers: what a server
/// keeps per session once the handshake is over ([`crate::Connection::into_traffic`]).
pub struct Traffic<C> {
    crypto: C,
    core: TrafficCore,
}

impl<C: CryptoProvider> Traffic<C> {
    pub(crate) fn new(crypto: C, core: TrafficCore) -> Self {
        Self { crypto, core }
    }

    pub fn state(&self) -> State {
        self.core.state()
    }

    pub fn is_established(&self) -> bool {
        self.core.failed.is_none()
    }

    pub fn failure(&self) -> Option<Error> {
        self.core.failed
    }

    /// Records dropped: bad MAC, replays, unknown epochs, malformed, or a full queue.
    pub fn dropped(&self) -> u32 {
        self.core.dropped
    }

    /// Who the peer is, with the proof.
    pub fn peer(&self) -> &Peer {
        self.core.peer()
    }

    /// The peer's public key (it proved possession during the handshake).
    pub fn peer_public_key(&self) -> Option<&PublicKey> {
        self.core.peer().public_key()
    }

    /// The PSK identity the peer authenticated with (empty for key-based peers).
    pub fn psk_identity(&self) -> &[u8] {
        self.core.peer().psk_identity()
    }

    pub fn resumed(&self) -> bool {
        self.core.resumed()
    }

    pub fn session(&self) -> Option<Session> {
        self.core.session()
    }

    pub fn connection_id(&self) -> &[u8] {
        self.core.connection_id()
    }

    /// See [`crate::Connection::handle_datagram`].
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) -> Result<Received, Error> {
        let _ = now;
        if let Some(e) = self.core.failed {
            return Err(e);
        }
        let mut received = Received::default();
        let cid_len = self.core.connection_id().len();
        for rec in crate::record::Records::with_cid(datagram, cid_len) {
            let Ok(rec) = rec else {
                self.core.dropped += 1;
                received.count(Took::Dropped);
                break;
            };
            received.count(self.core.handle_record(&self.crypto, &rec)?);
        }
        Ok(received)
    }

    /// See [`crate::Connection::poll_transmit`].
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        let _ = now;
        self.core.poll_transmit(out)
    }

    /// An established connection sets no timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Nothing to retransmit once established.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        let _ = now;
        self.core.failed.map_or(Ok(()), Err)
    }

    pub fn poll_app_data(&mut self, out: &mut [u8]) -> Option<usize> {
        self.core.poll_app_data(out)
    }

    pub fn send(&mut self, data: &[u8]) -> Result<(), Error> {
        self.core.send(&self.crypto, data)
    }

    pub fn close(&mut self) -> Result<(), Error> {
        self.core.close(&self.crypto)
    }

    /// The established state without the crypto provider.
    pub fn core(&self) -> &TrafficCore {
        &self.core
    }

    /// Exports the association with the write sequence reserved `ahead` records past the
    /// next one to be written ([`crate::saved`]). The reservation takes effect only when the
    /// caller has persisted the result and calls [`Traffic::persisted`]: until then this
    /// side seals nothing at or beyond the previous reservation.
    pub fn save(&self, ahead: u64) -> Result<crate::saved::SavedAssociation, Error> {
        if self.core.failed.is_some() || self.core.rl.keys.is_none() {
            return Err(Error::NotEstablished);
        }
        let until = self.core.rl.write_seq[1]
            .saturating_add(ahead)
            .min(crate::record::MAX_SEQUENCE + 1);
        Ok(crate::saved::SavedAssociation::from_parts(
            self.core.export(until, None),
        ))
    }

    /// [`Traffic::save`] with a read mark `read_ahead` past the highest record of the peer
    /// accepted so far ([`crate::saved`], "Read marks"): a connection restored from it accepts
    /// only the peer's records numbered above the mark, so none it may have acted on before
    /// is accepted twice. The caller keeps the mark by saving again whenever
    /// [`TrafficCore::read_mark_passed`], before it acts on what the record carried; with
    /// `read_ahead` 0 that is after every batch with records, and the peer loses nothing
    /// across a restore; a larger `read_ahead` saves less often, and the peer's next records
    /// up to the mark are dropped after a restore.
    pub fn save_marking_reads(
        &self,
        ahead: u64,
        read_ahead: u64,
    ) -> Result<crate::saved::SavedAssociation, Error> {
        if self.core.failed.is_some() || self.core.rl.keys.is_none() {
            return Err(Error::NotEstablished);
        }
        let until = self.core.rl.write_seq[1]
            .saturating_add(ahead)
            .min(crate::record::MAX_SEQUENCE + 1);
        let mark = self
            .core
            .highest_read()
            .unwrap_or(0)
            .saturating_add(read_ahead)
            .max(self.core.read_limit.unwrap_or(0))
            .min(crate::record::MAX_SEQUENCE);
        Ok(crate::saved::SavedAssociation::from_parts(
            self.core.export(until, Some(mark)),
        ))
    }

    /// The caller has durably stored `saved` (from [`Traffic::save`] or
    /// [`Traffic::save_marking_reads`]): sequence numbers up to its reservation may now be
    /// sealed, and its read mark is the one kept.
    pub fn persisted(&mut self, saved: &crate::saved::SavedAssociation) {
        self.core.set_write_limit(saved.reserved_until());
        if let Some(mark) = saved.read_mark() {
            self.core.set_read_limit(mark);
        }
    }

    /// An established connection again from an association this side saved and read back
    /// ([`crate::saved::SavedAssociation::decode`] checked its MAC). It writes from the
    /// saved reservation on, and only after a new reservation is persisted
    /// ([`Traffic::save`], [`Traffic::persisted`]).
    pub fn restore(crypto: C, saved: crate::saved::SavedAssociation) -> Self {
        let (parts, vouched) = saved.into_parts();
        Self::new(crypto, TrafficCore::restore(parts, &vouched))
    }
}
