//! The DTLS PSK state machines fed arbitrary datagram sequences. A deterministic test-only
//! crypto provider makes every MAC, cookie and Finished predictable (HMAC is all zeros, CCM-8
//! is the identity with an all-zero tag), so inputs get past authentication and reach every
//! state. Input: datagrams, each prefixed by a 2-byte length.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, Stateless,
};

#[path = "../common/dtls.rs"]
mod common;
use common::{Fixed, Keys, Transparent};

const PSK_ONLY: ServerCredentials<'static> = ServerCredentials {
    psk: true,
    key: None,
    require_client_key: false,
    ..ServerCredentials::NONE
};

/// The fuzz run's virtual clock (milliseconds).
fn ms(t: u64) -> sigil_time::Instant {
    sigil_time::Instant::from_millis(t)
}

fn datagrams(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    core::iter::from_fn(move || {
        if data.len() < 2 {
            return None;
        }
        let n = (usize::from(data[0]) << 8 | usize::from(data[1])).min(data.len() - 2);
        let d = &data[2..2 + n];
        data = &data[2 + n..];
        Some(d)
    })
}

fuzz_target!(|data: &[u8]| {
    let cookies = CookieKey::new([0; 32]);
    let mut server: Option<Connection<Transparent, Keys>> = None;
    let mut client = Connection::connect(
        Transparent,
        NoTrust,
        Config::default(),
        &mut Fixed,
        Credentials::Psk {
            identity: b"id",
            key: b"key!",
        },
        ms(0),
    )
    .unwrap();
    let mut out = [0u8; 2048];
    for (i, d) in datagrams(data).enumerate() {
        let now = i as u64 * 700;
        let _ = client.handle_datagram(ms(now), d);
        let _ = client.handle_timeout(ms(now));
        while client.poll_transmit(ms(now), &mut out).is_some() {}
        while client.poll_app_data(&mut out).is_some() {}
        match server.as_mut() {
            None => match cookies.respond(&Transparent, b"peer", d, &mut out) {
                Stateless::HelloVerify(n) => assert!(n <= d.len()),
                Stateless::Accept(cookie) => {
                    server = Connection::accept(
                        Transparent,
                        Keys,
                        Config::default(),
                        &PSK_ONLY,
                        &mut Fixed,
                        cookie,
                        d,
                        ms(now),
                    )
                    .ok()
                }
                Stateless::Drop(_) => {}
            },
            Some(s) => {
                let _ = s.handle_datagram(ms(now), d);
                let _ = s.handle_timeout(ms(now));
                while s.poll_transmit(ms(now), &mut out).is_some() {}
                while s.poll_app_data(&mut out).is_some() {}
            }
        }
    }
});
