//! What the signing device ([`crate::Device`]) and the PSK-only node ([`crate::PskNode`]) share
//! of a CoAP client endpoint: the message core's table of requests
//! ([`sigil_coap::exchange::client`]) with one request at a time (NSTART 1), the bounded queue
//! of events, and the tokens (RFC 7252 §5.3.1).

use crate::machine::MAX_DATAGRAM;
use crate::DeviceError;
use sigil_coap::exchange::client::{self, Client, NewRequest};
use sigil_coap::exchange::Token;
use sigil_coap::{option, Code, Message};
use sigil_crypto::CryptoProvider;
use sigil_time::Instant;

/// Empty messages (ACK, RST) waiting to be sent.
const EMPTY_QUEUE: usize = 4;
/// Confirmable responses remembered to acknowledge them again (RFC 7252 §4.5).
const RECENT_CON: usize = 4;

/// The device's requests: one at a time; `X` says what each is for.
pub(crate) type Requests<X> = Client<X, 1, MAX_DATAGRAM, EMPTY_QUEUE, RECENT_CON>;

/// Starts the request for `exchange`, in place of an unsent Non-confirmable one: `build` writes
/// it (given the message ID and token) into the table's buffer; a Confirmable one starts its
/// retransmission timer with the token's jitter value `random`.
pub(crate) fn start<X: Copy>(
    requests: &mut Requests<X>,
    now: Instant,
    (exchange, confirmable): (X, bool),
    mid: u16,
    (token, random): ([u8; 4], u32),
    build: impl FnOnce(&mut [u8; MAX_DATAGRAM], u16, &[u8; 4]) -> Result<usize, DeviceError>,
) -> Result<(), DeviceError> {
    requests.clear();
    let req = NewRequest {
        exchange,
        confirmable,
        mid,
        token: Token::new(&token).ok_or(DeviceError::Encoding)?,
        random,
    };
    match requests.start(now, req, |buf| build(buf, mid, &token)) {
        Ok(_) => Ok(()),
        Err(client::StartError::Build(e)) => Err(e),
        Err(_) => Err(DeviceError::TooLarge),
    }
}

/// Runs the request's timer at `now` (retransmissions counted in `retransmissions`): the
/// exchange that failed, retransmissions exhausted or the wait for a separate response over.
pub(crate) fn on_timer<X: Copy>(
    requests: &mut Requests<X>,
    now: Instant,
    retransmissions: &mut u32,
) -> Option<X> {
    let before = requests.stats().retransmissions;
    let failed = requests.handle_timeout(now);
    *retransmissions =
        retransmissions.saturating_add(requests.stats().retransmissions.wrapping_sub(before));
    failed.map(|e| e.exchange)
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
    }
}
