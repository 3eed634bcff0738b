//! Client certificates (RFC 7925 §4.4) at the server's DTLS layer, on both carriers: a chain is
//! checked at the Unix time the caller passes with the ClientHello, through the handshake's
//! offer, not at a clock the trust keeps. The test PKI's certificates are valid from 1 January
//! 2025.

use sigil_crypto::{CryptoProvider, RustCrypto};
use sigil_dtls::{Config, Connection, Credentials, X509Anchors};
use sigil_identity::Identity;
use sigil_server::secure::{DtlsConfig, SecureLayer, SharedTrust};
use sigil_server::Stats;
use sigil_testkit::dtls::at as ms;
use sigil_testkit::{pki, Seeded};
use sigil_time::{Instant, UnixTime};
use std::net::SocketAddr;

/// 1 June 2026: every certificate of the test PKI is valid.
const VALID: i64 = 1_780_000_000;
/// 14 November 2023: before the test PKI's certificates are valid.
const BEFORE: i64 = 1_700_000_000;

/// A server that asks for client certificates chained to the test root, with the client's
/// certified key provisioned: the layer and its stats.
fn server(coap_carrier: bool) -> (SecureLayer, Stats) {
    let client_key = RustCrypto
        .public_key(&pki::secret(pki::CLIENT_KEY))
        .unwrap();
    let mut provisioned = sigil_server::Credentials::default();
    provisioned
        .authorized
        .insert(Identity::of_key(&RustCrypto, &client_key, b"").unwrap());
    let trust = SharedTrust::with_anchors(vec![pki::ROOT.to_vec()]);
    trust.replace(provisioned);
    let mut config = DtlsConfig::new("127.0.0.1:5684".parse().unwrap());
    config.certificate_chain = pki::server_chain().iter().map(|c| c.to_vec()).collect();
    config.certificate_key = Some(pki::secret(pki::SERVER_KEY));
    config.coap_carrier = coap_carrier;
    let stats = Stats::default();
    let layer = SecureLayer::new(
        config,
        pki::secret(pki::SERVER_KEY),
        [7; 32],
        trust,
        stats.clone(),
    );
    (layer, stats)
}

/// What the client trusts: chains to the test root, checked at [`VALID`].
fn client_trust() -> X509Anchors<'static, RustCrypto> {
    static ANCHORS: [&[u8]; 1] = [pki::ROOT];
    X509Anchors {
        crypto: RustCrypto,
        anchors: &ANCHORS,
        now: UnixTime::from_secs(VALID),
        rpk: sigil_dtls::NoTrust,
    }
}

/// A certificate client over either carrier.
trait Handshake {
    fn transmit(&mut self, now: Instant, out: &mut Vec<Vec<u8>>);
    fn receive(&mut self, now: Instant, datagram: &[u8]);
    fn established(&self) -> bool;
}

impl Handshake for Connection<RustCrypto, X509Anchors<'static, RustCrypto>> {
    fn transmit(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        let mut buf = [0u8; 2048];
        while let Some(n) = self.poll_transmit(now, &mut buf) {
            out.push(buf[..n].to_vec());
        }
    }
    fn receive(&mut self, now: Instant, datagram: &[u8]) {
        let _ = self.handle_datagram(now, datagram);
    }
    fn established(&self) -> bool {
        self.is_established()
    }
}

impl Handshake for sigil_dtls_coap::Client<RustCrypto, X509Anchors<'static, RustCrypto>> {
    fn transmit(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        let mut buf = vec![0u8; sigil_dtls_coap::MAX_DATAGRAM];
        while let Some(n) = self.poll_transmit(now, &mut buf) {
            out.push(buf[..n].to_vec());
        }
    }
    fn receive(&mut self, now: Instant, datagram: &[u8]) {
        let _ = self.handle_datagram(now, datagram, &mut Seeded(5));
    }
    fn established(&self) -> bool {
        self.is_established()
    }
}

/// A certificate client in DTLS records, or over the CoAP carrier.
fn client(coap_carrier: bool) -> Box<dyn Handshake> {
    let chain = pki::client_chain();
    let key = pki::secret(pki::CLIENT_KEY);
    let credentials = Credentials::Certificate(Some((&chain, &key)));
    if coap_carrier {
        let config = sigil_dtls_coap::CarrierConfig::default();
        Box::new(
            sigil_dtls_coap::Client::connect(
                RustCrypto,
                client_trust(),
                config,
                &mut Seeded(3),
                credentials,
                ms(0),
            )
            .unwrap(),
        )
    } else {
        Box::new(
            Connection::connect(
                RustCrypto,
                client_trust(),
                Config::default(),
                &mut Seeded(3),
                credentials,
                ms(0),
            )
            .unwrap(),
        )
    }
}

/// Runs a certificate client's handshake against the layer, the layer's clock at `unix`; true
/// when the client ends up established.
fn handshake(layer: &mut SecureLayer, coap_carrier: bool, unix: i64) -> bool {
    let addr: SocketAddr = "10.0.0.1:40001".parse().unwrap();
    let mut client = client(coap_carrier);
    let mut rng = Seeded(4);
    for step in 0..40u64 {
        let now = ms(step * 10);
        let mut sent = vec![];
        client.transmit(now, &mut sent);
        if sent.is_empty() {
            break;
        }
        let mut out = vec![];
        for d in sent {
            layer.handle_datagram(now, UnixTime::from_secs(unix), &mut rng, addr, &d, &mut out);
        }
        for (_, d) in out {
            client.receive(now, &d);
        }
    }
    client.established()
}

fn checked_at_the_time_passed(coap_carrier: bool) {
    let (mut layer, stats) = server(coap_carrier);
    assert!(
        !handshake(&mut layer, coap_carrier, BEFORE),
        "a chain not yet valid"
    );
    assert_eq!(layer.sessions(), 0);
    assert_eq!(stats.get("dtls.handshake_completed"), 0);

    assert!(
        handshake(&mut layer, coap_carrier, VALID),
        "the same chain, once valid"
    );
    assert_eq!(layer.sessions(), 1);
    assert_eq!(stats.get("dtls.handshake_completed"), 1);
    assert_eq!(layer.authenticated().len(), 1);
}

#[test]
fn a_client_chain_is_checked_at_the_time_the_caller_passes() {
    checked_at_the_time_passed(false);
}

#[test]
fn a_client_chain_over_the_coap_carrier_is_checked_at_the_time_the_caller_passes() {
    checked_at_the_time_passed(true);
}
