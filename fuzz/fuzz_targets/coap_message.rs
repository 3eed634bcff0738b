#![no_main]
//! The CoAP codec: any bytes parse or fail, and a parsed message re-encodes to one that parses
//! to the same options and payload.
use libfuzzer_sys::fuzz_target;
use sigil_coap::{Message, MessageBuilder};

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Message::parse(data) else { return };
    let opts: Vec<_> = m.options().collect();
    for o in &opts {
        let _ = sigil_coap::BlockOption::decode(o.value);
    }
    let _ = m.uri_path().count();
    let _ = m.query_param("ep");
    let _ = m.unknown_critical_option();
    let mut buf = vec![0u8; data.len() + 64];
    let mut b = MessageBuilder::new(&mut buf, m.mtype, m.code, m.message_id, m.token).unwrap();
    for o in &opts {
        b.option(o.number, o.value).unwrap();
    }
    let n = b.finish_with_payload(m.payload).unwrap();
    let again = Message::parse(&buf[..n]).unwrap();
    assert_eq!(again.options().collect::<Vec<_>>(), opts);
    assert_eq!(again.payload, m.payload);
});
