#![no_main]
//! The server below the socket: any datagrams go through the Dispatcher (CoAP parsing,
//! deduplication, Block1 reassembly, Block2 slicing, response encoding) into the Resource
//! Directory and broker on an in-memory database. Nothing panics or recurses without bound,
//! and every answer is a well-formed CoAP message.
use libfuzzer_sys::fuzz_target;
use sigil_coap::Message;
use sigil_server::{Dispatcher, ServerConfig, Service, ServiceConfig, Stats, Store};
use sigil_time::{Instant, UnixTime};
use std::net::SocketAddr;
use std::sync::Mutex;

static DISPATCHER: Mutex<Option<Dispatcher>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut guard = DISPATCHER.lock().unwrap();
    let d = guard.get_or_insert_with(|| {
        let mut config = ServerConfig::new("127.0.0.1:5683".parse().unwrap(), ":memory:".into());
        config.service = ServiceConfig {
            verify_workers: 1,
            ..Default::default()
        };
        let svc = Service::new(
            Store::open_in_memory().unwrap(),
            config.service.clone(),
            Stats::default(),
        )
        .unwrap();
        Dispatcher::new(config, svc, Stats::default(), [7; 32])
    });
    // Split the input into up to four datagrams from two peers, so dedup and Block1 state
    // across datagrams is exercised.
    let peers: [SocketAddr; 2] = [
        "127.0.0.1:1000".parse().unwrap(),
        "127.0.0.1:2000".parse().unwrap(),
    ];
    let batch: Vec<(SocketAddr, Vec<u8>)> = data
        .split(|b| *b == 0xa5)
        .take(4)
        .enumerate()
        .map(|(i, part)| (peers[i % 2], part.to_vec()))
        .collect();
    for (_, out) in d.handle_at(batch, Instant::ZERO, UnixTime::from_secs(1_700_000_000)) {
        Message::parse(&out).expect("the server sends only well-formed CoAP");
    }
});
