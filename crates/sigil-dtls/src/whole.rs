//! The handshake over a carrier that exchanges whole flights (the DTLS-as-a-CoAP-resource
//! design: `sigil-dtls-coap`).
//!
//! The same handshake states as [`crate::Connection`] ([`crate::client`], [`crate::server`],
//! [`crate::finished`]), the same transcript and the same record protection, but each flight
//! travels as one payload: a sequence of DTLS records, each holding whole handshake messages
//! (or the ChangeCipherSpec; the Finished protected in epoch 1 exactly as over UDP). The
//! carrier brings reliability (Confirmable retransmission, duplicate detection) and
//! fragmentation (block-wise transfer), so this type holds no send queue, no fragment
//! reassembly, no messages kept ahead and no retransmission timer, and a build without the
//! `record-carrier` feature links none of that code.
//!
//! No clock: the carrier's retransmission timers are its own (X.509 validity takes its time
//! from the trust value, as for the record carrier).
//!
//! What arrives is strict: every record must open, every handshake message must be whole and
//! the one expected next; anything else fails the handshake (a carrier that hands over a
//! flight twice is broken, since it promises to deliver each once). Once the peer's Finished
//! verified, [`WholeFlights::into_traffic`] gives the same [`Traffic`] as the record carrier:
//! application data then travels as ordinary DTLS records with the session's keys.

use crate::conn::{read_alert, Config, Cx, Hs, HsIo, Next, RecordLayer, State};
use crate::cookie::CookieVerified;
use crate::flight::{Flight, Queue, MAX_DATAGRAM, MAX_FLIGHT};
use crate::handshake::Fragment;
use crate::protection::Aead;
use crate::record::Records;
use crate::traffic::{Established, Traffic, TrafficCore};
use crate::trust::{Credentials, NoTrust, ServerCredentials, Trust};
use crate::wire::ContentType;
use crate::{client, server, Error};
use sigil_crypto::{CryptoProvider, Rng};

/// Room for a flight written as records: its messages plus one record header and the largest
/// protection overhead per message (a flight holds at most six).
pub const MAX_FLIGHT_RECORDS: usize = MAX_FLIGHT + 6 * 64;

/// A handshake in progress.
struct Handshaking {
    rl: RecordLayer,
    /// `None` only after a failure.
    state: Option<Hs>,
    io: HsIo,
    next_recv_msg: u16,
    failed: Option<Error>,
}

#[allow(clippy::large_enum_variant)]
enum Inner {
    Handshaking(Handshaking),
    Established(TrafficCore),
}

/// One DTLS handshake, client or server, whose flights a carrier exchanges whole; afterwards
/// the established [`Traffic`].
pub struct WholeFlights<C, T = NoTrust> {
    crypto: C,
    trust: T,
    config: Config,
    inner: Inner,
}

impl<C: CryptoProvider, T: Trust> WholeFlights<C, T> {
    fn new(crypto: C, trust: T, config: Config) -> Self {
        Self {
            crypto,
            trust,
            config,
            inner: Inner::Handshaking(Handshaking {
                rl: RecordLayer::new(Aead::Ccm8),
                state: None,
                io: HsIo::new(),
                next_recv_msg: 0,
                failed: None,
            }),
        }
    }

    /// Starts a client handshake: the ClientHello flight is written to `out` (its length is
    /// returned), the payload of the first request.
    pub fn connect(
        crypto: C,
        trust: T,
        config: Config,
        rng: &mut dyn Rng,
        credentials: Credentials<'_>,
        out: &mut [u8],
    ) -> Result<(Self, usize), Error> {
        let mut c = Self::new(crypto, trust, config);
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
        let first = client::start(&mut cx, rng, credentials, None)?;
        let n = write_ready(&c.crypto, &mut h.rl, &mut h.io, out)?.unwrap_or(0);
        h.state = Some(Hs::ExpectHelloVerifyOrServerHello(first));
        Ok((c, n))
    }

    /// Creates the server side for a flight whose ClientHello [`crate::CookieKey::respond`]
    /// accepted (the proof it returned); the server's flight is written to `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn accept(
        crypto: C,
        trust: T,
        config: Config,
        offer: &ServerCredentials<'_>,
        rng: &mut dyn Rng,
        cookie: CookieVerified,
        flight: &[u8],
        out: &mut [u8],
    ) -> Result<(Self, usize), Error> {
        let mut c = Self::new(crypto, trust, config);
        let Inner::Handshaking(h) = &mut c.inner else {
            return Err(Error::NotEstablished);
        };
        // The ClientHello alone: a carrier flight from the client opens with it and carries
        // nothing else.
        let (_, rest) = crate::record::Record::parse(flight)?;
        if !rest.is_empty() {
            return Err(Error::Decode("records after the ClientHello"));
        }
        let mut cx = Cx {
            crypto: &c.crypto,
            trust: &c.trust,
            config: &c.config,
            rl: &mut h.rl,
            io: &mut h.io,
        };
        let (next, next_recv_msg) = server::accept(&mut cx, offer, rng, cookie, flight)?;
        let n = write_ready(&c.crypto, &mut h.rl, &mut h.io, out)?.unwrap_or(0);
        h.next_recv_msg = next_recv_msg;
        h.state = Some(next);
        Ok((c, n))
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

    /// Why the handshake ended, if it failed.
    pub fn failure(&self) -> Option<Error> {
        match self.state() {
            State::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// The established state, if the handshake is complete.
    pub fn traffic(&self) -> Option<&TrafficCore> {
        match &self.inner {
            Inner::Established(t) => Some(t),
            Inner::Handshaking(_) => None,
        }
    }

    /// The established connection alone (or `self` back if the handshake is not complete).
    #[allow(clippy::result_large_err)]
    pub fn into_traffic(self) -> Result<Traffic<C>, Self> {
        match self.inner {
            Inner::Established(core) => Ok(Traffic::new(self.crypto, core)),
            inner => Err(Self { inner, ..self }),
        }
    }

    /// The established connection alone, or `None` if the handshake is not complete; unlike
    /// [`WholeFlights::into_traffic`] it never hands the handshake back, so nothing but the
    /// established state is moved.
    pub fn into_established(self) -> Option<Traffic<C>> {
        match self.inner {
            Inner::Established(core) => Some(Traffic::new(self.crypto, core)),
            Inner::Handshaking(_) => None,
        }
    }

    /// Takes one whole flight of the peer. This side's answering flight, if the handshake
    /// calls for one, is written to `out` and its length returned (0: none, as for the
    /// client after the server's final flight). Any error fails the handshake for good.
    pub fn handle_flight(&mut self, flight: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        let Inner::Handshaking(h) = &mut self.inner else {
            return Err(Error::UnexpectedMessage("a flight after the handshake"));
        };
        if let Some(e) = h.failed {
            return Err(e);
        }
        let parts = (&self.crypto, &self.trust, &self.config);
        match h.intake(parts, flight, out) {
            Ok((n, Some(mut done))) => {
                // The final flight travels in the carrier's response: nothing is resent as
                // records afterwards.
                done.final_flight = None;
                let core = TrafficCore::new(
                    &mut h.rl,
                    &mut Queue::<0>::new(),
                    done,
                    h.next_recv_msg,
                    0,
                    &self.config,
                );
                self.inner = Inner::Established(core);
                Ok(n)
            }
            Ok((n, None)) => Ok(n),
            Err(e) => {
                h.failed = Some(e);
                h.state = None;
                Err(e)
            }
        }
    }
}

impl Handshaking {
    /// Every record of one flight, in order. Returns the answer's length and, when the peer's
    /// Finished verified, what the established state is built from.
    fn intake<C: CryptoProvider, T: Trust>(
        &mut self,
        (crypto, trust, config): (&C, &T, &Config),
        flight: &[u8],
        out: &mut [u8],
    ) -> Result<(usize, Option<Established>), Error> {
        if flight.is_empty() {
            return Err(Error::Decode("empty flight"));
        }
        let mut answer = None;
        let mut done = None;
        let mut buf = [0u8; MAX_DATAGRAM];
        for rec in Records::with_cid(flight, self.rl.own_cid().len()) {
            let rec = rec?;
            if done.is_some() {
                return Err(Error::UnexpectedMessage("records after the Finished"));
            }
            let (ct, epoch, plain) = self.rl.open(crypto, &rec, &mut buf)?;
            match ct {
                ContentType::HANDSHAKE => {
                    if epoch < self.rl.read_epoch {
                        return Err(Error::Unauthenticated(
                            "plaintext handshake message after the peer's ChangeCipherSpec",
                        ));
                    }
                    let mut rest = plain;
                    while !rest.is_empty() {
                        let (f, next) = Fragment::parse(rest)?;
                        rest = next;
                        if done.is_some() {
                            return Err(Error::UnexpectedMessage("messages after the Finished"));
                        }
                        // No reassembly here: the carrier delivers messages whole.
                        if !f.is_whole() {
                            return Err(Error::Decode("a fragmented handshake message"));
                        }
                        if f.message_seq != self.next_recv_msg {
                            return Err(Error::UnexpectedHandshake(f.msg_type.0));
                        }
                        self.next_recv_msg = crate::conn::next_seq(self.next_recv_msg)?;
                        let state = self.state.take().ok_or(Error::NotEstablished)?;
                        let mut cx = Cx {
                            crypto,
                            trust,
                            config,
                            rl: &mut self.rl,
                            io: &mut self.io,
                        };
                        let next = state.handle(&f, epoch, &mut cx)?;
                        if let Some(n) = write_ready(crypto, &mut self.rl, &mut self.io, out)? {
                            // One answer per flight: a second would mean the peer's flight
                            // held two of its flights.
                            if answer.replace(n).is_some() {
                                return Err(Error::UnexpectedMessage("two flights in one"));
                            }
                        }
                        match next {
                            Next::Hs(s) => self.state = Some(s),
                            Next::Traffic(d) => done = Some(d),
                        }
                    }
                }
                ContentType::CHANGE_CIPHER_SPEC => {
                    if plain != [1] {
                        return Err(Error::Decode("ChangeCipherSpec"));
                    }
                    // Only where the handshake expects it (the CVE-2017-7243 class).
                    match self.state.take() {
                        Some(Hs::ExpectChangeCipherSpec(s)) if epoch == 0 => {
                            self.rl.read_epoch = 1;
                            self.state = Some(Hs::ExpectFinished(s.handle_ccs()));
                        }
                        _ => return Err(Error::UnexpectedChangeCipherSpec),
                    }
                }
                ContentType::ALERT => {
                    return Err(read_alert(plain)?
                        .unwrap_or(Error::UnexpectedMessage("a warning alert in a flight")));
                }
                ContentType::APPLICATION_DATA => {
                    return Err(Error::UnexpectedMessage(
                        "application data before the handshake completed",
                    ))
                }
                _ => return Err(Error::UnexpectedMessage("unknown content type")),
            }
        }
        if done.is_none() && answer.is_none() {
            // A flight ends where this side answers (or, for the final flight, with the
            // Finished): one that stops short left the handshake waiting for nothing.
            return Err(Error::UnexpectedMessage("an incomplete flight"));
        }
        Ok((answer.unwrap_or(0), done))
    }
}

/// Writes the flight a transition marked ready, if any, as records into `out`: one record per
/// message, each message whole.
fn write_ready<C: CryptoProvider + ?Sized>(
    crypto: &C,
    rl: &mut RecordLayer,
    io: &mut HsIo,
    out: &mut [u8],
) -> Result<Option<usize>, Error> {
    if !core::mem::take(&mut io.flight_ready) {
        return Ok(None);
    }
    write_flight(crypto, rl, &io.flight, out).map(Some)
}

fn write_flight<C: CryptoProvider + ?Sized>(
    crypto: &C,
    rl: &mut RecordLayer,
    flight: &Flight,
    out: &mut [u8],
) -> Result<usize, Error> {
    let mut used = 0;
    for m in flight.msgs.iter().flatten() {
        let bytes = flight
            .buf
            .get(m.start..m.start + m.len)
            .ok_or(Error::BufferTooSmall)?;
        let room = out.get_mut(used..).ok_or(Error::BufferTooSmall)?;
        used += rl.seal(crypto, m.content_type, m.epoch, bytes, room)?;
    }
    Ok(used)
}
