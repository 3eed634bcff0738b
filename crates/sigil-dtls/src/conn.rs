//! The connection as callers drive it (sans-IO, after quinn-proto): datagrams in through
//! [`Connection::handle_datagram`], time through [`Connection::handle_timeout`]; datagrams out
//! through [`Connection::poll_transmit`], application data through
//! [`Connection::poll_app_data`], the next wake-up from [`Connection::poll_timeout`].
//!
//! Underneath it is one of two things: a handshake (one state struct per expected message,
//! [`crate::client`] and [`crate::server`], sharing the transcript and flight buffers of
//! `HsIo`), or the established [`TrafficCore`], which holds none of those.
//! Record intake (epochs, replay windows, connection IDs, record protection) is here.
//!
//! The handshake states are carrier-independent: a transition builds its flight in `HsIo` and
//! marks it ready ([`Cx::send_flight`]); the carrier sends it. Two carriers exist:
//! [`Connection`] (feature `record-carrier`: flights cut into datagrams, fragment reassembly,
//! messages kept ahead, the retransmission timer; RFC 6347 §4.2) and
//! [`crate::whole::WholeFlights`] (each flight travels whole as one payload over a carrier
//! that brings reliability and fragmentation itself, such as CoAP).

#[cfg(feature = "record-carrier")]
use crate::cookie::CookieVerified;
use crate::extensions::MAX_CID;
use crate::finished::{ExpectCcs, ExpectFinished};
#[cfg(feature = "record-carrier")]
use crate::flight::{Ahead, Queue, Timer, AHEAD_MESSAGES, SEND_QUEUE_BYTES};
use crate::flight::{Flight, MAX_DATAGRAM, MAX_MESSAGE, MAX_TRANSCRIPT};
#[cfg(feature = "record-carrier")]
use crate::handshake::Reassembler;
use crate::handshake::{Fragment, HEADER_LEN as HS_HEADER_LEN};
use crate::keys::{self, KeyBlock, Side};
use crate::protection::{self, Aead, RecordKeys};
#[cfg(feature = "record-carrier")]
use crate::record::Records;
#[cfg(feature = "record-carrier")]
use crate::record::HEADER_LEN;
use crate::record::{plaintext_record, Record, ReplayWindow};
#[cfg(feature = "record-carrier")]
use crate::traffic::{Session, Traffic, TrafficCore};
use crate::trust::Trust;
#[cfg(feature = "record-carrier")]
use crate::trust::{Credentials, NoTrust, ServerCredentials};
use crate::wire::{AlertDescription, AlertLevel, ContentType, HandshakeType, ProtocolVersion};
use crate::{client, server, Error, Reader, Writer};
use core::time::Duration;
use sigil_crypto::CryptoProvider;
#[cfg(feature = "record-carrier")]
use sigil_crypto::{PublicKey, Rng};
#[cfg(feature = "record-carrier")]
use sigil_time::Instant;

/// Timing and size parameters.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Initial retransmission timeout (RFC 6347 §4.2.4.1 suggests 1 s; RFC 7925 §11 allows
    /// more for constrained links, e.g. the seed's 5 s).
    pub initial_timeout: Duration,
    /// Largest timeout after doubling (RFC 6347: 60 s).
    pub max_timeout: Duration,
    /// Give up after this many retransmissions of a flight.
    pub max_retransmissions: u32,
    /// Path MTU available to DTLS records (datagram payload size): handshake messages are
    /// fragmented to fit it, except the ClientHello, which a stateless server must see whole.
    pub pmtu: usize,
    /// An ECDHE-ECDSA client offers TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 instead of the
    /// CCM-8 suite (for comparison: 8 more bytes per record). Servers accept either.
    #[cfg(feature = "gcm")]
    pub gcm: bool,
    /// Static ECDH (PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8, for comparison): a client with a
    /// raw public key offers it instead of ECDHE-ECDSA (and instead of GCM), a server with a
    /// P-256 key accepts it besides its other suites. It gives up forward secrecy: whoever
    /// later learns the server's key decrypts every session recorded with it
    /// (docs/security.md). Negotiated only when both sides set it.
    #[cfg(feature = "static-ecdh")]
    pub danger_static_ecdh: bool,
    /// RSA key transport (TLS_RSA_WITH_AES_128_CCM_8, the seed's suite, for comparison): a
    /// client with RSA certificates offers it instead of ECDHE-RSA, a server with an RSA key
    /// accepts it besides its other suites. It gives up forward secrecy: whoever later learns
    /// the server's RSA key decrypts every session recorded with it (docs/security.md).
    /// Negotiated only when both sides set it.
    #[cfg(feature = "rsa-kx")]
    pub danger_rsa_key_transport: bool,
    /// A client offers the connection_id extension (RFC 9146) with an empty ID of its own:
    /// the server's ID then goes into every protected record the client sends, so the
    /// server keeps the session when the client's address changes.
    pub connection_id: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            initial_timeout: Duration::from_secs(1),
            max_timeout: Duration::from_secs(60),
            max_retransmissions: 7,
            pmtu: 1_152,
            #[cfg(feature = "gcm")]
            gcm: false,
            #[cfg(feature = "static-ecdh")]
            danger_static_ecdh: false,
            #[cfg(feature = "rsa-kx")]
            danger_rsa_key_transport: false,
            connection_id: false,
        }
    }
}

/// Where a connection is: the name of its current state, for callers and diagnostics (the
/// state's data lives in the state structs, not here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Client: sent a ClientHello, expects HelloVerifyRequest or ServerHello.
    ExpectHelloVerifyOrServerHello,
    /// Client (certificates or raw public keys): expects the server's Certificate.
    ExpectServerCertificate,
    /// Client (ECDHE): expects the ServerKeyExchange.
    ExpectServerKeyExchange,
    /// Client: expects CertificateRequest, ServerKeyExchange (PSK identity hint) or
    /// ServerHelloDone.
    ExpectServerHelloDone,
    /// Server (mutual authentication): expects the client's Certificate.
    ExpectClientCertificate,
    /// Server: expects the client's ClientKeyExchange.
    ExpectClientKeyExchange,
    /// Server (mutual authentication): expects the client's CertificateVerify.
    ExpectCertificateVerify,
    /// Either: expects the peer's ChangeCipherSpec.
    ExpectChangeCipherSpec,
    /// Either: expects the peer's Finished (epoch 1).
    ExpectFinished,
    /// The handshake is complete: application data flows.
    Established,
    /// A fatal error or close_notify: nothing more is accepted or sent (but the alert).
    Failed(Error),
}

/// One handshake state per expected message (named after it, hence the common prefix).
// With `rsa`, the server's RSA key rides inline in the client's last states (no allocation).
#[allow(clippy::enum_variant_names)]
#[cfg_attr(feature = "rsa", allow(clippy::large_enum_variant))]
pub(crate) enum Hs {
    ExpectHelloVerifyOrServerHello(client::ExpectHelloVerifyOrServerHello),
    ExpectServerCertificate(client::ExpectCertificate),
    ExpectServerKeyExchange(client::ExpectServerKeyExchange),
    ExpectServerHelloDone(client::ExpectServerHelloDone),
    ExpectClientCertificate(server::ExpectCertificate),
    ExpectClientKeyExchange(server::ExpectClientKeyExchange),
    ExpectCertificateVerify(server::ExpectCertificateVerify),
    ExpectChangeCipherSpec(ExpectCcs),
    ExpectFinished(ExpectFinished),
}

/// What a transition leads to: the next handshake state, or the established connection.
/// No heap, so no boxing: the states are moved, and the sizes are what they hold.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Next {
    Hs(Hs),
    Traffic(crate::traffic::Established),
}

impl From<Hs> for Next {
    fn from(h: Hs) -> Self {
        Next::Hs(h)
    }
}

impl Hs {
    pub(crate) fn name(&self) -> State {
        match self {
            Self::ExpectHelloVerifyOrServerHello(_) => State::ExpectHelloVerifyOrServerHello,
            Self::ExpectServerCertificate(_) => State::ExpectServerCertificate,
            Self::ExpectServerKeyExchange(_) => State::ExpectServerKeyExchange,
            Self::ExpectServerHelloDone(_) => State::ExpectServerHelloDone,
            Self::ExpectClientCertificate(_) => State::ExpectClientCertificate,
            Self::ExpectClientKeyExchange(_) => State::ExpectClientKeyExchange,
            Self::ExpectCertificateVerify(_) => State::ExpectCertificateVerify,
            Self::ExpectChangeCipherSpec(_) => State::ExpectChangeCipherSpec,
            Self::ExpectFinished(_) => State::ExpectFinished,
        }
    }

    /// The one transition: this state consumes itself and one whole handshake message.
    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        self,
        m: &Fragment<'_>,
        epoch: u16,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        // Every handshake message but Finished travels in epoch 0.
        if epoch != 0 && m.msg_type != HandshakeType::FINISHED {
            return Err(Error::UnexpectedHandshake(m.msg_type.0));
        }
        match self {
            Self::ExpectHelloVerifyOrServerHello(s) => s.handle(m, cx),
            Self::ExpectServerCertificate(s) => s.handle(m, cx),
            Self::ExpectServerKeyExchange(s) => s.handle(m, cx),
            Self::ExpectServerHelloDone(s) => s.handle(m, cx),
            Self::ExpectClientCertificate(s) => s.handle(m, cx),
            Self::ExpectClientKeyExchange(s) => s.handle(m, cx),
            Self::ExpectCertificateVerify(s) => s.handle(m, cx),
            // A handshake message where the ChangeCipherSpec belongs: the peer skipped it (a
            // Finished sent without switching keys is refused here).
            Self::ExpectChangeCipherSpec(_) => Err(Error::UnexpectedHandshake(m.msg_type.0)),
            Self::ExpectFinished(s) => s.handle(m, epoch, cx),
        }
    }
}

/// What a transition works with besides its own state: the caller's crypto, trust and
/// configuration, the record layer, and the handshake buffers.
pub(crate) struct Cx<'a, C, T> {
    pub crypto: &'a C,
    pub trust: &'a T,
    pub config: &'a Config,
    pub rl: &'a mut RecordLayer,
    pub io: &'a mut HsIo,
}

impl<C: CryptoProvider, T> Cx<'_, C, T> {
    /// Marks the flight built in [`HsIo::flight`] as ready: the carrier sends it once the
    /// transition returns (the record carrier as a new flight, with a fresh timer and budget).
    pub fn send_flight(&mut self) -> Result<(), Error> {
        self.io.flight_ready = true;
        Ok(())
    }

    /// Adds ChangeCipherSpec and this side's Finished (over the transcript so far) to the
    /// flight; returns the verify_data.
    pub fn queue_ccs_finished(
        &mut self,
        master: &[u8; 48],
        side: Side,
    ) -> Result<[u8; keys::VERIFY_DATA_LEN], Error> {
        self.io
            .flight
            .push(ContentType::CHANGE_CIPHER_SPEC, 0, &[1])?;
        let vd = keys::verify_data(
            self.crypto,
            master,
            side,
            &self.io.transcript.hash(self.crypto),
        );
        self.io
            .queue_handshake_epoch(HandshakeType::FINISHED, &vd, 1)?;
        Ok(vd)
    }

    /// Installs the epoch-1 keys from the master secret and this handshake's randoms.
    pub fn install_keys(
        &mut self,
        aead: Aead,
        master: &[u8; 48],
        client_random: &[u8; 32],
        server_random: &[u8; 32],
        side: Side,
    ) {
        let KeyBlock { client, server } =
            keys::key_block(self.crypto, aead, master, client_random, server_random);
        self.rl.keys = Some(match side {
            Side::Client => Epoch1 {
                write: client,
                read: server,
            },
            Side::Server => Epoch1 {
                write: server,
                read: client,
            },
        });
    }
}

/// The handshake messages so far, each as if sent in one fragment (RFC 6347 §4.2.6): the
/// input of the extended master secret, the CertificateVerify and the Finished hashes.
pub(crate) struct Transcript {
    buf: [u8; MAX_TRANSCRIPT],
    len: usize,
}

impl Transcript {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [0; MAX_TRANSCRIPT],
            len: 0,
        }
    }

    pub fn add(&mut self, f: &Fragment<'_>) -> Result<(), Error> {
        let mut w = Writer::new(&mut self.buf[self.len..]);
        Fragment { offset: 0, ..*f }
            .write(&mut w)
            .map_err(|_| Error::MessageTooLarge {
                length: f.length,
                capacity: MAX_TRANSCRIPT,
            })?;
        self.len += w.len();
        Ok(())
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub fn hash<C: CryptoProvider + ?Sized>(&self, crypto: &C) -> [u8; 32] {
        crypto.sha256(&[self.bytes()])
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// The handshake's buffers every carrier needs: the transcript and this side's current
/// flight (whole messages, as built by the transitions).
pub(crate) struct HsIo {
    pub transcript: Transcript,
    pub flight: Flight,
    pub next_send_msg: u16,
    /// The transition finished a flight; the carrier sends it and clears this.
    pub flight_ready: bool,
}

impl HsIo {
    pub(crate) const fn new() -> Self {
        Self {
            transcript: Transcript::new(),
            flight: Flight::new(),
            next_send_msg: 0,
            flight_ready: false,
        }
    }

    /// Adds a handshake message (epoch 0) to the flight and the transcript.
    pub fn queue_handshake(&mut self, t: HandshakeType, body: &[u8]) -> Result<(), Error> {
        self.queue_handshake_epoch(t, body, 0)
    }

    pub fn queue_handshake_epoch(
        &mut self,
        t: HandshakeType,
        body: &[u8],
        epoch: u16,
    ) -> Result<(), Error> {
        let f = Fragment {
            msg_type: t,
            length: body.len() as u32,
            message_seq: self.next_send_msg,
            offset: 0,
            body,
        };
        self.next_send_msg = next_seq(self.next_send_msg)?;
        let mut msg = [0u8; MAX_MESSAGE + HS_HEADER_LEN];
        let mut w = Writer::new(&mut msg);
        f.write(&mut w)?;
        let n = w.len();
        self.flight.push(ContentType::HANDSHAKE, epoch, &msg[..n])?;
        self.transcript.add(&f)
    }
}

/// The record carrier's own part of a handshake: the datagrams waiting for the caller and
/// the flight's retransmission timer.
#[cfg(feature = "record-carrier")]
pub(crate) struct RecordIo {
    pub queue: Queue<SEND_QUEUE_BYTES>,
    pub timer: Timer,
}

#[cfg(feature = "record-carrier")]
impl RecordIo {
    fn new(config: &Config) -> Self {
        Self {
            queue: Queue::new(),
            timer: Timer::new(config.initial_timeout),
        }
    }

    /// Records the flight's messages into datagrams of at most the PMTU, fragmenting
    /// handshake messages that do not fit, and queues them. Every transmission uses fresh
    /// record sequence numbers.
    fn send_flight<C: CryptoProvider + ?Sized>(
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
    fn send_ready<C: CryptoProvider + ?Sized>(
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
#[cfg(feature = "record-carrier")]
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

/// Epoch-1 keys, both directions.
pub(crate) struct Epoch1 {
    pub write: RecordKeys,
    pub read: RecordKeys,
}

/// Epochs, sequence numbers, replay windows, connection IDs and record protection: what both
/// the handshake and the established connection need.
pub(crate) struct RecordLayer {
    pub aead: Aead,
    pub keys: Option<Epoch1>,
    pub read_epoch: u16,
    pub write_epoch: u16,
    pub write_seq: [u64; 2],
    pub replay: [ReplayWindow; 2],
    own_cid: [u8; MAX_CID],
    own_cid_len: u8,
    peer_cid: [u8; MAX_CID],
    peer_cid_len: u8,
}

impl RecordLayer {
    pub fn new(aead: Aead) -> Self {
        Self {
            aead,
            keys: None,
            read_epoch: 0,
            write_epoch: 0,
            write_seq: [0; 2],
            replay: [ReplayWindow::new(); 2],
            own_cid: [0; MAX_CID],
            own_cid_len: 0,
            peer_cid: [0; MAX_CID],
            peer_cid_len: 0,
        }
    }

    /// The connection ID the peer puts in its records to us (RFC 9146).
    pub fn own_cid(&self) -> &[u8] {
        &self.own_cid[..usize::from(self.own_cid_len)]
    }

    /// The connection ID this side puts in its records to the peer (RFC 9146).
    pub fn peer_cid(&self) -> &[u8] {
        &self.peer_cid[..usize::from(self.peer_cid_len)]
    }

    /// Sets the connection IDs (each at most [`MAX_CID`] bytes, checked by the decoder).
    pub fn set_cids(&mut self, own: &[u8], peer: &[u8]) -> Result<(), Error> {
        if own.len() > MAX_CID || peer.len() > MAX_CID {
            return Err(Error::Decode("connection_id"));
        }
        self.own_cid[..own.len()].copy_from_slice(own);
        self.own_cid_len = own.len() as u8;
        self.peer_cid[..peer.len()].copy_from_slice(peer);
        self.peer_cid_len = peer.len() as u8;
        Ok(())
    }

    /// Bytes a record of `epoch` adds around its plaintext.
    #[cfg(feature = "record-carrier")]
    pub fn overhead(&self, epoch: u16) -> usize {
        if epoch == 0 {
            HEADER_LEN
        } else {
            self.aead.overhead()
                + if self.peer_cid_len > 0 {
                    usize::from(self.peer_cid_len) + 1
                } else {
                    0
                }
        }
    }

    /// One record in `epoch` (0: plaintext; 1: protected) with the next sequence number.
    pub fn seal<C: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &C,
        ct: ContentType,
        epoch: u16,
        plain: &[u8],
        out: &mut [u8],
    ) -> Result<usize, Error> {
        let e = usize::from(epoch.min(1));
        let seq = self.write_seq[e];
        if seq > crate::record::MAX_SEQUENCE {
            return Err(Error::SequenceExhausted);
        }
        self.write_seq[e] += 1;
        if epoch == 0 {
            return plaintext_record(ct, seq, |w| w.bytes(plain), out);
        }
        let keys = self.keys.as_ref().ok_or(Error::NotEstablished)?;
        self.write_epoch = 1;
        if self.peer_cid_len > 0 {
            let cid = &self.peer_cid[..usize::from(self.peer_cid_len)];
            return protection::seal_cid(crypto, &keys.write, ct, 1, seq, cid, plain, out);
        }
        protection::seal(crypto, &keys.write, ct, 1, seq, plain, out)
    }

    /// Checks a received record (version, epoch, replay window, connection ID), removes its
    /// protection and moves the replay window. Returns the real content type, the epoch and
    /// the plaintext (in `buf`).
    pub fn open<'b, C: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &C,
        rec: &Record<'_>,
        buf: &'b mut [u8; MAX_DATAGRAM],
    ) -> Result<(ContentType, u16, &'b [u8]), Error> {
        let mut h = rec.header;
        if h.version != ProtocolVersion::DTLS_1_2 && h.version != ProtocolVersion::DTLS_1_0 {
            return Err(Error::BadRecordVersion(h.version.0));
        }
        // Only epochs this side holds read keys for: 0, and 1 once the peer's
        // ChangeCipherSpec arrived. Older and future epochs are dropped (RFC 6347 §4.1).
        if h.epoch > self.read_epoch || h.epoch > 1 {
            return Err(Error::UnknownEpoch(h.epoch));
        }
        self.replay[usize::from(h.epoch)].check(h.sequence)?;
        // With a connection ID of ours, protected records must carry it (RFC 9146 §4);
        // without one, no record may. Unauthenticated, so dropped like a bad MAC.
        let cid_record = h.content_type == ContentType::TLS12_CID;
        if cid_record != (h.epoch > 0 && self.own_cid_len > 0) {
            return Err(Error::BadRecordMac);
        }
        if cid_record && rec.cid != self.own_cid() {
            return Err(Error::BadRecordMac);
        }
        // Nothing this side sends is longer than a datagram it builds; a longer record is
        // unauthenticated yet (anyone can send one), so it is dropped, not fatal.
        let frag = buf
            .get_mut(..rec.fragment.len())
            .ok_or(Error::Unauthenticated("record longer than a datagram"))?;
        frag.copy_from_slice(rec.fragment);
        let plain: &[u8] = if h.epoch == 0 {
            frag
        } else {
            let keys = self.keys.as_ref().ok_or(Error::UnknownEpoch(1))?;
            if cid_record {
                let (real, plain) = protection::open_cid(crypto, &keys.read, &h, rec.cid, frag)?;
                h.content_type = real;
                plain
            } else {
                protection::open(crypto, &keys.read, &h, frag)?
            }
        };
        // Authenticated (or epoch 0): now the window may move.
        self.replay[usize::from(h.epoch)].accept(h.sequence);
        Ok((h.content_type, h.epoch, plain))
    }

    /// The fatal alert `e` warrants, as a record in the current write epoch.
    pub fn alert_record<C: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &C,
        e: &Error,
        out: &mut [u8; 64],
    ) -> Option<usize> {
        let desc = e.alert()?;
        let epoch = if self.write_epoch == 1 && self.keys.is_some() {
            1
        } else {
            0
        };
        self.seal(
            crypto,
            ContentType::ALERT,
            epoch,
            &[AlertLevel::FATAL.0, desc.0],
            out,
        )
        .ok()
    }
}

/// Reads an alert record: a fatal alert or close_notify ends the connection (returned as the
/// error it records); a warning is ignored.
pub(crate) fn read_alert(plain: &[u8]) -> Result<Option<Error>, Error> {
    let mut r = Reader::new(plain);
    let level = AlertLevel(r.u8("alert")?);
    let desc = AlertDescription(r.u8("alert")?);
    r.finish("alert")?;
    Ok(
        (level == AlertLevel::FATAL || desc == AlertDescription::CLOSE_NOTIFY)
            .then_some(Error::PeerAlert(desc.0)),
    )
}

/// The next handshake message_seq; a handshake never needs 2^16 messages.
pub(crate) fn next_seq(seq: u16) -> Result<u16, Error> {
    seq.checked_add(1).ok_or(Error::Decode("message_seq"))
}

/// A connection in its handshake.
#[cfg(feature = "record-carrier")]
pub(crate) struct Handshaking {
    rl: RecordLayer,
    /// `None` only after a failure (the state was consumed by a transition that failed).
    state: Option<Hs>,
    io: HsIo,
    out: RecordIo,
    next_recv_msg: u16,
    reassembler: Reassembler<MAX_MESSAGE>,
    ahead: Ahead,
    failed: Option<Error>,
    dropped: u32,
}

/// No heap, so no boxing: a caller that wants the established state's smaller size takes
/// it out with [`Connection::into_traffic`].
#[cfg(feature = "record-carrier")]
#[allow(clippy::large_enum_variant)]
enum Inner {
    Handshaking(Handshaking),
    Established(TrafficCore),
}

/// A DTLS 1.2 connection, client or server, from the first flight to close. `T` says what
/// this side trusts. Once established it holds only a [`TrafficCore`]; take it out with
/// [`Connection::into_traffic`] to keep the smaller [`Traffic`] instead.
#[cfg(feature = "record-carrier")]
pub struct Connection<C, T = NoTrust> {
    crypto: C,
    trust: T,
    config: Config,
    inner: Inner,
}

#[cfg(feature = "record-carrier")]
impl<C: CryptoProvider, T: Trust> Connection<C, T> {
    fn handshaking(crypto: C, trust: T, config: Config, rl: RecordLayer) -> Self {
        Self {
            crypto,
            trust,
            config,
            inner: Inner::Handshaking(Handshaking {
                rl,
                state: None,
                io: HsIo::new(),
                out: RecordIo::new(&config),
                next_recv_msg: 0,
                reassembler: Reassembler::new(),
                ahead: Ahead::new(),
                failed: None,
                dropped: 0,
            }),
        }
    }

    /// Starts a client handshake; the first ClientHello is queued. `trust` decides whether
    /// the server's raw public key or certificate chain is acceptable.
    pub fn connect(
        crypto: C,
        trust: T,
        config: Config,
        rng: &mut dyn Rng,
        credentials: Credentials<'_>,
        now: Instant,
    ) -> Result<Self, Error> {
        Self::start_client(crypto, trust, config, rng, credentials, None, now)
    }

    /// Like [`Connection::connect`], asking to resume `session` (abbreviated handshake: no
    /// key exchange, no signatures). If the server no longer has it, the handshake falls back
    /// to a full one with `credentials`.
    pub fn resume(
        crypto: C,
        trust: T,
        config: Config,
        rng: &mut dyn Rng,
        credentials: Credentials<'_>,
        session: &Session,
        now: Instant,
    ) -> Result<Self, Error> {
        Self::start_client(crypto, trust, config, rng, credentials, Some(session), now)
    }

    fn start_client(
        crypto: C,
        trust: T,
        config: Config,
        rng: &mut dyn Rng,
        credentials: Credentials<'_>,
        session: Option<&Session>,
        now: Instant,
    ) -> Result<Self, Error> {
        let mut c = Self::handshaking(crypto, trust, config, RecordLayer::new(Aead::Ccm8));
        let Inner::Handshaking(h) = &mut c.inner else {
            return Err(Error::NotEstablished);
        };
        let mut cx = Cx {
            crypto: &c.crypto,
            trust: &c.trust,
            config: &c.config,
            rl: &mut h.rl,
            io: &mut h.io,
        };
        let first = client::start(&mut cx, rng, credentials, session)?;
        h.out
            .send_ready(&c.crypto, &mut h.rl, &mut h.io, (&c.config, now))?;
        h.state = Some(Hs::ExpectHelloVerifyOrServerHello(first));
        Ok(c)
    }

    /// Creates the server side for a datagram whose ClientHello [`crate::CookieKey::respond`]
    /// accepted (the [`CookieVerified`] it returned), picks the suite, and queues the
    /// server's flight.
    #[allow(clippy::too_many_arguments)]
    pub fn accept(
        crypto: C,
        trust: T,
        config: Config,
        offer: &ServerCredentials<'_>,
        rng: &mut dyn Rng,
        cookie: CookieVerified,
        datagram: &[u8],
        now: Instant,
    ) -> Result<Self, Error> {
        let mut c = Self::handshaking(crypto, trust, config, RecordLayer::new(Aead::Ccm8));
        let Inner::Handshaking(h) = &mut c.inner else {
            return Err(Error::NotEstablished);
        };
        let mut cx = Cx {
            crypto: &c.crypto,
            trust: &c.trust,
            config: &c.config,
            rl: &mut h.rl,
            io: &mut h.io,
        };
        let (next, next_recv_msg) = server::accept(&mut cx, offer, rng, cookie, datagram)?;
        h.out
            .send_ready(&c.crypto, &mut h.rl, &mut h.io, (&c.config, now))?;
        h.next_recv_msg = next_recv_msg;
        h.state = Some(next);
        Ok(c)
    }

    /// The state's name.
    pub fn state(&self) -> State {
        match &self.inner {
            Inner::Handshaking(h) => match (&h.failed, &h.state) {
                (Some(e), _) => State::Failed(*e),
                (None, Some(s)) => s.name(),
                (None, None) => State::Failed(Error::NotEstablished),
            },
            Inner::Established(t) => t.state(),
        }
    }

    pub fn is_established(&self) -> bool {
        self.state() == State::Established
    }

    /// Records dropped: bad MAC, replays, unknown epochs, malformed, or a full queue.
    pub fn dropped(&self) -> u32 {
        match &self.inner {
            Inner::Handshaking(h) => h.dropped,
            Inner::Established(t) => t.dropped,
        }
    }

    /// Why the connection ended (our error or the peer's fatal alert / close_notify), if it
    /// did. A received alert is not an error of `handle_datagram`; callers check here.
    pub fn failure(&self) -> Option<Error> {
        match self.state() {
            State::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// The established connection alone, without the handshake's buffers (or `self` back if
    /// the handshake is not complete).
    #[allow(clippy::result_large_err)]
    pub fn into_traffic(self) -> Result<Traffic<C>, Self> {
        match self.inner {
            Inner::Established(core) => Ok(Traffic::new(self.crypto, core)),
            inner => Err(Self { inner, ..self }),
        }
    }

    /// The established state, if the handshake is complete.
    pub fn traffic(&self) -> Option<&TrafficCore> {
        match &self.inner {
            Inner::Established(t) => Some(t),
            Inner::Handshaking(_) => None,
        }
    }

    /// Whether this connection was an abbreviated handshake that resumed a session.
    pub fn resumed(&self) -> bool {
        self.traffic().is_some_and(|t| t.resumed())
    }

    /// The session a later handshake may resume, once established with a session ID.
    pub fn session(&self) -> Option<Session> {
        self.traffic()?.session()
    }

    /// The PSK identity the peer authenticated with, once established (empty otherwise).
    pub fn psk_identity(&self) -> &[u8] {
        self.traffic().map_or(&[], |t| t.peer().psk_identity())
    }

    /// The peer's public key, once it proved possession and the handshake completed.
    pub fn peer_public_key(&self) -> Option<&PublicKey> {
        self.traffic()?.peer().public_key()
    }

    /// The peer's RSA certificate key (feature `rsa`), once it proved possession and the
    /// handshake completed.
    #[cfg(feature = "rsa")]
    pub fn peer_rsa_public_key(&self) -> Option<&sigil_crypto::RsaPublicKey> {
        self.traffic()?.peer().rsa_public_key()
    }

    /// The negotiated cipher suite, once established.
    pub fn cipher_suite(&self) -> Option<crate::wire::CipherSuite> {
        self.traffic().map(|t| t.suite())
    }

    /// The connection ID the peer puts in its records to us (RFC 9146), if negotiated.
    pub fn connection_id(&self) -> &[u8] {
        match &self.inner {
            Inner::Handshaking(h) => h.rl.own_cid(),
            Inner::Established(t) => t.connection_id(),
        }
    }

    /// Ends an established connection with a close_notify alert (RFC 5246 §7.2.1), queued
    /// for sending; afterwards the connection sends and accepts nothing.
    pub fn close(&mut self) -> Result<(), Error> {
        match &mut self.inner {
            Inner::Established(t) => t.close(&self.crypto),
            Inner::Handshaking(_) => Err(Error::NotEstablished),
        }
    }

    /// The next datagram to send, if any, as it leaves at `now`: a flight's retransmission
    /// timer runs from the moment its first datagram is sent (RFC 6347 §4.2.4), not from the
    /// call that built it (on a slow device the computation between the two can take longer
    /// than the timeout itself).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        match &mut self.inner {
            Inner::Handshaking(h) => {
                let n = h.out.queue.pop(out)?;
                if h.failed.is_none() {
                    h.out.timer.sent(now);
                }
                Some(n)
            }
            Inner::Established(t) => t.poll_transmit(out),
        }
    }

    /// When to call [`Connection::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.inner {
            Inner::Handshaking(h) if h.failed.is_none() => h.out.timer.deadline,
            _ => None,
        }
    }

    /// Received application data, one record at a time, in arrival order.
    pub fn poll_app_data(&mut self, out: &mut [u8]) -> Option<usize> {
        match &mut self.inner {
            Inner::Established(t) => t.poll_app_data(out),
            Inner::Handshaking(_) => None,
        }
    }

    /// Retransmits the last flight with a doubled timeout (RFC 6347 §4.2.4.1).
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        let Inner::Handshaking(h) = &mut self.inner else {
            return Ok(());
        };
        if h.failed.is_some() {
            return Ok(());
        }
        match h.out.timer.deadline {
            Some(t) if now >= t => {}
            _ => return Ok(()),
        }
        if h.out.timer.retransmissions >= self.config.max_retransmissions {
            return h.fail(&self.crypto, Error::HandshakeTimeout);
        }
        h.out.timer.retransmissions += 1;
        h.out.timer.timeout = (h.out.timer.timeout * 2).min(self.config.max_timeout);
        h.out.send_flight(
            &self.crypto,
            &mut h.rl,
            &h.io.flight,
            (&self.config, now),
            true,
        )
    }

    /// Protects `data` as one application-data record and queues it.
    pub fn send(&mut self, data: &[u8]) -> Result<(), Error> {
        match &mut self.inner {
            Inner::Established(t) => t.send(&self.crypto, data),
            Inner::Handshaking(_) => Err(Error::NotEstablished),
        }
    }

    /// Handles one received datagram. Records that fail checks are dropped (and counted);
    /// a handshake error queues a fatal alert and fails the connection.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) -> Result<(), Error> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let cid_len = self.connection_id().len();
        for rec in Records::with_cid(datagram, cid_len) {
            match &mut self.inner {
                Inner::Established(t) => match rec {
                    Ok(rec) => t.handle_record(&self.crypto, &rec)?,
                    Err(_) => {
                        t.dropped += 1;
                        break;
                    }
                },
                Inner::Handshaking(h) => {
                    let Ok(rec) = rec else {
                        h.dropped += 1;
                        break;
                    };
                    let parts = (&self.crypto, &self.trust, &self.config);
                    if let Some(done) = h.handle_record(parts, now, &rec)? {
                        let core = TrafficCore::new(
                            &mut h.rl,
                            &mut h.out.queue,
                            done,
                            h.next_recv_msg,
                            h.dropped,
                            &self.config,
                        );
                        self.inner = Inner::Established(core);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(feature = "record-carrier")]
impl Handshaking {
    /// Fails the handshake with a fatal alert (sent in the current write epoch).
    fn fail<C: CryptoProvider>(&mut self, crypto: &C, e: Error) -> Result<(), Error> {
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

    /// One record. `Ok(Some(_))` when the handshake just completed.
    fn handle_record<C: CryptoProvider, T: Trust>(
        &mut self,
        (crypto, trust, config): (&C, &T, &Config),
        now: Instant,
        rec: &Record<'_>,
    ) -> Result<Option<crate::traffic::Established>, Error> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let mut buf = [0u8; MAX_DATAGRAM];
        let (ct, epoch, plain) = match self.rl.open(crypto, rec, &mut buf) {
            Ok(x) => x,
            Err(e) if e.alert().is_none() => {
                self.dropped += 1;
                return Ok(None);
            }
            Err(e) => return self.fail(crypto, e).map(|()| None),
        };
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
                            match self.handle_fragment((crypto, trust, config), now, epoch, &f) {
                                Ok(d) => done = d,
                                Err(e) => return self.error(crypto, e),
                            }
                        }
                        Err(e) => return self.error(crypto, forged(e)),
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
        match r {
            Ok(()) => Ok(None),
            Err(e) => self.error(crypto, e),
        }
    }

    /// An error from a record: dropped when it warrants no alert, else fatal.
    fn error<C: CryptoProvider>(
        &mut self,
        crypto: &C,
        e: Error,
    ) -> Result<Option<crate::traffic::Established>, Error> {
        if e.alert().is_none() && self.state.is_some() {
            self.dropped += 1;
            return Ok(None);
        }
        self.fail(crypto, e).map(|()| None)
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

/// How a suite authenticates and agrees on keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kx {
    /// Pre-shared key only (RFC 4279).
    Psk,
    /// Ephemeral ECDH authenticated by a pre-shared key (RFC 5489, RFC 8442).
    EcdhePsk,
    /// Ephemeral ECDH signed with ECDSA/EdDSA keys (RFC 8422).
    EcdheEcdsa,
    /// Static ECDH: the client's ephemeral key with the server's P-256 key, which its
    /// Certificate carries (RFC 4492 §2.1 ECDH_ECDSA); no ServerKeyExchange.
    #[cfg(feature = "static-ecdh")]
    EcdhEcdsa,
    /// Ephemeral ECDH signed with RSA keys (RFC 8422 §2.2 ECDHE_RSA).
    #[cfg(feature = "rsa")]
    EcdheRsa,
    /// RSA key transport (RFC 5246 §7.4.7.1): no ServerKeyExchange, the client encrypts the
    /// premaster secret to the server's certificate key.
    #[cfg(feature = "rsa-kx")]
    Rsa,
}

impl Kx {
    /// The server authenticates with a raw public key or certificate (and may ask for the
    /// client's): the ECDHE-ECDSA, static ECDH and RSA exchanges.
    pub(crate) fn with_certificates(self) -> bool {
        match self {
            Kx::Psk | Kx::EcdhePsk => false,
            Kx::EcdheEcdsa => true,
            #[cfg(feature = "static-ecdh")]
            Kx::EcdhEcdsa => true,
            #[cfg(feature = "rsa")]
            Kx::EcdheRsa => true,
            #[cfg(feature = "rsa-kx")]
            Kx::Rsa => true,
        }
    }

    /// The server's certificate holds an RSA key: ECDHE-RSA and RSA key transport.
    pub(crate) fn with_rsa(self) -> bool {
        #[cfg(feature = "rsa")]
        if self == Kx::EcdheRsa {
            return true;
        }
        self.is_rsa_transport()
    }

    /// RSA key transport: the premaster secret is encrypted to the server's key.
    pub(crate) fn is_rsa_transport(self) -> bool {
        #[cfg(feature = "rsa-kx")]
        if self == Kx::Rsa {
            return true;
        }
        false
    }

    /// The server's certificate key is its key-agreement key: static ECDH.
    pub(crate) fn is_static_ecdh(self) -> bool {
        #[cfg(feature = "static-ecdh")]
        if self == Kx::EcdhEcdsa {
            return true;
        }
        false
    }
}

pub(crate) fn kx_of(s: crate::wire::CipherSuite) -> Kx {
    use crate::wire::CipherSuite;
    match s {
        CipherSuite::TLS_PSK_WITH_AES_128_CCM_8 => Kx::Psk,
        CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 => Kx::EcdhePsk,
        #[cfg(feature = "static-ecdh")]
        CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8 => Kx::EcdhEcdsa,
        #[cfg(feature = "rsa")]
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Kx::EcdheRsa,
        #[cfg(feature = "rsa-kx")]
        CipherSuite::TLS_RSA_WITH_AES_128_CCM_8 => Kx::Rsa,
        _ => Kx::EcdheEcdsa,
    }
}

pub(crate) fn aead_of(s: crate::wire::CipherSuite) -> Aead {
    if s == crate::wire::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        || s == crate::wire::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    {
        Aead::Gcm
    } else {
        Aead::Ccm8
    }
}

/// This side's own certificate chain (leaf first) as the `certificate_list` of a Certificate
/// message carries it.
#[derive(Clone)]
pub(crate) struct OwnChain {
    buf: [u8; crate::flight::MAX_CHAIN],
    len: usize,
}

impl OwnChain {
    pub const EMPTY: Self = Self {
        buf: [0; crate::flight::MAX_CHAIN],
        len: 0,
    };

    /// Keeps `chain` as `ASN.1Cert` entries.
    #[cfg(feature = "x509")]
    pub fn new(chain: &[&[u8]]) -> Result<Self, Error> {
        let mut c = Self::EMPTY;
        let mut w = Writer::new(&mut c.buf);
        for cert in chain {
            w.u24(cert.len() as u32)
                .map_err(|_| Error::BufferTooSmall)?;
            w.bytes(cert).map_err(|_| Error::BufferTooSmall)?;
        }
        c.len = w.len();
        Ok(c)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<C: CryptoProvider, T> Cx<'_, C, T> {
    /// Certificate with this side's X.509 chain, or its raw public key (RFC 7250 §3: one
    /// `ASN.1_subjectPublicKeyInfo<1..2^24-1>`).
    pub fn queue_certificate(
        &mut self,
        x509: Option<&OwnChain>,
        key: &sigil_crypto::SecretKey,
    ) -> Result<(), Error> {
        if let Some(chain) = x509 {
            let mut body = [0u8; 3 + crate::flight::MAX_CHAIN];
            let n = chain.len;
            body[..3].copy_from_slice(&(n as u32).to_be_bytes()[1..]);
            body[3..3 + n].copy_from_slice(&chain.buf[..n]);
            return self
                .io
                .queue_handshake(HandshakeType::CERTIFICATE, &body[..3 + n]);
        }
        let public = self.crypto.public_key(key)?;
        let mut body = [0u8; 3 + 91];
        let mut w = Writer::new(&mut body);
        w.u24(crate::spki::spki_len(&public) as u32)?;
        crate::spki::write_spki(&public, &mut w)?;
        let n = w.len();
        self.io
            .queue_handshake(HandshakeType::CERTIFICATE, &body[..n])
    }

    /// This side's X.509 chain as a Certificate message (RFC 5246 §7.4.2).
    #[cfg(feature = "rsa")]
    pub fn queue_chain(&mut self, chain: &OwnChain) -> Result<(), Error> {
        let mut body = [0u8; 3 + crate::flight::MAX_CHAIN];
        let n = chain.len;
        body[..3].copy_from_slice(&(n as u32).to_be_bytes()[1..]);
        body[3..3 + n].copy_from_slice(&chain.buf[..n]);
        self.io
            .queue_handshake(HandshakeType::CERTIFICATE, &body[..3 + n])
    }

    /// The extended master secret (RFC 7627 §4) from the RSA-transported premaster secret
    /// (RFC 5246 §7.4.7.1), over the transcript through ClientKeyExchange.
    #[cfg(feature = "rsa-kx")]
    pub fn master_secret_rsa(&self, premaster: &[u8; 48]) -> Result<[u8; 48], Error> {
        let session_hash = self.io.transcript.hash(self.crypto);
        Ok(keys::extended_master_secret(
            self.crypto,
            premaster,
            &session_hash,
        ))
    }

    /// The extended master secret (RFC 7627 §4) from the PSK or the ECDH shared secret, over
    /// the transcript through ClientKeyExchange.
    pub fn master_secret(
        &self,
        kx: Kx,
        psk: Option<&crate::trust::Psk>,
        ecdh: Option<&[u8; 32]>,
    ) -> Result<[u8; 48], Error> {
        let mut pre = [0u8; 4 + 2 * keys::MAX_PSK_LEN];
        let n = match (kx, ecdh, psk) {
            // RFC 8422 §5.10 (RFC 4492 §5.10 for static ECDH): the x-coordinate Z.
            (kx, Some(z), _) if kx.with_certificates() => {
                pre[..32].copy_from_slice(z);
                32
            }
            // RFC 5489 §2: other_secret<0..2^16-1> = Z, then psk<0..2^16-1>.
            (Kx::EcdhePsk, Some(z), Some(psk)) => {
                let mut w = Writer::new(&mut pre);
                w.vec16(z)?;
                w.vec16(psk.key())?;
                w.len()
            }
            (Kx::Psk, None, Some(psk)) => keys::psk_premaster(psk.key(), &mut pre)?,
            _ => return Err(Error::UnexpectedHandshake(16)),
        };
        let session_hash = self.io.transcript.hash(self.crypto);
        Ok(keys::extended_master_secret(
            self.crypto,
            &pre[..n],
            &session_hash,
        ))
    }
}

#[cfg(all(test, feature = "record-carrier"))]
mod tests {
    extern crate std;
    use super::*;
    use core::mem::size_of;

    /// What a server keeps per session once the handshake is over must not carry the
    /// handshake's buffers: the established state is smaller than the handshaking connection
    /// by more than the transcript alone (docs/benchmarks.md lists both sizes).
    #[test]
    fn the_established_state_is_smaller_than_the_handshake() {
        let handshaking = size_of::<Connection<(), NoTrust>>();
        let established = size_of::<Traffic<()>>();
        std::println!("handshaking {handshaking} bytes, established {established} bytes");
        assert!(established < handshaking);
        assert!(established < handshaking - MAX_TRANSCRIPT);
    }
}
