//! A scripted CoAP server on a loopback socket, for the client's protocol tests.

use sigil_client::coap::CoapClient;
use sigil_coap::TransmissionParameters;
use std::time::Duration;
use tokio::net::UdpSocket;

/// A server socket on a free loopback port and a plain coap:// client of it.
pub async fn scripted() -> (UdpSocket, CoapClient) {
    let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr().unwrap();
    let client = CoapClient::connect(addr, TransmissionParameters::default())
        .await
        .unwrap();
    (server, client)
}

/// The next datagram the server receives (within 5 s) and its sender.
pub async fn recv(s: &UdpSocket) -> (Vec<u8>, std::net::SocketAddr) {
    let mut buf = [0u8; 2048];
    let (n, from) = tokio::time::timeout(Duration::from_secs(5), s.recv_from(&mut buf))
        .await
        .expect("the client sent something")
        .unwrap();
    (buf[..n].to_vec(), from)
}
