//! What the signing device ([`crate::Device`]) and the PSK-only node ([`crate::PskNode`]) share
//! of a CoAP client endpoint: the one outstanding request with its retransmission state, the
//! bounded queues of Empty messages and events, and the tokens (RFC 7252 §5.3.1).

use crate::machine::MAX_DATAGRAM;
use sigil_coap::message::empty;
use sigil_coap::{
    option, Code, Message, MessageType, Retransmission, RetransmitDecision, TransmissionParameters,
};
use sigil_crypto::CryptoProvider;
use sigil_time::Instant;

/// The request in flight; `X` says what it was for.
pub(crate) struct Outstanding<X> {
    pub exchange: X,
    pub mid: u16,
    pub token: [u8; 4],
    pub buf: [u8; MAX_DATAGRAM],
    pub len: usize,
    /// `None` for Non-confirmable messages and after an Empty ACK.
    pub retransmission: Option<Retransmission>,
    /// Give up waiting for a (separate) response after this time.
    pub deadline: Instant,
    pub send_now: bool,
    pub confirmable: bool,
}

impl<X> Outstanding<X> {
    /// A new request for `exchange`: `build` writes it (given the message ID and token) into
    /// the buffer; a Confirmable one starts its retransmission timer with the token's jitter
    /// value `random`.
    #[allow(clippy::too_many_arguments)]
    pub fn start<E>(
        now: Instant,
        exchange: X,
        confirmable: bool,
        mid: u16,
        (token, random): ([u8; 4], u32),
        transmission: &TransmissionParameters,
        build: impl FnOnce(&mut [u8; MAX_DATAGRAM], u16, &[u8; 4]) -> Result<usize, E>,
    ) -> Result<Self, E> {
        let mut o = Self {
            exchange,
            mid,
            token,
            buf: [0; MAX_DATAGRAM],
            len: 0,
            retransmission: None,
            deadline: now + transmission.max_transmit_wait(),
            send_now: true,
            confirmable,
        };
        o.len = build(&mut o.buf, mid, &token)?;
        if confirmable {
            o.retransmission = Some(Retransmission::start(now, transmission, random));
        }
        Ok(o)
    }

    /// When its timer fires: the next retransmission, or the end of the wait for a response.
    pub fn wake_at(&self) -> Instant {
        match &self.retransmission {
            Some(r) => r.deadline(),
            None => self.deadline,
        }
    }
}

/// At most `N` items, oldest first, without allocation.
pub(crate) struct Queue<T: Copy, const N: usize>([Option<T>; N]);

impl<T: Copy, const N: usize> Queue<T, N> {
    pub const fn new() -> Self {
        Self([None; N])
    }

    /// Adds `item`; when full, the oldest is dropped so the newest state stays visible.
    pub fn push_newest(&mut self, item: T) {
        if let Some(slot) = self.0.iter_mut().find(|s| s.is_none()) {
            *slot = Some(item);
        } else if N > 0 {
            self.0.rotate_left(1);
            self.0[N - 1] = Some(item);
        }
    }

    /// Adds `item` if there is room; when full it is dropped.
    pub fn push_if_room(&mut self, item: T) {
        if let Some(slot) = self.0.iter_mut().find(|s| s.is_none()) {
            *slot = Some(item);
        }
    }

    /// Takes the oldest item.
    pub fn pop(&mut self) -> Option<T> {
        let first = self.0.first_mut()?.take();
        if first.is_some() {
            self.0.rotate_left(1);
        }
        first
    }
}

/// The token and the jitter value of request number `counter`: a keyed hash of the boot-time
/// random `seed` (32 bits of token, 32 bits for the caller's retransmission jitter).
pub(crate) fn token<C: CryptoProvider>(
    crypto: &C,
    seed: &[u8; 16],
    counter: u32,
) -> ([u8; 4], u32) {
    let h = crypto.sha256(&[seed, &counter.to_be_bytes()]);
    (
        [h[0], h[1], h[2], h[3]],
        u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
    )
}

/// Runs the outstanding request's timer at `now`: marks it for sending again when its
/// retransmission is due (counted in `retransmissions`). True when the exchange has failed:
/// retransmissions exhausted, or the wait for a separate response over.
pub(crate) fn on_timer<X>(
    outstanding: &mut Option<Outstanding<X>>,
    now: Instant,
    retransmissions: &mut u32,
) -> bool {
    let Some(o) = outstanding.as_mut() else {
        return false;
    };
    match o.retransmission.as_mut() {
        Some(r) => match r.on_timer(now) {
            RetransmitDecision::Wait => false,
            RetransmitDecision::Resend => {
                o.send_now = true;
                *retransmissions += 1;
                false
            }
            RetransmitDecision::GiveUp => true,
        },
        None => now >= o.deadline,
    }
}

/// What a received message leaves for the machine to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// Nothing more: the message layer dealt with it (or it was unexpected and counted).
    Handled,
    /// A Reset to the outstanding Confirmable request.
    Reset,
    /// A response to the outstanding request (piggy-backed or separate).
    Response,
}

/// The message layer (RFC 7252 §4) of a client with one request outstanding: an ACK or Reset
/// must match its message ID; an Empty ACK stops retransmission and keeps waiting for the
/// separate response (§5.2.2); a Confirmable response is acknowledged (again, if it is a
/// duplicate of one already handled, §4.5); a request to the endpoint or a response nobody
/// waits for is counted in `unexpected` and, if Confirmable, rejected with Reset (§4.2, §4.3).
#[allow(clippy::too_many_arguments)]
pub(crate) fn receive<X, const N: usize>(
    msg: &Message<'_>,
    now: Instant,
    outstanding: &mut Option<Outstanding<X>>,
    recent_con: &mut [Option<u16>; 4],
    empties: &mut Queue<[u8; 4], N>,
    transmission: &TransmissionParameters,
    unexpected: &mut u32,
) -> Incoming {
    match msg.mtype {
        MessageType::Reset | MessageType::Acknowledgement => {
            let matches = outstanding
                .as_ref()
                .is_some_and(|o| o.mid == msg.message_id && o.confirmable);
            if !matches {
                *unexpected += 1;
                return Incoming::Handled;
            }
            if msg.mtype == MessageType::Reset {
                return Incoming::Reset;
            }
            if msg.code == Code::EMPTY {
                if let Some(o) = outstanding.as_mut() {
                    o.retransmission = None;
                    o.deadline = now + transmission.exchange_lifetime();
                }
                return Incoming::Handled;
            }
            Incoming::Response
        }
        MessageType::Confirmable | MessageType::NonConfirmable => {
            let confirmable = msg.mtype == MessageType::Confirmable;
            if confirmable && recent_con.contains(&Some(msg.message_id)) {
                empties.push_if_room(empty(MessageType::Acknowledgement, msg.message_id));
                return Incoming::Handled;
            }
            if msg.code.is_response() && outstanding.as_ref().is_some_and(|o| o.token == msg.token)
            {
                if confirmable {
                    empties.push_if_room(empty(MessageType::Acknowledgement, msg.message_id));
                    recent_con.rotate_right(1);
                    recent_con[0] = Some(msg.message_id);
                }
                return Incoming::Response;
            }
            *unexpected += 1;
            if confirmable {
                empties.push_if_room(empty(MessageType::Reset, msg.message_id));
            }
            Incoming::Handled
        }
    }
}

/// The next datagram to send into `buf`: a queued Empty message first, then the outstanding
/// request when it is due (a Non-confirmable one is forgotten once sent).
pub(crate) fn transmit<X, const N: usize>(
    empties: &mut Queue<[u8; 4], N>,
    outstanding: &mut Option<Outstanding<X>>,
    buf: &mut [u8],
) -> Option<usize> {
    if let Some(d) = empties.pop() {
        buf.get_mut(..4)?.copy_from_slice(&d);
        return Some(4);
    }
    let o = outstanding.as_mut()?;
    if !o.send_now {
        return None;
    }
    o.send_now = false;
    let out = buf.get_mut(..o.len)?;
    out.copy_from_slice(&o.buf[..o.len]);
    let n = o.len;
    if !o.confirmable {
        // Non-confirmable: fire and forget.
        *outstanding = None;
    }
    Some(n)
}

/// Longest wait a 5.03's Max-Age may impose on a deferred reading: an hour, so that a hostile
/// answer cannot park it for days.
const MAX_DEFERRAL_SECS: u32 = 3600;

/// Seconds before a reading the broker answered with a server error (5.xx) is sent again.
/// 5.03 says when (Max-Age, RFC 7252 §5.9.3.4 and §5.10.5; 60 s without one, at most
/// [`MAX_DEFERRAL_SECS`]); any other 5.xx (e.g. 5.00 while the broker's database was busy)
/// backs off 1 s, 2 s, 4 s ... 64 s, counted in `failures` (reset by the caller on success).
pub(crate) fn retry_delay(msg: &Message<'_>, failures: &mut u32) -> u32 {
    if msg.code == Code::SERVICE_UNAVAILABLE {
        return msg
            .uint_option(option::MAX_AGE)
            .unwrap_or(60)
            .min(MAX_DEFERRAL_SECS);
    }
    let secs = 1u32 << (*failures).min(6);
    *failures = failures.saturating_add(1);
    secs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_keep_order_and_their_bound() {
        let mut q: Queue<u8, 3> = Queue::new();
        for i in 0..5 {
            q.push_newest(i);
        }
        assert_eq!(
            (q.pop(), q.pop(), q.pop(), q.pop()),
            (Some(2), Some(3), Some(4), None)
        );
        let mut e: Queue<u8, 2> = Queue::new();
        for i in 0..5 {
            e.push_if_room(i);
        }
        assert_eq!((e.pop(), e.pop(), e.pop()), (Some(0), Some(1), None));
    }
}
