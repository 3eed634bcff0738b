#![no_main]
//! The server's request handling: any datagram that parses as CoAP becomes a request to the
//! Resource Directory and broker (on an in-memory database); nothing panics, every request
//! gets one reply.
use libfuzzer_sys::fuzz_target;
use sigil_coap::Message;
use sigil_server::service::{Request, Service, ServiceConfig};
use sigil_server::{Stats, Store};
use std::sync::Mutex;

static SERVICE: Mutex<Option<Service>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Message::parse(data) else { return };
    let req = Request {
        peer: "127.0.0.1:5683".parse().unwrap(),
        confirmable: true,
        message_id: Some(m.message_id),
        code: m.code,
        path: m.uri_path().filter_map(Result::ok).map(str::to_string).collect(),
        query: m.uri_query().filter_map(Result::ok).map(str::to_string).collect(),
        content_format: m.content_format().map(|c| c.0),
        accept: m.accept().map(|c| c.0),
        payload: m.payload.to_vec(),
    };
    let mut guard = SERVICE.lock().unwrap();
    let svc = guard.get_or_insert_with(|| {
        let config = ServiceConfig { verify_workers: 1, ..Default::default() };
        Service::new(Store::open_in_memory().unwrap(), config, Stats::default()).unwrap()
    });
    let replies = svc.handle_batch(&[req], 1_700_000_000);
    assert_eq!(replies.len(), 1);
});
