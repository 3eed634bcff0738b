//! The DTLS handshake over its two carriers on the emulated 802.15.4 link, device on the OPAL:
//! both complete on a clean link in a number of datagrams and frames fixed by the seed; the
//! CoAP carrier carries the same DTLS bytes plus CoAP's header, token and options; small
//! blocks cost a request per block; loss is recovered by each carrier's own retransmission.

use sigil_netsim::carriers::{handshake_over_coap, CoapCarrier, CoapTally};
use sigil_netsim::channel::Loss;
use sigil_netsim::dtls::{handshake, Handshake, Suite};
use sigil_netsim::energy::{CORTEX_M4_PORTABLE, OPAL};
use sigil_netsim::experiments::{CARRIER_DEADLINE_MS, CARRIER_RECORD_TIMERS};
use sigil_netsim::net::LinkConfig;

fn opal(loss: f64) -> LinkConfig {
    LinkConfig {
        device_hz: OPAL.hz,
        loss: Loss::Bernoulli { p: loss },
        ..Default::default()
    }
}

fn records(link: LinkConfig, suite: Suite, mtu: usize, seed: u64) -> Handshake {
    handshake(
        link,
        CORTEX_M4_PORTABLE,
        suite,
        mtu,
        CARRIER_RECORD_TIMERS,
        seed,
    )
    .0
}

fn coap(link: LinkConfig, suite: Suite, block: usize, seed: u64) -> (Handshake, CoapTally) {
    handshake_over_coap(
        link,
        CORTEX_M4_PORTABLE,
        suite,
        CoapCarrier::with_block(block),
        CARRIER_DEADLINE_MS,
        seed,
    )
    .expect("valid carrier configuration")
}

#[test]
fn psk_over_both_carriers_on_a_clean_link() {
    let r = records(opal(0.0), Suite::Psk, 1024, 1);
    let (c, t) = coap(opal(0.0), Suite::Psk, 1024, 1);
    assert!(r.completed && c.completed);
    // Records: ClientHello, HelloVerifyRequest, ClientHello with the cookie, the server's
    // flight, the client's, the server's ChangeCipherSpec and Finished: one frame each.
    assert_eq!((r.net.datagrams_sent, r.net.frames_sent), (6, 6));
    assert_eq!(r.net.frames_lost, 0);
    // CoAP: PUT, 4.01, PUT, 2.01, POST, 2.04: the same six datagrams, but CoAP's header,
    // token and options push three of them past one frame's 107 bytes of UDP payload.
    assert_eq!(
        (t.put, t.post, t.get, t.responses, t.continues),
        (2, 1, 0, 3, 0)
    );
    assert_eq!(t.retransmissions, 0);
    assert_eq!((c.net.datagrams_sent, c.net.frames_sent), (6, 9));
    // The DTLS records are the same bytes either way; CoAP adds its header, token and
    // options on top: 14 bytes for each PUT /dtls, 9 for each bare response, 25 for the 2.01
    // and the POST, which name the session (`dtls/<id>`, a random ten-digit id here).
    assert_eq!(r.net.udp_bytes, 482);
    assert_eq!(t.header_bytes, 14 + 9 + 14 + 25 + 25 + 9);
    assert_eq!(c.net.udp_bytes, r.net.udp_bytes + t.header_bytes);
    // The device's crypto is the same: neither carrier makes it compute more.
    assert_eq!(r.device_ops, c.device_ops);
    assert!(c.time_ms > r.time_ms);
}

#[test]
fn raw_public_keys_at_each_datagram_budget() {
    // (budget, record datagrams, record frames, CoAP datagrams, CoAP frames, GETs, 2.31s)
    let expected = [
        (64, 24, 26, 30, 32, 7, 5),
        (128, 12, 19, 16, 24, 3, 2),
        (256, 8, 17, 10, 18, 1, 1),
        (512, 6, 15, 6, 15, 0, 0),
        (1024, 6, 15, 6, 15, 0, 0),
    ];
    for (size, rd, rf, cd, cf, gets, continues) in expected {
        let r = records(opal(0.0), Suite::RpkMutual, size, 1);
        let (c, t) = coap(opal(0.0), Suite::RpkMutual, size, 1);
        assert!(r.completed && c.completed, "{size}");
        assert_eq!(
            (r.net.datagrams_sent, r.net.frames_sent),
            (rd, rf),
            "records, MTU {size}"
        );
        assert_eq!(
            (c.net.datagrams_sent, c.net.frames_sent),
            (cd, cf),
            "CoAP, block {size}"
        );
        // Block2: one GET per block of the server's flight after the first; Block1: one
        // 2.31 Continue per block of the client's flight before the last.
        assert_eq!((t.get, t.continues), (gets, continues), "block {size}");
        // Every request is answered once; nothing is sent twice on a clean link.
        assert_eq!(t.responses, t.requests());
        assert_eq!(t.retransmissions, 0);
        assert_eq!(u64::from(t.requests() + t.responses), c.net.datagrams_sent);
        assert_eq!(c.device_ops, r.device_ops);
        assert_eq!(c.device_ops.sign, 1);
        assert_eq!(c.device_ops.agree, 1);
    }
}

#[test]
fn whole_flights_over_coap_carry_fewer_dtls_bytes_than_fragments() {
    // The record carrier repeats a record header and a handshake fragment header in every
    // fragment; the CoAP carrier sends each message whole in one record and cuts the flight
    // in blocks instead, so its DTLS bytes do not depend on the block size.
    let (c1024, t1024) = coap(opal(0.0), Suite::X509Mutual, 1024, 1);
    let (c64, t64) = coap(opal(0.0), Suite::X509Mutual, 64, 1);
    assert!(c1024.completed && c64.completed);
    let dtls = |h: &Handshake, t: &CoapTally| h.net.udp_bytes - t.header_bytes;
    assert_eq!(dtls(&c64, &t64), dtls(&c1024, &t1024));
    assert!(t64.header_bytes > 5 * t1024.header_bytes);
    let calibrated = sigil_netsim::experiments::calibrated_timers(
        opal(0.0),
        CORTEX_M4_PORTABLE,
        Suite::X509Mutual,
        64,
    );
    let (r64, _) = handshake(
        opal(0.0),
        CORTEX_M4_PORTABLE,
        Suite::X509Mutual,
        64,
        calibrated,
        1,
    );
    assert!(r64.completed);
    assert!(r64.net.udp_bytes > dtls(&c64, &t64));
}

#[test]
fn the_same_seed_gives_the_same_run() {
    for seed in [3, 8] {
        let a = coap(opal(0.1), Suite::RpkMutual, 256, seed);
        let b = coap(opal(0.1), Suite::RpkMutual, 256, seed);
        assert_eq!(a.0.net, b.0.net);
        assert_eq!(a.1, b.1);
        let a = records(opal(0.1), Suite::RpkMutual, 256, seed);
        let b = records(opal(0.1), Suite::RpkMutual, 256, seed);
        assert_eq!(a.net, b.net);
    }
}

#[test]
fn loss_is_recovered_by_each_carriers_own_retransmission() {
    let clean_records = records(opal(0.0), Suite::Psk, 256, 1);
    let (mut records_done, mut records_sent_more) = (0, 0);
    let (mut coap_done, mut coap_retransmitted) = (0, 0);
    for seed in 1..=30 {
        let r = records(opal(0.1), Suite::Psk, 256, seed);
        if r.completed {
            records_done += 1;
        }
        if r.net.datagrams_sent > clean_records.net.datagrams_sent {
            records_sent_more += 1;
        }
        let (c, t) = coap(opal(0.1), Suite::Psk, 256, seed);
        if c.completed {
            coap_done += 1;
        } else {
            // The client gave up: one request went 1 + MAX_RETRANSMIT (4) times unanswered.
            assert!(t.retransmissions >= 4, "seed {seed}: {t:?}");
        }
        if t.retransmissions > 0 {
            coap_retransmitted += 1;
        } else {
            assert_eq!(t.requests(), 3, "seed {seed}");
        }
        // Only the client retransmits: a lost response is answered again from the
        // endpoint's cache, so responses never outnumber requests.
        assert!(t.responses <= t.requests(), "seed {seed}");
    }
    // At 10 % frame loss a handshake of 6-9 frames loses one in about half the runs, and
    // nearly every run recovers.
    assert!(
        records_done >= 28 && coap_done >= 28,
        "{records_done} {coap_done}"
    );
    assert!(coap_retransmitted >= 5, "{coap_retransmitted}/30");
    assert!(records_sent_more >= 5, "{records_sent_more}/30");
}
