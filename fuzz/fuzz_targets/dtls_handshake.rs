//! DTLS handshake parsing: fragments, bounded reassembly, and the hello messages.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_dtls::handshake::{ClientHello, Fragment, HelloVerifyRequest, Reassembler, ServerHello};
use sigil_dtls::wire::HandshakeType;

fuzz_target!(|data: &[u8]| {
    let mut r = Reassembler::<512>::new();
    let mut rest = data;
    while !rest.is_empty() {
        let Ok((f, next)) = Fragment::parse(rest) else {
            break;
        };
        rest = next;
        match r.add(&f) {
            Ok(Some(body)) => {
                assert!(body.len() <= 512);
                let _ = match f.msg_type {
                    HandshakeType::CLIENT_HELLO => ClientHello::parse(body).map(|_| ()),
                    HandshakeType::SERVER_HELLO => ServerHello::parse(body).map(|_| ()),
                    _ => HelloVerifyRequest::parse(body).map(|_| ()),
                };
            }
            Ok(None) => {}
            Err(_) => r.reset(),
        }
    }
    let _ = ClientHello::parse(data);
    let _ = ServerHello::parse(data);
});
