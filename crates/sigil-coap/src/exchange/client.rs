//! The client side of the message layer (RFC 7252 §4, §5.2) toward one peer: the table of
//! outstanding requests, Confirmable retransmission, separate responses, acknowledgements of
//! Confirmable responses (again for duplicates) and Resets for what nobody waits for.
//!
//! No allocation: the table holds at most `N` requests (NSTART, §4.7), each in a `BUF`-byte
//! array; `EMPTIES` Empty messages (ACK/RST) wait to be sent; the last `RECENT` Confirmable
//! response message IDs are remembered for §4.5 deduplication. Time and the retransmission
//! jitter come from the caller. One table serves one peer: message IDs are matched without
//! looking at the sender.
//!
//! The rules:
//! - A Confirmable request is sent, then sent again at the initial timeout (random in
//!   ACK_TIMEOUT .. ACK_TIMEOUT × ACK_RANDOM_FACTOR) and at each doubling, MAX_RETRANSMIT
//!   times; when the last timeout expires unanswered it has failed ([`Client::handle_timeout`]
//!   returns it), MAX_TRANSMIT_WAIT after the first transmission at the latest (§4.2, §4.8).
//! - An Empty ACK with its message ID stops the retransmission; the separate response is
//!   awaited for EXCHANGE_LIFETIME (§5.2.2).
//! - A Reset with its message ID is reported ([`Incoming::Reset`]); the caller decides whether
//!   to end the exchange ([`Client::remove`]) or to keep retransmitting (e.g. a Reset it does
//!   not trust).
//! - A response (piggy-backed in the ACK with the request's message ID and token, or a
//!   separate one with its token) is reported ([`Incoming::Response`]); a Confirmable one is
//!   acknowledged, and acknowledged again if it comes again (§4.5).
//! - Anything else (a request to this endpoint, a response nobody waits for, an ACK or Reset
//!   that matches nothing) is counted as unexpected and, when Confirmable, rejected with a
//!   Reset (§4.2, §4.3).
//! - A Non-confirmable request is forgotten once sent.
//!
//! A table made with [`Client::timed_from_first_send`] starts a Confirmable request's
//! retransmission timer when the request first leaves ([`Client::poll_transmit_at`]) rather than
//! when it is started, for a caller that may spend longer than ACK_TIMEOUT between the two (a
//! device computing a DTLS flight): that time is not counted against the peer's answer.

use super::Token;
use crate::message::empty;
use crate::reliability::{Retransmission, RetransmitDecision, TransmissionParameters};
use crate::{Code, Message, MessageType};
use sigil_time::Instant;

/// One outstanding request; `X` is what the caller wants to remember about it. Its bytes are
/// in the table ([`Client::bytes`]).
#[derive(Clone, Copy, Debug)]
pub struct Outstanding<X> {
    exchange: X,
    mid: u16,
    token: Token,
    len: usize,
    confirmable: bool,
    /// `None` for Non-confirmable requests and after an Empty ACK.
    retransmission: Option<Retransmission>,
    /// The end of the wait for a response when no retransmission is armed.
    deadline: Instant,
    send_now: bool,
    /// A Confirmable request of a [`Client::timed_from_first_send`] table not sent yet: the
    /// jitter value its timer starts with when it first leaves.
    unarmed: Option<u32>,
}

impl<X: Copy> Outstanding<X> {
    pub fn exchange(&self) -> X {
        self.exchange
    }

    pub fn message_id(&self) -> u16 {
        self.mid
    }

    pub fn token(&self) -> Token {
        self.token
    }

    pub fn is_confirmable(&self) -> bool {
        self.confirmable
    }

    /// True once an Empty ACK said the response will come separately.
    pub fn is_acknowledged(&self) -> bool {
        self.confirmable && self.retransmission.is_none() && self.unarmed.is_none()
    }

    /// Retransmissions sent so far.
    pub fn retransmissions(&self) -> u8 {
        self.retransmission.map_or(0, |r| r.retransmissions())
    }

    /// When its timer fires: the next retransmission, or the end of the wait for a response
    /// ([`Instant::NEVER`] while a timer that starts at the first send waits for it).
    pub fn wake_at(&self) -> Instant {
        match &self.retransmission {
            Some(r) => r.deadline(),
            None if self.unarmed.is_some() => Instant::NEVER,
            None => self.deadline,
        }
    }
}

/// A request to start: what it is for, its type, message ID and token, and a uniformly
/// random value for its retransmission jitter.
#[derive(Clone, Copy, Debug)]
pub struct NewRequest<X> {
    pub exchange: X,
    pub confirmable: bool,
    pub mid: u16,
    pub token: Token,
    pub random: u32,
}

/// Names an outstanding request in its table (valid until it is removed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId(u8);

/// Why [`Client::start`] did not start a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartError<E> {
    /// `N` requests are outstanding (NSTART).
    Full,
    /// An outstanding request has the same token or message ID.
    InUse,
    /// The request does not fit the buffer.
    TooLong,
    /// The caller's `build` failed.
    Build(E),
}

/// What a received message was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// The message layer dealt with it (an Empty ACK, a duplicate Confirmable response).
    Handled,
    /// Nothing waits for it: counted, and answered with Reset when Confirmable.
    Unexpected,
    /// A Reset to this outstanding Confirmable request.
    Reset(RequestId),
    /// A response to this outstanding request (piggy-backed or separate).
    Response(RequestId),
}

/// A request that failed: retransmissions exhausted, or the wait for its response over. It
/// has left the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired<X> {
    pub exchange: X,
    pub mid: u16,
    pub token: Token,
    /// An Empty ACK had come: the separate response never did.
    pub acknowledged: bool,
}

/// What the table has counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    pub retransmissions: u32,
    /// Messages nothing waited for (including piggy-backed responses with a wrong token).
    pub unexpected: u32,
    /// Confirmable responses that came again and were acknowledged again (§4.5).
    pub duplicates: u32,
    /// Requests given up (no ACK after the last retransmission, or no separate response).
    pub expired: u32,
    /// Empty messages not queued because the queue was full.
    pub empties_dropped: u32,
}

/// The outstanding requests toward one peer: at most `N` (NSTART), each up to `BUF` bytes;
/// `EMPTIES` queued Empty messages; the last `RECENT` Confirmable response message IDs.
pub struct Client<
    X,
    const N: usize,
    const BUF: usize,
    const EMPTIES: usize = 4,
    const RECENT: usize = 4,
> {
    params: TransmissionParameters,
    slots: [Option<Outstanding<X>>; N],
    /// The requests' bytes, slot by slot (apart, so that no request is moved).
    bufs: [[u8; BUF]; N],
    empties: [Option<[u8; 4]>; EMPTIES],
    recent_con: [Option<u16>; RECENT],
    stats: ClientStats,
    /// Confirmable requests' timers start at their first send, not at `start`.
    timed_from_first_send: bool,
}

impl<X: Copy, const N: usize, const BUF: usize, const EMPTIES: usize, const RECENT: usize>
    Client<X, N, BUF, EMPTIES, RECENT>
{
    const SLOTS_FIT_AN_ID: () = assert!(N <= 256);

    pub fn new(params: TransmissionParameters) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::SLOTS_FIT_AN_ID;
        Self {
            params,
            slots: [const { None }; N],
            bufs: [[0; BUF]; N],
            empties: [None; EMPTIES],
            recent_con: [None; RECENT],
            stats: ClientStats::default(),
            timed_from_first_send: false,
        }
    }

    /// A table whose Confirmable requests start their retransmission timer when they first
    /// leave ([`Client::poll_transmit_at`], which the caller then sends with), not when they
    /// are started: until then they have no timer ([`Client::poll_timeout`] skips them).
    pub fn timed_from_first_send(params: TransmissionParameters) -> Self {
        Self {
            timed_from_first_send: true,
            ..Self::new(params)
        }
    }

    pub fn params(&self) -> &TransmissionParameters {
        &self.params
    }

    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// Outstanding requests.
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// True when a new request would be refused with [`StartError::Full`].
    pub fn is_full(&self) -> bool {
        self.slots.iter().all(Option::is_some)
    }

    pub fn iter(&self) -> impl Iterator<Item = (RequestId, &Outstanding<X>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((RequestId(i as u8), s.as_ref()?)))
    }

    pub fn get(&self, id: RequestId) -> Option<&Outstanding<X>> {
        self.slots.get(usize::from(id.0))?.as_ref()
    }

    /// The request as sent.
    pub fn bytes(&self, id: RequestId) -> Option<&[u8]> {
        let o = self.get(id)?;
        self.bufs.get(usize::from(id.0))?.get(..o.len)
    }

    /// Ends the request (answered, or abandoned by the caller) and gives back its exchange.
    pub fn remove(&mut self, id: RequestId) -> Option<X> {
        self.slots
            .get_mut(usize::from(id.0))?
            .take()
            .map(|o| o.exchange)
    }

    /// Forgets every outstanding request (queued Empty messages stay).
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
    }

    /// Starts a request: `build` writes it (with the request's message ID and token) into
    /// the slot's buffer and returns its length. It goes out at the next
    /// [`Client::poll_transmit`]; a Confirmable one starts its retransmission timer now (at
    /// its first send in a [`Client::timed_from_first_send`] table).
    pub fn start<E>(
        &mut self,
        now: Instant,
        req: NewRequest<X>,
        build: impl FnOnce(&mut [u8; BUF]) -> Result<usize, E>,
    ) -> Result<RequestId, StartError<E>> {
        if self
            .iter()
            .any(|(_, o)| o.token == req.token || o.mid == req.mid)
        {
            return Err(StartError::InUse);
        }
        let i = self
            .slots
            .iter()
            .position(Option::is_none)
            .ok_or(StartError::Full)?;
        let len = match build(&mut self.bufs[i]) {
            Ok(n) if n <= BUF => n,
            Ok(_) => return Err(StartError::TooLong),
            Err(e) => return Err(StartError::Build(e)),
        };
        let at_send = req.confirmable && self.timed_from_first_send;
        self.slots[i] = Some(Outstanding {
            exchange: req.exchange,
            mid: req.mid,
            token: req.token,
            len,
            confirmable: req.confirmable,
            retransmission: if req.confirmable && !at_send {
                Some(Retransmission::start(now, &self.params, req.random))
            } else {
                None
            },
            deadline: now + self.params.max_transmit_wait(),
            send_now: true,
            unarmed: at_send.then_some(req.random),
        });
        Ok(RequestId(i as u8))
    }

    /// Takes in one received message from the peer (see the module documentation).
    pub fn handle_message(&mut self, msg: &Message<'_>, now: Instant) -> Incoming {
        match msg.mtype {
            MessageType::Reset | MessageType::Acknowledgement => {
                let Some(i) = self.slots.iter().position(|s| {
                    s.as_ref()
                        .is_some_and(|o| o.confirmable && o.mid == msg.message_id)
                }) else {
                    return self.unexpected(msg);
                };
                let id = RequestId(i as u8);
                if msg.mtype == MessageType::Reset {
                    return Incoming::Reset(id);
                }
                let lifetime = self.params.exchange_lifetime();
                let Some(o) = self.slots[i].as_mut() else {
                    return Incoming::Handled;
                };
                if msg.code == Code::EMPTY {
                    if o.retransmission.take().is_some() || o.unarmed.take().is_some() {
                        o.deadline = now + lifetime;
                    }
                    return Incoming::Handled;
                }
                if o.token.as_bytes() != msg.token {
                    return self.unexpected(msg);
                }
                Incoming::Response(id)
            }
            MessageType::Confirmable | MessageType::NonConfirmable => {
                let confirmable = msg.mtype == MessageType::Confirmable;
                if confirmable && self.recent_con.contains(&Some(msg.message_id)) {
                    self.stats.duplicates = self.stats.duplicates.saturating_add(1);
                    self.queue_empty(MessageType::Acknowledgement, msg.message_id);
                    return Incoming::Handled;
                }
                let found = if msg.code.is_response() {
                    self.slots
                        .iter()
                        .position(|s| s.as_ref().is_some_and(|o| o.token.as_bytes() == msg.token))
                } else {
                    None
                };
                let Some(i) = found else {
                    return self.unexpected(msg);
                };
                if confirmable {
                    self.queue_empty(MessageType::Acknowledgement, msg.message_id);
                    if RECENT > 0 {
                        self.recent_con.rotate_right(1);
                        self.recent_con[0] = Some(msg.message_id);
                    }
                }
                Incoming::Response(RequestId(i as u8))
            }
        }
    }

    fn unexpected(&mut self, msg: &Message<'_>) -> Incoming {
        self.stats.unexpected = self.stats.unexpected.saturating_add(1);
        if msg.mtype == MessageType::Confirmable {
            self.queue_empty(MessageType::Reset, msg.message_id);
        }
        Incoming::Unexpected
    }

    /// Queues an Empty message (ACK or RST) to the peer, e.g. for a message the caller
    /// handles itself (a notification of an observation it holds). False when the queue is
    /// full (counted in [`ClientStats::empties_dropped`]).
    pub fn queue_empty(&mut self, mtype: MessageType, mid: u16) -> bool {
        match self.empties.iter_mut().find(|s| s.is_none()) {
            Some(slot) => {
                *slot = Some(empty(mtype, mid));
                true
            }
            None => {
                self.stats.empties_dropped = self.stats.empties_dropped.saturating_add(1);
                false
            }
        }
    }

    /// The next datagram to send, copied into `buf`: a queued Empty message first, then an
    /// outstanding request that is due (a Non-confirmable one leaves the table once sent).
    /// `None` when nothing is due, or when `buf` is too small for it (it stays due).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        self.transmit(None, buf)
    }

    /// [`Client::poll_transmit`] at `now`: a request leaving for the first time from a
    /// [`Client::timed_from_first_send`] table starts its retransmission timer now, also when
    /// `buf` is too small for it (it then fails after MAX_RETRANSMIT instead of waiting for
    /// ever).
    pub fn poll_transmit_at(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.transmit(Some(now), buf)
    }

    fn transmit(&mut self, now: Option<Instant>, buf: &mut [u8]) -> Option<usize> {
        if let Some(d) = self.empties.first().copied().flatten() {
            buf.get_mut(..4)?.copy_from_slice(&d);
            self.empties[0] = None;
            self.empties.rotate_left(1);
            return Some(4);
        }
        let (slot, bytes) = self
            .slots
            .iter_mut()
            .zip(&self.bufs)
            .find(|(s, _)| s.as_ref().is_some_and(|o| o.send_now))?;
        let o = slot.as_mut()?;
        if let (Some(now), Some(random)) = (now, o.unarmed) {
            o.unarmed = None;
            o.retransmission = Some(Retransmission::start(now, &self.params, random));
        }
        let n = o.len;
        buf.get_mut(..n)?.copy_from_slice(bytes.get(..n)?);
        o.send_now = false;
        if !o.confirmable {
            *slot = None;
        }
        Some(n)
    }

    /// When [`Client::handle_timeout`] must be called next (`None`: nothing outstanding, or
    /// only requests whose timer starts at their first send).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.iter()
            .filter(|(_, o)| o.unarmed.is_none())
            .map(|(_, o)| o.wake_at())
            .min()
    }

    /// Runs the timers at `now`: requests whose retransmission is due are marked for sending
    /// (see [`Client::poll_transmit`]); the first that has failed leaves the table and is
    /// returned. Call again until it returns `None`.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<Expired<X>> {
        let mut failed = None;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(o) = slot.as_mut() else { continue };
            let over = match o.retransmission.as_mut() {
                Some(r) => match r.on_timer(now) {
                    RetransmitDecision::Wait => false,
                    RetransmitDecision::Resend => {
                        o.send_now = true;
                        self.stats.retransmissions = self.stats.retransmissions.saturating_add(1);
                        false
                    }
                    RetransmitDecision::GiveUp => true,
                },
                None if o.unarmed.is_some() => false,
                None => now >= o.deadline,
            };
            if over && failed.is_none() {
                failed = Some(i);
            }
        }
        let o = self.slots.get_mut(failed?)?.take()?;
        self.stats.expired = self.stats.expired.saturating_add(1);
        Some(Expired {
            exchange: o.exchange,
            mid: o.mid,
            token: o.token,
            acknowledged: o.is_acknowledged(),
        })
    }
}

#[cfg(test)]
mod tests;
