//! A small CoAP client over tokio UDP, used by the application and the tools: Confirmable
//! requests with retransmission (RFC 7252 §4.2) and separate responses through the message
//! core's request table ([`sigil_coap::exchange::client`], as the device uses it), block-wise
//! transfer
//! in both directions (RFC 7959), and the Echo option (RFC 9175 §2.4): a coap:// server that
//! answers 4.01 Unauthorized with Echo gets the request again with that value, and the latest
//! value is sent with later requests to the same server (§2.3), so large answers come at once.
//!
//! Observe (RFC 7641): [`CoapClient::observe`] registers, and [`CoapClient::next_notification`]
//! hands over each notification once, in order (§3.4: an older or repeated one is discarded),
//! acknowledging the Confirmable ones; a notification for a token this client does not hold
//! is answered with Reset, so the server forgets it (§3.6). Notifications that arrive while a
//! request waits for its answer are kept for the next call.

use crate::transport::{Security, Transport};
use anyhow::{anyhow, bail, Result};
use sigil_coap::exchange::blockwise;
use sigil_coap::exchange::client::{Client, Incoming, NewRequest, RequestId, StartError};
use sigil_coap::exchange::Token;
use sigil_coap::message::option;
use sigil_coap::{BlockOption, Code, Message, MessageBuilder, MessageType, TransmissionParameters};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct ClientResponse {
    pub code: Code,
    pub content_format: Option<u16>,
    pub payload: Vec<u8>,
    /// The Observe option (a registration's answer, or a notification).
    pub observe: Option<u32>,
    pub etag: Option<Vec<u8>>,
    pub max_age: Option<u32>,
    /// The token of the request it answers.
    pub token: Vec<u8>,
    /// Block2 says more of the body follows (a notification carries its first block).
    pub more: bool,
    /// The Block1 option the server echoed (2.31 Continue, or the answer to the last block).
    pub block1: Option<BlockOption>,
}

/// The observations a client holds: token → the order of its notifications.
#[derive(Default)]
struct Observations {
    held: std::collections::HashMap<Vec<u8>, sigil_coap::exchange::observe::Ordering>,
    /// Notifications received while a request waited.
    queued: std::collections::VecDeque<ClientResponse>,
    /// Notifications discarded: older than one received (§3.4), or pushed out of a full
    /// queue.
    pub stale: u64,
}

pub struct CoapClient {
    transport: Transport,
    server: SocketAddr,
    mid: u16,
    params: TransmissionParameters,
    start: Instant,
    /// Block size exponent for Block1 uploads and requested Block2 downloads.
    pub szx: u8,
    /// Largest body accepted through Block2.
    pub max_body: usize,
    /// The server's latest Echo value (RFC 9175), sent with every request.
    echo: Option<Vec<u8>>,
    /// Give up on a request the server has not answered (not even with an empty ACK) within
    /// this time, instead of after MAX_TRANSMIT_WAIT (93 s with the default parameters).
    pub timeout: Option<Duration>,
    observations: Observations,
    /// The outstanding request, its retransmissions, and the ACKs and Resets to send: the
    /// message core ([`sigil_coap::exchange::client`]).
    requests: Box<Requests>,
}

/// Most notifications kept while a request waits for its answer.
const QUEUED_MAX: usize = 64;

/// The largest request this client sends (a Block1 block of 1,024 bytes and its options fit).
const REQUEST_MAX: usize = 4096;

/// One request at a time (NSTART 1).
type Requests = Client<(), 1, REQUEST_MAX>;

/// One request's options.
#[derive(Clone, Debug, Default)]
pub struct RequestSpec<'a> {
    pub path: &'a str,
    pub query: Vec<String>,
    pub content_format: Option<u16>,
    pub accept: Option<u16>,
    pub payload: &'a [u8],
    /// Observe (RFC 7641): 0 registers, 1 deregisters.
    pub observe: Option<u32>,
}

impl CoapClient {
    /// A plain coap:// client.
    pub async fn connect(server: SocketAddr, params: TransmissionParameters) -> Result<Self> {
        let t = Transport::open(server, Security::None, Default::default()).await?;
        Ok(Self::over(t, params))
    }

    /// A client over an open transport (coaps:// after its handshake). Over DTLS the blocks
    /// are 512 bytes so every message fits in one record.
    pub fn over(transport: Transport, params: TransmissionParameters) -> Self {
        let szx = if transport.is_secure() { 5 } else { 6 };
        Self {
            server: transport.server(),
            transport,
            mid: crate::os::random_u32() as u16,
            params,
            start: Instant::now(),
            szx,
            max_body: 4 << 20,
            echo: None,
            timeout: None,
            observations: Observations::default(),
            requests: Box::new(Requests::new(params)),
        }
    }

    /// [`CoapClient::over`] giving up on an unanswered request after `timeout`.
    pub fn with_timeout(
        transport: Transport,
        params: TransmissionParameters,
        timeout: Duration,
    ) -> Self {
        Self {
            timeout: Some(timeout),
            ..Self::over(transport, params)
        }
    }

    /// Ends a coaps:// session (close_notify); nothing for coap://.
    pub async fn close(&mut self) {
        self.transport.close().await;
    }

    /// Sends raw bytes to the server (for tools that craft their own datagrams).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.transport.send(bytes).await
    }

    /// Waits up to `wait` for one message from the server.
    pub async fn recv_raw(&mut self, wait: Duration) -> Option<Vec<u8>> {
        self.transport.recv_timeout(wait).await
    }

    pub async fn get(&mut self, path: &str, query: &[&str]) -> Result<ClientResponse> {
        self.request(
            Code::GET,
            &RequestSpec {
                path,
                query: query.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        )
        .await
    }

    /// A complete request: Block1 upload if the payload is large, Block2 download if the
    /// response is.
    pub async fn request(&mut self, code: Code, spec: &RequestSpec<'_>) -> Result<ClientResponse> {
        // Block1 (RFC 7959 §2.3): the message core's sender picks each block and follows the
        // server's 2.31 Continue, and a smaller block size it asks for (§2.5).
        let mut upload = blockwise::Sender::new(spec.payload.len(), self.szx);
        let (mut response, first_block2) = loop {
            let part = &spec.payload[upload.range()];
            let r = self
                .exchange(code, spec, part, upload.block(), None)
                .await?;
            if upload.is_last() {
                break r;
            }
            if r.0.code != Code::CONTINUE {
                return Ok(r.0);
            }
            upload
                .continued(r.0.block1)
                .map_err(|e| anyhow!("Block1 upload of {}: {e}", spec.path))?;
        };
        // Block2 (§2.4): the core's reassembly checks each block follows the last.
        if let Some(b2) = first_block2.filter(|b| b.num == 0) {
            let mut body = std::mem::take(&mut response.payload);
            let mut download = blockwise::Reassembly::new(self.max_body);
            download
                .accept(b2, body.len())
                .map_err(|e| anyhow!("Block2 download of {}: {e}", spec.path))?;
            // Further blocks in the size the server chose.
            while let Some(want) = download.next_request(6) {
                let (r, b) = self
                    .exchange(Code::GET, spec, &[], None, Some(want))
                    .await?;
                if !r.code.is_success() {
                    return Ok(r);
                }
                let b = b.ok_or_else(|| anyhow!("server stopped sending Block2"))?;
                // The block asked for, perhaps in a smaller size; never one from before (a
                // block 0 again would start the download over, and over).
                if b.offset() != want.offset() {
                    bail!("Block2 download of {}: block out of sequence", spec.path);
                }
                let at = download
                    .accept(b, r.payload.len())
                    .map_err(|e| anyhow!("Block2 download of {}: {e}", spec.path))?;
                body.truncate(at.offset);
                body.extend_from_slice(&r.payload);
            }
            response.payload = body;
        }
        Ok(response)
    }
}

impl CoapClient {
    /// One Confirmable exchange; returns the response and its Block2 option. A 4.01 with an
    /// Echo option is answered once by repeating the request with that Echo (RFC 9175 §2.4);
    /// the value is kept for later requests.
    async fn exchange(
        &mut self,
        code: Code,
        spec: &RequestSpec<'_>,
        payload: &[u8],
        block1: Option<BlockOption>,
        block2: Option<BlockOption>,
    ) -> Result<(ClientResponse, Option<BlockOption>)> {
        let mut repeated = false;
        loop {
            let (r, b2, echo) = self
                .exchange_once(code, spec, payload, block1, block2)
                .await?;
            match echo {
                Some(e) if r.code == Code::UNAUTHORIZED && !repeated => {
                    self.echo = Some(e);
                    repeated = true;
                }
                _ => return Ok((r, b2)),
            }
        }
    }

    async fn exchange_once(
        &mut self,
        code: Code,
        spec: &RequestSpec<'_>,
        payload: &[u8],
        block1: Option<BlockOption>,
        block2: Option<BlockOption>,
    ) -> Result<(ClientResponse, Option<BlockOption>, Option<Vec<u8>>)> {
        self.mid = self.mid.wrapping_add(1);
        let mid = self.mid;
        let token = crate::os::random_u32().to_be_bytes();
        let echo = self.echo.clone();
        let now = crate::os::since(self.start);
        // One request at a time (NSTART 1): a request given up on leaves nothing behind.
        self.requests.clear();
        let new = NewRequest {
            exchange: (),
            confirmable: true,
            mid,
            token: Token::new(&token).unwrap_or_default(),
            random: crate::os::random_u32(),
        };
        let id = self
            .requests
            .start(now, new, |buf| -> Result<usize, sigil_coap::Error> {
                let mut b =
                    MessageBuilder::new(&mut buf[..], MessageType::Confirmable, code, mid, &token)?;
                if let Some(o) = spec.observe {
                    b.uint_option(option::OBSERVE, o)?;
                }
                b.uri_path(spec.path)?;
                if let Some(cf) = spec.content_format {
                    b.uint_option(option::CONTENT_FORMAT, u32::from(cf))?;
                }
                for q in &spec.query {
                    b.option(option::URI_QUERY, q.as_bytes())?;
                }
                if let Some(a) = spec.accept {
                    b.uint_option(option::ACCEPT, u32::from(a))?;
                }
                if let Some(b2) = block2 {
                    let (v, n) = b2.encode().map_err(|_| sigil_coap::Error::BufferTooSmall)?;
                    b.option(option::BLOCK2, &v[..n])?;
                }
                if let Some(b1) = block1 {
                    let (v, n) = b1.encode().map_err(|_| sigil_coap::Error::BufferTooSmall)?;
                    b.option(option::BLOCK1, &v[..n])?;
                    if b1.num == 0 {
                        b.uint_option(option::SIZE1, spec.payload.len() as u32)?;
                    }
                }
                if let Some(e) = &echo {
                    b.option(option::ECHO, e)?;
                }
                b.finish_with_payload(payload)
            })
            .map_err(|e| match e {
                StartError::Build(e) => anyhow!("cannot encode the request: {e}"),
                StartError::TooLong => anyhow!("the request is larger than {REQUEST_MAX} bytes"),
                StartError::Full | StartError::InUse => anyhow!("a request is already outstanding"),
            })?;
        let give_up_at = self.timeout.map(|t| now + t);
        self.await_response(id, token, give_up_at).await
    }

    /// Sends what the request table has due: the request (again), ACKs and Resets.
    async fn flush(&mut self) -> Result<()> {
        let mut out = [0u8; REQUEST_MAX];
        while let Some(n) = self.requests.poll_transmit(&mut out) {
            self.transport.send(&out[..n]).await?;
        }
        Ok(())
    }

    /// Waits for the answer to request `id` (token `token`), retransmitting at RFC 7252
    /// timing through the message core ([`sigil_coap::exchange::client`]).
    async fn await_response(
        &mut self,
        id: RequestId,
        token: [u8; 4],
        give_up_at: Option<sigil_time::Instant>,
    ) -> Result<(ClientResponse, Option<BlockOption>, Option<Vec<u8>>)> {
        let start = self.start;
        let now = move || crate::os::since(start);
        loop {
            self.flush().await?;
            let deadline = [self.requests.poll_timeout(), give_up_at]
                .into_iter()
                .flatten()
                .min();
            let wait = deadline.map_or(Duration::from_secs(3600), |d| d.saturating_since(now()));
            match tokio::time::timeout(wait, self.transport.recv()).await {
                Err(_) => {
                    if give_up_at.is_some_and(|g| now() >= g) {
                        let acked = self.requests.get(id).is_some_and(|o| o.is_acknowledged());
                        self.requests.remove(id);
                        let t = self.timeout.unwrap_or_default();
                        if acked {
                            bail!(
                                "{} acknowledged the request but sent no response within {:?}",
                                self.server,
                                t
                            );
                        }
                        return Err(crate::transport::no_answer(
                            self.server,
                            self.transport.is_secure(),
                            t,
                        ));
                    }
                    if let Some(e) = self.requests.handle_timeout(now()) {
                        if e.acknowledged {
                            bail!(
                                "{} acknowledged the request but sent no response within EXCHANGE_LIFETIME",
                                self.server
                            );
                        }
                        bail!(
                            "no response from {} after {} retransmissions",
                            self.server,
                            self.params.max_retransmit
                        );
                    }
                }
                Ok(Err(e)) => bail!("{e}"),
                Ok(Ok(datagram)) => {
                    let Ok(msg) = Message::parse(&datagram) else {
                        continue;
                    };
                    // A notification of an observation this client holds: kept for
                    // next_notification (the core would take it for a stray response).
                    if msg.code.is_response()
                        && msg.token != token
                        && self.observations.held.contains_key(msg.token)
                    {
                        if let Some(n) = self.take_notification(&msg).await? {
                            // Bounded: a server (or whoever can write to this socket)
                            // sending notifications faster than they are taken cannot grow
                            // the queue; the oldest go (a follower fetches skipped readings
                            // from the history).
                            if self.observations.queued.len() >= QUEUED_MAX {
                                self.observations.queued.pop_front();
                                self.observations.stale += 1;
                            }
                            self.observations.queued.push_back(n);
                        }
                        continue;
                    }
                    match self.requests.handle_message(&msg, now()) {
                        Incoming::Response(r) if r == id => {
                            self.requests.remove(id);
                            // The ACK of a Confirmable (separate) response.
                            self.flush().await?;
                            let block2 = msg.block2().and_then(|r| r.ok());
                            let echo = msg.option(option::ECHO).map(<[u8]>::to_vec);
                            return Ok((response_of(&msg), block2, echo));
                        }
                        Incoming::Reset(r) if r == id => {
                            self.requests.remove(id);
                            bail!("server answered with Reset");
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// What a client keeps of a response.
fn response_of(msg: &Message<'_>) -> ClientResponse {
    ClientResponse {
        code: msg.code,
        content_format: msg.content_format().map(|c| c.0),
        payload: msg.payload.to_vec(),
        observe: msg.observe(),
        etag: msg.option(option::ETAG).map(<[u8]>::to_vec),
        max_age: msg.uint_option(option::MAX_AGE),
        token: msg.token.to_vec(),
        more: msg.block2().and_then(|r| r.ok()).is_some_and(|b| b.more),
        block1: msg.block1().and_then(|r| r.ok()),
    }
}

impl CoapClient {
    /// Registers an observation of `path` (GET with Observe 0). The answer says whether it
    /// was taken: with an Observe option it was, and the notifications that follow come from
    /// [`CoapClient::next_notification`] with its `token`; without one, the server answered
    /// once and will send nothing more.
    pub async fn observe(&mut self, path: &str) -> Result<ClientResponse> {
        let spec = RequestSpec {
            path,
            observe: Some(0),
            ..Default::default()
        };
        let (r, _) = self.exchange(Code::GET, &spec, &[], None, None).await?;
        if let Some(seq) = r.observe.filter(|_| r.code.is_success()) {
            let mut order = sigil_coap::exchange::observe::Ordering::new();
            order.accept(seq, crate::os::since(self.start));
            self.observations.held.insert(r.token.clone(), order);
        }
        Ok(r)
    }

    /// Stops taking the notifications of `token`: the next one is answered with Reset and the
    /// server forgets the observation (RFC 7641 §3.6).
    pub fn forget_observation(&mut self, token: &[u8]) {
        self.observations.held.remove(token);
    }

    /// Notifications discarded: older than one already received (RFC 7641 §3.4), or pushed
    /// out of the queue kept while a request waits.
    pub fn stale_notifications(&mut self) -> u64 {
        self.observations.stale
    }

    /// The next notification of an observation this client holds, waiting at most `wait`:
    /// each once, newest-first order kept (an older one is discarded). A notification that is
    /// not 2.xx ends its observation (§3.2).
    pub async fn next_notification(&mut self, wait: Duration) -> Result<Option<ClientResponse>> {
        if let Some(n) = self.observations.queued.pop_front() {
            return Ok(Some(n));
        }
        let until = tokio::time::Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let datagram = match tokio::time::timeout(left, self.transport.recv()).await {
                Err(_) => return Ok(None),
                Ok(Err(e)) => bail!("{e}"),
                Ok(Ok(d)) => d,
            };
            let Ok(msg) = Message::parse(&datagram) else {
                continue;
            };
            if !msg.code.is_response() {
                continue;
            }
            if !self.observations.held.contains_key(msg.token) {
                if msg.observe().is_some() && msg.mtype == MessageType::NonConfirmable {
                    // A notification not ours (any more): Reset, so the server stops
                    // sending (§3.6).
                    self.requests
                        .queue_empty(MessageType::Reset, msg.message_id);
                } else {
                    // The message core answers the rest (a repeated response is
                    // acknowledged again; anything else Confirmable is Reset).
                    self.requests
                        .handle_message(&msg, crate::os::since(self.start));
                }
                self.flush().await?;
                continue;
            }
            if let Some(n) = self.take_notification(&msg).await? {
                return Ok(Some(n));
            }
        }
    }

    /// A notification for a held token: acknowledged if Confirmable; `None` if it is older than
    /// one received before.
    async fn take_notification(&mut self, msg: &Message<'_>) -> Result<Option<ClientResponse>> {
        if msg.mtype == MessageType::Confirmable {
            self.requests
                .queue_empty(MessageType::Acknowledgement, msg.message_id);
            self.flush().await?;
        }
        let now = crate::os::since(self.start);
        let n = response_of(msg);
        if !n.code.is_success() {
            self.observations.held.remove(msg.token);
            return Ok(Some(n));
        }
        let Some(order) = self.observations.held.get_mut(msg.token) else {
            return Ok(None);
        };
        if let Some(seq) = n.observe {
            if !order.accept(seq, now) {
                self.observations.stale += 1;
                return Ok(None);
            }
        }
        Ok(Some(n))
    }
}
