//! [`Connection`]: the public API of the record carrier, for both roles, from the first flight
//! to close.

use super::record_carrier::{Handshaking, RecordIo};
use super::{Config, Cx, Hs, HsIo, RecordLayer, State};
use crate::cookie::CookieVerified;
use crate::flight::Ahead;
use crate::handshake::Reassembler;
use crate::protection::Aead;
use crate::record::Records;
use crate::traffic::{Received, Session, Took, Traffic, TrafficCore};
use crate::trust::{Credentials, NoTrust, ServerCredentials, Trust};
use crate::{client, server, Error};
use sigil_crypto::{CryptoProvider, PublicKey, Rng};
use sigil_time::Instant;

/// No heap, so no boxing: a caller that wants the established state's smaller size takes
/// it out with [`Connection::into_traffic`].
#[allow(clippy::large_enum_variant)]
enum Inner {
    Handshaking(Handshaking),
    Established(TrafficCore),
}

/// A DTLS 1.2 connection, client or server, from the first flight to close. `T` says what
/// this side trusts. Once established it holds only a [`TrafficCore`]; take it out with
/// [`Connection::into_traffic`] to keep the smaller [`Traffic`] instead.
pub struct Connection<C, T = NoTrust> {
    crypto: C,
    trust: T,
    config: Config,
    inner: Inner,
}

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
    /// a handshake error queues a fatal alert and fails the connection. Says what the
    /// datagram's records came to ([`Received`]): whether they authenticated.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) -> Result<Received, Error> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let mut received = Received::default();
        let cid_len = self.connection_id().len();
        for rec in Records::with_cid(datagram, cid_len) {
            match &mut self.inner {
                Inner::Established(t) => match rec {
                    Ok(rec) => received.count(t.handle_record(&self.crypto, &rec)?),
                    Err(_) => {
                        t.dropped += 1;
                        received.count(Took::Dropped);
                        break;
                    }
                },
                Inner::Handshaking(h) => {
                    let Ok(rec) = rec else {
                        h.dropped += 1;
                        received.count(Took::Dropped);
                        break;
                    };
                    let parts = (&self.crypto, &self.trust, &self.config);
                    let (took, done) = h.handle_record(parts, now, &rec)?;
                    received.count(took);
                    if let Some(done) = done {
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
        Ok(received)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::flight::MAX_TRANSCRIPT;
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
