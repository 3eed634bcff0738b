#![no_main]
//! The message core's state machines: Observe (sigil_coap::exchange::observe), block-wise
//! transfer (exchange::blockwise) and deduplication (exchange::dedup), under any sequence of
//! registrations, notifications, acknowledgements, Resets, cancellations, blocks, 2.31
//! echoes, received message IDs, answers and elapsed time. Nothing panics; the observer table
//! keeps its caps; sequence numbers stay 24-bit and rise for each observer by the RFC 7641
//! §3.4 rule; retransmissions come at RFC 7252 timing and end; the client's ordering accepts a
//! number only once; a reassembly never takes more than its maximum nor a block out of
//! sequence; a sender's blocks stay inside its body; the dedup table keeps its caps and never
//! calls a remembered message new within its lifetime.
use libfuzzer_sys::fuzz_target;
use sigil_coap::exchange::observe::{
    is_newer, Due, ObserveParams, Observer, Observers, Ordering, SEQ_MASK,
};
use sigil_coap::exchange::blockwise::{block2_of, Reassembly, Sender};
use sigil_coap::exchange::dedup::{Dedup, Received, Slots};
use sigil_coap::exchange::Token;
use sigil_coap::{BlockOption, TransmissionParameters};
use sigil_time::Instant;
use std::time::Duration;

const CAP: usize = 8;
const PER_HOST: usize = 3;

fuzz_target!(|data: &[u8]| {
    let params = ObserveParams {
        max_observers: CAP,
        max_per_host: PER_HOST,
        confirmable_every: 3,
        refresh: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    let slots: [Option<Observer<u8, u8, u8>>; CAP + 2] = Default::default();
    let mut t = Observers::new(slots, params);
    let mut now = 0u64;
    let mut mid = 0u16;
    let mut order = Ordering::new();
    let mut sender = Sender::new(0, 0);
    let mut reassembly = Reassembly::new(3000);
    let mut dedup: Dedup<u8, Slots<u8, 6, 8>> = Dedup::new(&TransmissionParameters::default(), 2);
    for op in data.chunks(3) {
        let (a, b, c) = (op[0], *op.get(1).unwrap_or(&0), *op.get(2).unwrap_or(&0));
        let at = Instant::from_millis(now);
        match a % 12 {
            0 => {
                let peer = b % 16;
                if let Ok((id, seq)) =
                    t.register(peer, peer % 5, c % 4, Token::new(&[c]).unwrap(), at)
                {
                    assert!(t.get(id).is_some());
                    assert!(seq <= SEQ_MASK);
                }
            }
            1 => {
                let ids: Vec<_> = t.iter().map(|(id, _)| id).collect();
                if let Some(id) = ids.get(usize::from(b) % ids.len().max(1)).copied() {
                    let before = t.get(id).unwrap().seq();
                    mid = mid.wrapping_add(1);
                    let waiting = t.get(id).unwrap().awaiting_ack();
                    match t.notification(id, at, mid, u32::from(c)) {
                        Some(n) => {
                            assert!(!waiting, "one Confirmable notification in flight at most");
                            assert!(n.seq <= SEQ_MASK);
                            assert!(is_newer(before, at, n.seq, at), "{before} then {}", n.seq);
                        }
                        None => assert!(waiting, "held only while one is unacknowledged"),
                    }
                }
            }
            2 => {
                if let Some(id) = t.on_ack(&(b % 16), mid.wrapping_sub(u16::from(c % 4)), at) {
                    assert!(!t.get(id).unwrap().awaiting_ack());
                    let _ = t.take_held(id);
                }
            }
            3 => {
                let _ = t.on_reset(&(b % 16), mid.wrapping_sub(u16::from(c % 4)));
            }
            4 => {
                let _ = t.cancel(&(b % 16), &Token::new(&[c]).unwrap());
            }
            5 => {
                now += u64::from(b) * 250 + u64::from(c);
                let at = Instant::from_millis(now);
                let mut steps = 0;
                while let Some(due) = t.poll(at) {
                    steps += 1;
                    assert!(steps <= 2 * (CAP + 2) + 2, "poll keeps finding work");
                    match due {
                        Due::Resend(id) => assert!(t.get(id).is_some_and(|o| o.awaiting_ack())),
                        Due::Refresh(id) => assert!(t.get(id).is_some()),
                        Due::GaveUp { id, .. } => assert!(t.get(id).is_none()),
                    }
                }
                if let Some(w) = t.next_wake() {
                    let _ = w;
                }
            }
            6 => {
                let _ = t.retain(|o| o.resource != b % 4);
            }
            8 => {
                // A body in Block1 blocks, and the peer's 2.31 echoes.
                if b & 0x80 != 0 {
                    sender = Sender::new(usize::from(b & 0x7f) * 97 + usize::from(c), c % 8);
                } else {
                    let echo = BlockOption::new(u32::from(b & 0x1f), b & 0x20 != 0, c % 7);
                    let before = sender;
                    if sender.continued(Some(echo)).is_err() {
                        assert_eq!(sender, before, "a refused 2.31 changes nothing");
                    }
                }
                let r = sender.range();
                assert!(r.start <= r.end);
                if let Some(blk) = sender.block() {
                    assert_eq!(blk.offset(), r.start);
                    assert_eq!(blk.more, !sender.is_last());
                }
            }
            9 => {
                // Blocks received: in sequence, whole before the last, within the maximum.
                let blk = BlockOption::new(u32::from(b >> 2), b & 1 != 0, c % 7);
                let before = reassembly;
                let len = usize::from(c) * 5;
                match reassembly.accept(blk, len) {
                    Ok(at) => {
                        assert_eq!(at.offset, blk.offset());
                        assert!(!blk.more || len == blk.size());
                        assert!(reassembly.received() <= 3000);
                    }
                    Err(_) => assert_eq!(reassembly, before),
                }
                if let Some(next) = reassembly.next_request(c % 7) {
                    assert!(next.offset() <= reassembly.received());
                }
            }
            10 => {
                let ask = (b & 1 != 0).then(|| BlockOption::new(u32::from(b >> 1), false, c % 7));
                let len = usize::from(c) * 40;
                if let Ok((range, blk)) = block2_of(ask, c >> 5, len) {
                    assert!(range.start <= range.end && range.end <= len);
                    match blk {
                        Some(blk) => {
                            assert_eq!(blk.offset(), range.start);
                            assert_eq!(blk.more, range.end < len);
                        }
                        None => assert_eq!(range, 0..len),
                    }
                }
            }
            11 => {
                // Received message IDs from a few peers, and their answers.
                let (peer, id) = (b % 5, u16::from(c % 6));
                let at = Instant::from_millis(now);
                if b & 0x80 != 0 {
                    dedup.answered(peer, id, &[c; 9][..usize::from(c % 10)]);
                } else if let Received::Again(answer) = dedup.receive(peer, id, at) {
                    assert!(answer.len() <= 8);
                }
                assert!(dedup.len() <= 6);
                assert!((0..5).all(|p| dedup.of_peer(&p) <= 2));
            }
            _ => {
                // The client side: a number is accepted once.
                let seq = u32::from_be_bytes([0, a, b, c]);
                let at = Instant::from_millis(now);
                if order.accept(seq, at) {
                    assert!(!order.clone().accept(seq, at));
                }
            }
        }
        assert!(t.len() <= CAP);
        for h in 0..5u8 {
            assert!(t.held_by(&h) <= PER_HOST);
        }
        assert_eq!(t.iter().count(), t.len());
    }
});
