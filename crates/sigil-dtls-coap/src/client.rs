//! The client role: one DTLS handshake over CoAP requests, one Confirmable request at a time
//! (RFC 7252 §4.7: NSTART 1) in the message core's request table
//! ([`sigil_coap::exchange::client`]): matched by message ID and token, retransmitted with
//! exponential back-off until its response arrives (§4.2), the timer started when the request
//! first leaves. The server piggybacks its responses; a separate one after an Empty ACK is
//! taken too (§5.2.2). Flights larger than the block size go with Block1, in the server's
//! size from the next block on if its 2.31 asks for a smaller one (RFC 7959 §2.5); responses
//! larger than the server's block size are fetched with Block2 from the session resource
//! (`GET /dtls/<id>`), whose representation is the server's latest flight. The block-wise
//! state is the message core's ([`sigil_coap::exchange::blockwise`]).

use crate::{parse_id, Error, MAX_DATAGRAM, MAX_FLIGHT, PATH};
use sigil_coap::exchange::blockwise::{BlockwiseError, Reassembly, Sender};
use sigil_coap::exchange::client::{self, Incoming, NewRequest, StartError};
use sigil_coap::exchange::Token;
use sigil_coap::message::option;
use sigil_coap::{BlockOption, Code, Message, MessageBuilder, MessageType, TransmissionParameters};
use sigil_crypto::{CryptoProvider, Rng};
use sigil_dtls::{Config, Credentials, Traffic, Trust, WholeFlights};
use sigil_time::Instant;

/// The client's parameters.
#[derive(Clone, Copy, Debug)]
pub struct CarrierConfig {
    /// The handshake's (suites, connection ID); its timers and PMTU are not used here.
    pub dtls: Config,
    /// ACK_TIMEOUT, ACK_RANDOM_FACTOR and MAX_RETRANSMIT (RFC 7252 §4.8).
    pub coap: TransmissionParameters,
    /// Block size exponent (RFC 7959 §2.2: size = 2^(szx+4)) for Block1 requests and the
    /// Block2 blocks it asks for; 6 (1024 bytes) at most.
    pub block_szx: u8,
}

impl Default for CarrierConfig {
    fn default() -> Self {
        Self {
            dtls: Config::default(),
            coap: TransmissionParameters::default(),
            block_szx: 6,
        }
    }
}

/// The request waiting for its response (NSTART 1), and the Empty messages the table sends
/// (an ACK of a separate response, a Reset of what nobody waits for). Its retransmission
/// timer starts when the request first leaves ([`Client::poll_transmit`]), not when it was
/// built: a device that computes its flight for longer than ACK_TIMEOUT must not count that
/// time against the server's answer.
type Requests = client::Client<(), 1, MAX_DATAGRAM, 2, 2>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// `PUT /dtls` with a ClientHello (with or without the cookie).
    Hello,
    /// `POST /dtls/<id>` with the client's later flight.
    Flight,
    Done,
    Failed(Error),
}

/// A client handshake over CoAP.
pub struct Client<C, T> {
    hs: WholeFlights<C, T>,
    config: CarrierConfig,
    phase: Phase,
    token: Token,
    next_mid: u16,
    session: Option<u32>,
    /// This side's flight being sent, and where its Block1 transfer stands.
    out: [u8; MAX_FLIGHT],
    out_len: usize,
    upload: Sender,
    /// The response body being assembled from Block2 blocks, where that stands, and its code.
    body: [u8; MAX_FLIGHT],
    download: Reassembly,
    body_code: Code,
    requests: Requests,
    /// Datagrams that are not CoAP messages.
    malformed: u32,
}

fn random_u32(rng: &mut dyn Rng) -> Result<u32, Error> {
    let mut b = [0u8; 4];
    rng.fill(&mut b)
        .map_err(|e| Error::Dtls(sigil_dtls::Error::Crypto(e)))?;
    Ok(u32::from_be_bytes(b))
}

impl<C: CryptoProvider, T: Trust> Client<C, T> {
    /// Starts the handshake: `PUT /dtls` with the ClientHello is ready to send.
    pub fn connect(
        crypto: C,
        trust: T,
        config: CarrierConfig,
        rng: &mut dyn Rng,
        credentials: Credentials<'_>,
        now: Instant,
    ) -> Result<Self, Error> {
        if config.block_szx > 6 {
            return Err(Error::Protocol("block size above 1024 bytes"));
        }
        let mut out = [0u8; MAX_FLIGHT];
        let (hs, n) =
            WholeFlights::connect(crypto, trust, config.dtls, rng, credentials, &mut out)?;
        let r = random_u32(rng)?;
        let mut c = Self {
            hs,
            config,
            phase: Phase::Hello,
            token: Token::new(&r.to_be_bytes()).unwrap_or_default(),
            next_mid: (r >> 7) as u16,
            session: None,
            out,
            out_len: n,
            upload: Sender::new(n, config.block_szx),
            body: [0; MAX_FLIGHT],
            download: Reassembly::new(MAX_FLIGHT),
            body_code: Code::EMPTY,
            requests: Requests::timed_from_first_send(config.coap),
            malformed: 0,
        };
        c.send_hello(now, rng)?;
        Ok(c)
    }

    /// The handshake completed: take the established [`Traffic`].
    pub fn is_established(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Why the handshake failed, if it did.
    pub fn failure(&self) -> Option<Error> {
        match self.phase {
            Phase::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// The session resource's id (from the server's Location-Path), once created.
    pub fn session_id(&self) -> Option<u32> {
        self.session
    }

    /// Datagrams ignored (duplicates, answers to earlier requests, foreign tokens, what is
    /// not CoAP).
    pub fn ignored(&self) -> u32 {
        let s = self.requests.stats();
        self.malformed
            .saturating_add(s.unexpected)
            .saturating_add(s.duplicates)
    }

    /// Requests sent again after their timeout.
    pub fn retransmissions(&self) -> u32 {
        self.requests.stats().retransmissions
    }

    /// The established connection; the handshake's buffers are dropped, never moved (on a
    /// device the client is tens of kilobytes, the established state a few).
    pub fn into_traffic(self) -> Result<Traffic<C>, Error> {
        let incomplete = Error::Protocol("the handshake is not complete");
        match self.phase {
            Phase::Done => self.hs.into_established().ok_or(incomplete),
            Phase::Failed(e) => Err(e),
            _ => Err(incomplete),
        }
    }

    /// The next datagram to send at `now`, if any. A request's retransmission timer starts
    /// when it is first taken from here (also when `out` is too small for it: the exchange
    /// then times out after MAX_RETRANSMIT instead of waiting for ever).
    pub fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        if let Phase::Failed(_) = self.phase {
            return None;
        }
        self.requests.poll_transmit_at(now, out)
    }

    /// When to call [`Client::handle_timeout`] next (none while a request waits for its first
    /// [`Client::poll_transmit`]).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.requests.poll_timeout()
    }

    /// Retransmits the outstanding request when its timer expired (RFC 7252 §4.2), or gives
    /// up after MAX_RETRANSMIT (or EXCHANGE_LIFETIME after an Empty ACK without the separate
    /// response).
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), Error> {
        match self.requests.handle_timeout(now) {
            Some(_) => self.fail(Error::Timeout),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: Error) -> Result<(), Error> {
        self.phase = Phase::Failed(e);
        self.requests.clear();
        Err(e)
    }

    /// Takes one received datagram: the response to the outstanding request moves the
    /// handshake on; anything else is ignored (counted; a Confirmable one is Reset).
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        datagram: &[u8],
        rng: &mut dyn Rng,
    ) -> Result<(), Error> {
        if let Phase::Failed(e) = self.phase {
            return Err(e);
        }
        let Ok(msg) = Message::parse(datagram) else {
            self.malformed = self.malformed.saturating_add(1);
            return Ok(());
        };
        match self.requests.handle_message(&msg, now) {
            Incoming::Handled | Incoming::Unexpected => Ok(()),
            Incoming::Reset(_) => self.fail(Error::Protocol("the server reset the request")),
            Incoming::Response(id) => {
                self.requests.remove(id);
                match self.response(now, &msg, rng) {
                    Ok(()) => Ok(()),
                    Err(e) => self.fail(e),
                }
            }
        }
    }

    fn response(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        rng: &mut dyn Rng,
    ) -> Result<(), Error> {
        match (self.phase, msg.code) {
            // The stateless server's HelloVerifyRequest: the ClientHello again, with the cookie.
            (Phase::Hello, Code::UNAUTHORIZED) => {
                let n = self.hs.handle_flight(msg.payload, &mut self.out)?;
                if n == 0 {
                    return Err(Error::Protocol("4.01 without a HelloVerifyRequest"));
                }
                self.out_len = n;
                self.send_hello(now, rng)
            }
            (Phase::Flight, Code::CONTINUE) => {
                let b = msg
                    .block1()
                    .and_then(Result::ok)
                    .ok_or(Error::Protocol("2.31 without Block1"))?;
                // The next block, in the server's size if it asked for a smaller one (§2.5).
                self.upload.continued(Some(b)).map_err(|e| match e {
                    BlockwiseError::NumberTooLarge => Error::Protocol("Block1 number"),
                    _ => Error::Protocol("2.31 for another block"),
                })?;
                self.send_flight(now, rng)
            }
            (Phase::Hello, Code::CREATED)
            | (Phase::Flight, Code::CHANGED)
            | (Phase::Hello | Phase::Flight, Code::CONTENT) => self.body_block(now, msg, rng),
            (_, code) => Err(Error::Refused(code)),
        }
    }

    /// One block (or all) of the server's flight.
    fn body_block(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        rng: &mut dyn Rng,
    ) -> Result<(), Error> {
        let block = match msg.block2() {
            None => None,
            Some(Ok(b)) => Some(b),
            Some(Err(_)) => return Err(Error::Protocol("malformed Block2")),
        };
        // Without Block2 the payload is the whole body: one last block 0.
        let block = block.unwrap_or(BlockOption::new(0, false, 6));
        if block.num == 0 {
            if msg.code == Code::CONTENT {
                return Err(Error::Protocol("2.05 for the first block"));
            }
            // A flight begins at block 0 once: during a download a block 0 would start it
            // over (and over), however the answer matched the request.
            if self.download.received() > 0 && !self.download.is_done() {
                return Err(Error::Protocol("a block out of order"));
            }
            self.body_code = msg.code;
            if msg.code == Code::CREATED {
                self.session = Some(location(msg)?);
            }
        } else if msg.code != Code::CONTENT {
            return Err(Error::Protocol("a later block that is not 2.05"));
        }
        let at = self
            .download
            .accept(block, msg.payload.len())
            .map_err(|e| match e {
                BlockwiseError::TooLarge => Error::FlightTooLarge,
                BlockwiseError::ShortBlock => Error::Protocol("a short block before the last"),
                _ => Error::Protocol("a block out of order"),
            })?;
        self.body[at.offset..at.offset + msg.payload.len()].copy_from_slice(msg.payload);
        // The next block, in this side's size if it is smaller than the server's.
        if let Some(next) = self.download.next_request(self.config.block_szx) {
            return self.request(now, rng, Code::GET, None, Some(next), 0..0);
        }
        let n = self
            .hs
            .handle_flight(&self.body[..self.download.received()], &mut self.out)?;
        if self.hs.is_established() {
            self.phase = Phase::Done;
            return Ok(());
        }
        if n == 0 || self.body_code != Code::CREATED {
            return Err(Error::Protocol("a flight that asks for no answer"));
        }
        self.out_len = n;
        self.upload = Sender::new(n, self.config.block_szx);
        self.phase = Phase::Flight;
        self.send_flight(now, rng)
    }

    fn send_hello(&mut self, now: Instant, rng: &mut dyn Rng) -> Result<(), Error> {
        // The ClientHello always goes whole: a stateless server cannot gather blocks.
        self.request(now, rng, Code::PUT, None, None, 0..self.out_len)
    }

    /// The current Block1 of this side's flight (or all of it if it fits one block).
    fn send_flight(&mut self, now: Instant, rng: &mut dyn Rng) -> Result<(), Error> {
        let (block1, range) = (self.upload.block(), self.upload.range());
        self.request(now, rng, Code::POST, block1, None, range)
    }

    /// Builds the request into the table; its retransmission is armed when it first leaves.
    fn request(
        &mut self,
        now: Instant,
        rng: &mut dyn Rng,
        method: Code,
        block1: Option<BlockOption>,
        block2: Option<BlockOption>,
        payload: core::ops::Range<usize>,
    ) -> Result<(), Error> {
        let mid = self.next_mid;
        self.next_mid = self.next_mid.wrapping_add(1);
        let token = self.token;
        let session = self.session;
        let payload = &self.out[payload];
        let build = |datagram: &mut [u8; MAX_DATAGRAM]| -> Result<usize, Error> {
            let mut m = MessageBuilder::new(
                datagram,
                MessageType::Confirmable,
                method,
                mid,
                token.as_bytes(),
            )?;
            m.option(option::URI_PATH, PATH.as_bytes())?;
            if method != Code::PUT {
                let id = session.ok_or(Error::Protocol("no session resource"))?;
                let mut b = [0u8; crate::MAX_ID_LEN];
                m.option(option::URI_PATH, crate::id_text(id, &mut b).as_bytes())?;
            }
            if let Some(b) = block2 {
                let (v, n) = b.encode().map_err(|_| Error::Protocol("Block2 number"))?;
                m.option(option::BLOCK2, &v[..n])?;
            }
            if let Some(b) = block1 {
                let (v, n) = b.encode().map_err(|_| Error::Protocol("Block1 number"))?;
                m.option(option::BLOCK1, &v[..n])?;
            }
            Ok(m.finish_with_payload(payload)?)
        };
        let req = NewRequest {
            exchange: (),
            confirmable: true,
            mid,
            token,
            random: random_u32(rng)?,
        };
        match self.requests.start(now, req, build) {
            Ok(_) => Ok(()),
            Err(StartError::Build(e)) => Err(e),
            Err(StartError::Full | StartError::InUse) => {
                Err(Error::Protocol("a request is still outstanding"))
            }
            Err(StartError::TooLong) => Err(Error::Protocol("a request longer than a datagram")),
        }
    }
}

/// The session id from a 2.01's Location-Path `dtls/<id>`.
fn location(msg: &Message<'_>) -> Result<u32, Error> {
    let mut segs = msg.option_values(option::LOCATION_PATH);
    match (segs.next(), segs.next(), segs.next()) {
        (Some(p), Some(id), None) if p == PATH.as_bytes() => {
            parse_id(id).ok_or(Error::Protocol("Location-Path id"))
        }
        _ => Err(Error::Protocol("2.01 without Location-Path dtls/<id>")),
    }
}
