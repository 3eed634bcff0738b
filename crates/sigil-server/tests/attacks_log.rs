//! Attack 8 of the control-plane review: refusals were logged without limit (92 MB of log in
//! 10 s from one sender). One sender now gets 100,000 refusals of two kinds within ten seconds
//! of server time; the log written stays within the limiter's budget (a burst per kind per
//! window, plus one summary line), while the refusal counters stay exact.

use sigil_coap::{option, Code, MessageBuilder, MessageType};
use sigil_testkit::server::plain_dispatcher;
use sigil_time::{Instant, UnixTime};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

const NOW: i64 = 1_700_000_000;

/// A log sink that keeps only the number of bytes written.
#[derive(Clone, Default)]
struct Counting(Arc<Mutex<usize>>);

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        *self.0.lock().unwrap() += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn request(mid: u16, path: &[&str], query: &[&str]) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    let mut b =
        MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::POST, mid, &[1]).unwrap();
    for p in path {
        b.option(option::URI_PATH, p.as_bytes()).unwrap();
    }
    for q in query {
        b.option(option::URI_QUERY, q.as_bytes()).unwrap();
    }
    let n = b.finish_with_payload(b"</x>").unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn a_refusal_flood_from_one_sender_writes_a_bounded_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let (mut d, stats, _) = plain_dispatcher(&db, 7, |_| {});

    let sink = Counting::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // One host; a new source port whenever the message IDs would wrap (duplicates are
    // answered from the deduplication cache, not refused again).
    let sender = |i: u32| SocketAddr::from(([192, 0, 2, 7], 40000 + (i >> 16) as u16));
    const N: u32 = 100_000;
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..N {
            // Ten seconds of server time, 10,000 datagrams a second.
            let ms = u64::from(i) / 10;
            let mid = i as u16;
            let dgram = if i % 2 == 0 {
                // A registration with a malformed endpoint name (logged at warn).
                request(mid, &["rd"], &["ep=not-an-identity"])
            } else {
                // A registration without an endpoint name.
                request(mid, &["rd"], &[])
            };
            d.handle_at(
                vec![(sender(i), dgram)],
                Instant::from_millis(ms),
                UnixTime::from_secs(NOW + (ms / 1000) as i64),
            );
        }
        // A request after the flood closes the last window and writes its summary.
        d.handle_at(
            vec![(sender(N), request(0xffff, &["rd"], &[]))],
            Instant::from_millis(60_000),
            UnixTime::from_secs(NOW + 60),
        );
    });
    // Exact counts despite the thinned log.
    assert_eq!(stats.get("register.rejected.bad_ep"), u64::from(N / 2));
    assert_eq!(
        stats.get("register.rejected.missing_ep"),
        u64::from(N / 2) + 1
    );
    let written = *sink.0.lock().unwrap();
    // Two kinds × (20 lines + 1 summary) per 10 s window, two windows (the flood straddles
    // one boundary at most), lines well under 400 bytes: 34 KB. Without the limiter the
    // same flood writes about 15 MB.
    assert!(written < 34_000, "{written} bytes of log for {N} refusals");
    assert!(written > 0, "nothing was logged at all");
}
