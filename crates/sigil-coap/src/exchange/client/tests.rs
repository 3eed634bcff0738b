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
