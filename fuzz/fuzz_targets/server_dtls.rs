//! The server's coaps:// layer below the socket: datagrams from a handful of addresses (the
//! first byte of each chunk picks the sender) through the DTLS tables, the dispatcher and the
//! service. Nothing may panic, the tables stay within their caps, and no state is made for
//! a peer that did not return a valid cookie.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_crypto::{CryptoProvider, RustCrypto, SignatureAlgorithm};
use sigil_server::secure::{DtlsConfig, SecureLayer, SharedTrust};
use sigil_server::{Dispatcher, ServerConfig, Stats, Store};
use std::net::SocketAddr;

struct Fixed;
impl sigil_crypto::Rng for Fixed {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
        buf.fill(7);
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let stats = Stats::default();
    let mut config = ServerConfig::new("127.0.0.1:5683".parse().unwrap(), ":memory:".into());
    config.service.verify_workers = 1;
    let svc = sigil_server::service::Service::new(
        Store::open_in_memory().unwrap(),
        config.service.clone(),
        stats.clone(),
    )
    .unwrap();
    let mut d = Dispatcher::new(config, svc, stats.clone(), [7; 32]);
    let mut dc = DtlsConfig::new("127.0.0.1:5684".parse().unwrap());
    dc.max_handshakes = 4;
    dc.max_sessions = 8;
    let key = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Fixed)
        .unwrap();
    let mut layer = SecureLayer::new(dc, key, [1; 32], SharedTrust::default(), stats);
    let mut now = 0u64;
    for chunk in data.split(|b| *b == 0xa5).take(64) {
        let Some((&who, datagram)) = chunk.split_first() else {
            continue;
        };
        let from = SocketAddr::from(([10, 0, 0, who % 8], 4000 + u16::from(who >> 3)));
        now += 100;
        let out = sigil_server::socket::secure_batch(
            &mut d,
            &mut layer,
            vec![(from, None, datagram.to_vec())],
            sigil_time::Instant::from_millis(now),
            sigil_time::UnixTime::from_secs(1_700_000_000),
            &mut Fixed,
        );
        for (_, bytes) in &out {
            assert!(bytes.len() <= 1500);
        }
        assert!(layer.handshakes() <= 4 && layer.sessions() <= 8);
    }
});
