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
mod tests {
    use super::*;
    use crate::MessageBuilder;
    use core::time::Duration;
    extern crate std;
    use std::vec::Vec;

    const BUF: usize = 64;
    type One = Client<u32, 1, BUF>;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn tok(b: &[u8]) -> Token {
        Token::new(b).unwrap()
    }

    fn request(mid: u16, token: &[u8], confirmable: bool, random: u32) -> NewRequest<u32> {
        NewRequest {
            exchange: u32::from(mid),
            confirmable,
            mid,
            token: tok(token),
            random,
        }
    }

    fn start<const N: usize, const E: usize, const R: usize>(
        c: &mut Client<u32, N, BUF, E, R>,
        now: Instant,
        r: NewRequest<u32>,
    ) -> RequestId {
        let mtype = if r.confirmable {
            MessageType::Confirmable
        } else {
            MessageType::NonConfirmable
        };
        c.start(now, r, |buf| {
            Ok::<_, crate::Error>(
                MessageBuilder::new(buf, mtype, Code::GET, r.mid, r.token.as_bytes())?.finish(),
            )
        })
        .unwrap()
    }

    fn msg(buf: &mut [u8; 32], mtype: MessageType, code: Code, mid: u16, token: &[u8]) -> usize {
        MessageBuilder::new(buf, mtype, code, mid, token)
            .unwrap()
            .finish()
    }

    fn feed<const N: usize, const E: usize, const R: usize>(
        c: &mut Client<u32, N, BUF, E, R>,
        now: Instant,
        mtype: MessageType,
        code: Code,
        mid: u16,
        token: &[u8],
    ) -> Incoming {
        let mut b = [0u8; 32];
        let n = msg(&mut b, mtype, code, mid, token);
        c.handle_message(&Message::parse(&b[..n]).unwrap(), now)
    }

    fn sent<const N: usize, const E: usize, const R: usize>(
        c: &mut Client<u32, N, BUF, E, R>,
    ) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut b = [0u8; BUF];
        while let Some(n) = c.poll_transmit(&mut b) {
            out.push(b[..n].to_vec());
        }
        out
    }

    fn params() -> TransmissionParameters {
        TransmissionParameters::default()
    }

    #[test]
    fn confirmable_request_is_sent_again_at_2_4_8_16_s_then_expires() {
        let mut c = One::new(params());
        let id = start(&mut c, at(0), request(7, b"ab", true, 0));
        assert_eq!(sent(&mut c).len(), 1);
        let mut sends = Vec::new();
        let expired = loop {
            let t = c.poll_timeout().unwrap();
            if let Some(e) = c.handle_timeout(t) {
                break (t, e);
            }
            assert_eq!(sent(&mut c).len(), 1);
            sends.push(t.as_millis());
        };
        assert_eq!(sends, [2_000, 6_000, 14_000, 30_000]);
        assert_eq!(expired.0, at(62_000));
        assert_eq!(
            expired.1,
            Expired {
                exchange: 7,
                mid: 7,
                token: tok(b"ab"),
                acknowledged: false
            }
        );
        assert!(c.get(id).is_none() && c.is_empty());
        assert_eq!((c.stats().retransmissions, c.stats().expired), (4, 1));
    }

    #[test]
    fn the_largest_jitter_gives_up_at_max_transmit_wait() {
        let mut c = One::new(params());
        start(&mut c, at(1_000), request(1, b"t", true, 1_000));
        sent(&mut c);
        let mut t = c.poll_timeout().unwrap();
        assert_eq!(t, at(4_000));
        while c.handle_timeout(t).is_none() {
            t = c.poll_timeout().unwrap();
        }
        assert_eq!(t - at(1_000), params().max_transmit_wait());
    }

    #[test]
    fn timers_do_nothing_before_their_time() {
        let mut c = One::new(params());
        start(&mut c, at(0), request(1, b"t", true, 0));
        sent(&mut c);
        assert_eq!(c.handle_timeout(at(1_999)), None);
        assert!(sent(&mut c).is_empty());
        assert_eq!(c.stats().retransmissions, 0);
    }

    #[test]
    fn at_most_n_requests_are_outstanding() {
        let mut c = One::new(params());
        start(&mut c, at(0), request(1, b"a", true, 0));
        let r = request(2, b"b", true, 0);
        assert_eq!(c.start(at(0), r, |_| Ok::<_, ()>(4)), Err(StartError::Full));
        let mut two: Client<u32, 2, BUF> = Client::new(params());
        start(&mut two, at(0), request(1, b"a", true, 0));
        for dup in [request(1, b"b", true, 0), request(2, b"a", true, 0)] {
            assert_eq!(
                two.start(at(0), dup, |_| Ok::<_, ()>(4)),
                Err(StartError::InUse)
            );
        }
        start(&mut two, at(0), request(2, b"b", true, 0));
        assert!(two.is_full());
        assert_eq!(sent(&mut two).len(), 2);
        assert_eq!(
            two.start(at(0), request(3, b"c", true, 0), |_| Ok::<_, ()>(4)),
            Err(StartError::Full)
        );
    }

    #[test]
    fn a_failed_or_oversized_build_leaves_the_slot_free() {
        let mut c = One::new(params());
        let r = request(1, b"a", true, 0);
        assert_eq!(c.start(at(0), r, |_| Err(9)), Err(StartError::Build(9)));
        assert_eq!(
            c.start(at(0), r, |_| Ok::<_, ()>(BUF + 1)),
            Err(StartError::TooLong)
        );
        assert!(c.is_empty() && c.poll_timeout().is_none());
    }

    #[test]
    fn an_empty_ack_stops_retransmission_and_waits_exchange_lifetime() {
        let mut c = One::new(params());
        let id = start(&mut c, at(0), request(5, b"s", true, 0));
        sent(&mut c);
        let ack = feed(
            &mut c,
            at(1_000),
            MessageType::Acknowledgement,
            Code::EMPTY,
            5,
            b"",
        );
        assert_eq!(ack, Incoming::Handled);
        assert!(c.get(id).unwrap().is_acknowledged());
        let until = at(1_000) + params().exchange_lifetime();
        assert_eq!(c.poll_timeout(), Some(until));
        // A second Empty ACK does not extend the wait.
        feed(
            &mut c,
            at(9_000),
            MessageType::Acknowledgement,
            Code::EMPTY,
            5,
            b"",
        );
        assert_eq!(c.poll_timeout(), Some(until));
        assert_eq!(c.handle_timeout(at(2_000)), None);
        assert!(sent(&mut c).is_empty(), "no retransmission after the ACK");
        // The separate response: reported and acknowledged.
        let r = feed(
            &mut c,
            at(5_000),
            MessageType::Confirmable,
            Code::CONTENT,
            900,
            b"s",
        );
        assert_eq!(r, Incoming::Response(id));
        assert_eq!(
            sent(&mut c),
            [empty(MessageType::Acknowledgement, 900).to_vec()]
        );
        // Not answered: the wait ends.
        let e = c.handle_timeout(until).unwrap();
        assert!(e.acknowledged);
        assert!(c.is_empty());
    }

    #[test]
    fn a_confirmable_response_is_acknowledged_again_when_it_comes_again() {
        let mut c = One::new(params());
        let id = start(&mut c, at(0), request(5, b"s", true, 0));
        sent(&mut c);
        feed(
            &mut c,
            at(1),
            MessageType::Acknowledgement,
            Code::EMPTY,
            5,
            b"",
        );
        let r = feed(
            &mut c,
            at(2),
            MessageType::Confirmable,
            Code::CONTENT,
            77,
            b"s",
        );
        assert_eq!(r, Incoming::Response(id));
        c.remove(id);
        let again = feed(
            &mut c,
            at(3),
            MessageType::Confirmable,
            Code::CONTENT,
            77,
            b"s",
        );
        assert_eq!(again, Incoming::Handled);
        let ack = empty(MessageType::Acknowledgement, 77).to_vec();
        assert_eq!(sent(&mut c), [ack.clone(), ack]);
        assert_eq!((c.stats().duplicates, c.stats().unexpected), (1, 0));
    }

    #[test]
    fn only_the_last_recent_confirmable_responses_are_remembered() {
        let mut c: Client<u32, 1, BUF, 8, 2> = Client::new(params());
        for mid in [10u16, 11, 12] {
            let id = start(&mut c, at(0), request(mid, &mid.to_be_bytes(), true, 0));
            let r = feed(
                &mut c,
                at(0),
                MessageType::Confirmable,
                Code::CONTENT,
                100 + mid,
                &mid.to_be_bytes(),
            );
            assert_eq!(r, Incoming::Response(id));
            c.remove(id);
        }
        sent(&mut c);
        // 112 and 111 are remembered; 110 is not, and nothing waits for it.
        assert_eq!(
            feed(
                &mut c,
                at(1),
                MessageType::Confirmable,
                Code::CONTENT,
                112,
                b"x"
            ),
            Incoming::Handled
        );
        assert_eq!(
            feed(
                &mut c,
                at(1),
                MessageType::Confirmable,
                Code::CONTENT,
                110,
                b"x"
            ),
            Incoming::Unexpected
        );
        assert_eq!(
            sent(&mut c),
            [
                empty(MessageType::Acknowledgement, 112).to_vec(),
                empty(MessageType::Reset, 110).to_vec()
            ]
        );
    }

    #[test]
    fn a_reset_is_matched_by_message_id() {
        let mut c = One::new(params());
        let id = start(&mut c, at(0), request(5, b"s", true, 0));
        sent(&mut c);
        assert_eq!(
            feed(&mut c, at(1), MessageType::Reset, Code::EMPTY, 6, b""),
            Incoming::Unexpected
        );
        assert_eq!(
            feed(&mut c, at(1), MessageType::Reset, Code::EMPTY, 5, b""),
            Incoming::Reset(id)
        );
        // The caller decides: until it removes the request, it is retransmitted.
        assert!(c.get(id).is_some());
        assert_eq!(c.handle_timeout(at(2_000)), None);
        assert_eq!(sent(&mut c).len(), 1);
        assert_eq!(c.stats().unexpected, 1);
    }

    #[test]
    fn a_piggybacked_response_needs_the_message_id_and_the_token() {
        let mut c = One::new(params());
        let id = start(&mut c, at(0), request(5, b"s", true, 0));
        sent(&mut c);
        let wrong = feed(
            &mut c,
            at(1),
            MessageType::Acknowledgement,
            Code::CONTENT,
            5,
            b"x",
        );
        assert_eq!(wrong, Incoming::Unexpected);
        assert!(
            !c.get(id).unwrap().is_acknowledged(),
            "still retransmitting"
        );
        let other = feed(
            &mut c,
            at(1),
            MessageType::Acknowledgement,
            Code::CONTENT,
            4,
            b"s",
        );
        assert_eq!(other, Incoming::Unexpected);
        let right = feed(
            &mut c,
            at(1),
            MessageType::Acknowledgement,
            Code::CONTENT,
            5,
            b"s",
        );
        assert_eq!(right, Incoming::Response(id));
        assert!(sent(&mut c).is_empty(), "an ACK is not acknowledged");
    }

    #[test]
    fn what_nobody_waits_for_is_counted_and_reset_when_confirmable() {
        let mut c = One::new(params());
        start(&mut c, at(0), request(5, b"s", true, 0));
        sent(&mut c);
        // A request to this endpoint, a ping, a response to another token.
        let con = [
            (Code::GET, 40u16, &b"s"[..]),
            (Code::EMPTY, 41, &b""[..]),
            (Code::CONTENT, 42, &b"q"[..]),
        ];
        for (code, mid, token) in con {
            assert_eq!(
                feed(&mut c, at(1), MessageType::Confirmable, code, mid, token),
                Incoming::Unexpected
            );
        }
        assert_eq!(
            feed(
                &mut c,
                at(1),
                MessageType::NonConfirmable,
                Code::CONTENT,
                43,
                b"q"
            ),
            Incoming::Unexpected
        );
        assert_eq!(
            feed(
                &mut c,
                at(1),
                MessageType::Acknowledgement,
                Code::EMPTY,
                44,
                b""
            ),
            Incoming::Unexpected
        );
        assert_eq!(
            sent(&mut c),
            [40u16, 41, 42].map(|m| empty(MessageType::Reset, m).to_vec())
        );
        assert_eq!(c.stats().unexpected, 5);
    }

    #[test]
    fn a_non_confirmable_request_is_forgotten_once_sent() {
        let mut c = One::new(params());
        let id = start(&mut c, at(0), request(5, b"n", false, 0));
        assert_eq!(c.poll_timeout(), Some(at(0) + params().max_transmit_wait()));
        assert!(c.get(id).is_some());
        assert_eq!(sent(&mut c).len(), 1);
        assert!(c.is_empty() && c.poll_timeout().is_none());
        assert_eq!(
            feed(
                &mut c,
                at(1),
                MessageType::Acknowledgement,
                Code::EMPTY,
                5,
                b""
            ),
            Incoming::Unexpected
        );
        assert_eq!(
            feed(
                &mut c,
                at(1),
                MessageType::NonConfirmable,
                Code::CONTENT,
                9,
                b"n"
            ),
            Incoming::Unexpected
        );
    }

    #[test]
    fn empty_messages_go_first_in_order_and_their_queue_is_bounded() {
        let mut c: Client<u32, 1, BUF, 2> = Client::new(params());
        start(&mut c, at(0), request(5, b"n", true, 0));
        for mid in 1..=3u16 {
            feed(&mut c, at(0), MessageType::Confirmable, Code::GET, mid, b"");
        }
        assert_eq!(c.stats().empties_dropped, 1);
        assert!(!c.queue_empty(MessageType::Acknowledgement, 99));
        assert_eq!(c.stats().empties_dropped, 2);
        let out = sent(&mut c);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], empty(MessageType::Reset, 1));
        assert_eq!(out[1], empty(MessageType::Reset, 2));
        assert_eq!(Message::parse(&out[2]).unwrap().message_id, 5);
    }

    #[test]
    fn a_buffer_too_small_keeps_the_datagram_due() {
        let mut c = One::new(params());
        start(&mut c, at(0), request(5, b"abcd", true, 0));
        feed(&mut c, at(0), MessageType::Confirmable, Code::GET, 9, b"");
        assert_eq!(c.poll_transmit(&mut [0u8; 3]), None);
        assert_eq!(c.poll_transmit(&mut [0u8; 4]), Some(4));
        assert_eq!(c.poll_transmit(&mut [0u8; 4]), None);
        assert_eq!(c.poll_transmit(&mut [0u8; 8]), Some(8));
    }

    #[test]
    fn a_timer_from_the_first_send_starts_when_the_request_leaves() {
        let mut c = One::timed_from_first_send(params());
        let id = start(&mut c, at(0), request(7, b"ab", true, 0));
        // Built at 0, still unsent at 10 s: no timer, nothing due, not given up.
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.get(id).unwrap().wake_at(), Instant::NEVER);
        assert!(!c.get(id).unwrap().is_acknowledged());
        assert_eq!(c.handle_timeout(at(10_000)), None);
        // A buffer too small starts the timer all the same; the request stays due.
        assert_eq!(c.poll_transmit_at(at(10_000), &mut [0u8; 3]), None);
        assert_eq!(c.poll_timeout(), Some(at(12_000)));
        assert_eq!(
            c.poll_transmit_at(at(11_000), &mut [0u8; BUF])
                .map(|n| n > 4),
            Some(true)
        );
        let mut sends = Vec::new();
        let expired = loop {
            let t = c.poll_timeout().unwrap();
            if c.handle_timeout(t).is_some() {
                break t;
            }
            assert!(c.poll_transmit_at(t, &mut [0u8; BUF]).is_some());
            sends.push(t.as_millis());
        };
        assert_eq!(sends, [12_000, 16_000, 24_000, 40_000]);
        assert_eq!(expired, at(72_000));

        // An Empty ACK before the first send (a guessed message ID) ends the wait for the
        // timer: the separate response is awaited EXCHANGE_LIFETIME.
        let mut c = One::timed_from_first_send(params());
        let id = start(&mut c, at(0), request(5, b"s", true, 0));
        let r = feed(
            &mut c,
            at(1),
            MessageType::Acknowledgement,
            Code::EMPTY,
            5,
            b"",
        );
        assert_eq!(r, Incoming::Handled);
        assert!(c.get(id).unwrap().is_acknowledged());
        assert_eq!(c.poll_timeout(), Some(at(1) + params().exchange_lifetime()));
    }

    /// Knuth's MMIX generator, as `sigil_testkit::Seeded` (a dependency this crate does not
    /// take): replayable from its seed.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 16
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    const TYPES: [MessageType; 4] = [
        MessageType::Confirmable,
        MessageType::NonConfirmable,
        MessageType::Acknowledgement,
        MessageType::Reset,
    ];
    const CODES: [Code; 5] = [
        Code::EMPTY,
        Code::GET,
        Code::CONTENT,
        Code::CHANGED,
        Code(0xa0),
    ];

    /// Any sequence of starts, received messages (well-formed around the outstanding IDs and
    /// tokens, or random bytes), sends, removals and timers: no panic; at most N outstanding,
    /// every outstanding request due at a finite time, every datagram sent one the table
    /// holds or an Empty message, and the table drains once time runs past the longest wait.
    #[test]
    fn property_any_message_sequence_keeps_the_table_bounded() {
        for seed in 0..300u64 {
            let mut rng = Lcg(seed);
            let mut c: Client<u32, 3, BUF, 4, 4> = Client::new(params());
            let mut now = 0u64;
            for _ in 0..300 {
                match rng.below(7) {
                    0 => {
                        let mid = rng.below(8) as u16;
                        let token = [rng.below(6) as u8];
                        let r = request(mid, &token, rng.below(2) == 0, rng.next() as u32);
                        let res = c.start(at(now), r, |buf| {
                            Ok::<_, crate::Error>(
                                MessageBuilder::new(
                                    buf,
                                    MessageType::Confirmable,
                                    Code::GET,
                                    mid,
                                    &token,
                                )?
                                .finish(),
                            )
                        });
                        if let Err(e) = res {
                            assert!(matches!(e, StartError::Full | StartError::InUse), "{e:?}");
                        }
                    }
                    1 | 2 => {
                        let mut b = [0u8; 32];
                        let token = [rng.below(6) as u8];
                        let n = msg(
                            &mut b,
                            TYPES[rng.below(4) as usize],
                            CODES[rng.below(5) as usize],
                            rng.below(8) as u16,
                            if rng.below(4) == 0 { &[] } else { &token },
                        );
                        if let Ok(m) = Message::parse(&b[..n]) {
                            c.handle_message(&m, at(now));
                        }
                    }
                    3 => {
                        let mut b = [0u8; 12];
                        b.iter_mut().for_each(|x| *x = rng.next() as u8);
                        if let Ok(m) = Message::parse(&b[..rng.below(13) as usize]) {
                            c.handle_message(&m, at(now));
                        }
                    }
                    4 => {
                        for d in sent(&mut c) {
                            let m = Message::parse(&d).unwrap();
                            assert!(d.len() == 4 || m.code == Code::GET);
                        }
                    }
                    5 => {
                        now += rng.below(40_000);
                        while c.handle_timeout(at(now)).is_some() {}
                    }
                    _ => {
                        let id = c.iter().nth(rng.below(3) as usize).map(|(id, _)| id);
                        if let Some(id) = id {
                            c.remove(id);
                        }
                    }
                }
                assert!(c.len() <= 3);
                assert_eq!(c.iter().count(), c.len());
                if let Some(t) = c.poll_timeout() {
                    assert!(t < Instant::NEVER);
                    assert!(t <= at(now) + params().exchange_lifetime());
                }
            }
            // Each request needs at most MAX_RETRANSMIT + 1 timer steps to leave.
            let mut steps = 0;
            while let Some(t) = c.poll_timeout() {
                while c.handle_timeout(t).is_some() {}
                sent(&mut c);
                steps += 1;
                assert!(steps <= 3 * 5, "seed {seed}");
            }
            assert!(c.is_empty(), "seed {seed}");
        }
    }

    /// Whatever the jitter and whatever else arrives meanwhile (messages for other IDs,
    /// timers run early), a Confirmable request goes out at its initial timeout (2 to 3 s),
    /// then after 2, 4 and 8 times it, and is given up 31 times it after the first send,
    /// never later than MAX_TRANSMIT_WAIT.
    #[test]
    fn property_every_retransmission_follows_rfc7252_timing() {
        for seed in 0..500u64 {
            let mut rng = Lcg(seed);
            let mut c: Client<u32, 2, BUF> = Client::new(params());
            let t0 = rng.below(1 << 40);
            start(&mut c, at(t0), request(100, b"me", true, rng.next() as u32));
            let mut sends = std::vec![t0];
            sent(&mut c);
            let gave_up = loop {
                let due = c.poll_timeout().unwrap().as_millis();
                // Noise: an early timer, a message for someone else.
                let early = due - rng.below(due - sends[sends.len() - 1] + 1).min(1_000);
                if early < due {
                    assert_eq!(c.handle_timeout(at(early)), None);
                    assert!(sent(&mut c).is_empty());
                }
                let mid = 200 + rng.below(50) as u16;
                let mtype = TYPES[rng.below(4) as usize];
                feed(&mut c, at(early), mtype, Code::CONTENT, mid, b"zz");
                if let Some(e) = c.handle_timeout(at(due)) {
                    break (due, e);
                }
                let out = sent(&mut c);
                let ours: Vec<_> = out.iter().filter(|d| d.len() > 4).collect();
                assert_eq!(ours.len(), 1);
                sends.push(due);
            };
            let gaps: Vec<u64> = sends.windows(2).map(|w| w[1] - w[0]).collect();
            assert_eq!(gaps.len(), 4, "seed {seed}");
            let initial = gaps[0];
            assert!((2_000..=3_000).contains(&initial), "seed {seed}: {initial}");
            assert_eq!(gaps, [initial, initial * 2, initial * 4, initial * 8]);
            assert_eq!(gave_up.0 - t0, initial * 31);
            assert!(Duration::from_millis(gave_up.0 - t0) <= params().max_transmit_wait());
            assert_eq!(gave_up.1.exchange, 100);
        }
    }
}
