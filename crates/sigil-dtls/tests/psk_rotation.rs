//! A cached session is resumed only while the peer's PSK is the one it authenticated with:
//! replacing an identity's PSK (after a leak, say) also ends the resumption of the sessions
//! made with the old key, not only a revocation of the identity.

use sigil_crypto::RustCrypto;
use sigil_dtls::{
    Config, Connection, CookieKey, Credentials, NoTrust, ServerCredentials, Session, Stateless,
    Trust,
};
use sigil_testkit::Counter;
use sigil_time::Instant;

/// The server's store: identity "sensor-1" with `self.0` as its key.
struct Keys(&'static [u8; 16]);
impl Trust for Keys {
    fn psk(&self, identity: &[u8], key: &mut [u8; 64]) -> Option<usize> {
        (identity == b"sensor-1").then(|| {
            key[..16].copy_from_slice(self.0);
            16
        })
    }
}

const OLD: &[u8; 16] = b"0123456789abcdef";
const NEW: &[u8; 16] = b"fedcba9876543210";

/// One handshake: a client (resuming `client_session` if given) against a server holding
/// `server_key` (and offering `server_session`). Returns the client and the server.
fn handshake(
    client_key: &'static [u8; 16],
    client_session: Option<&Session>,
    server_key: &'static [u8; 16],
    server_session: Option<&Session>,
    seed: u8,
) -> (
    Connection<RustCrypto, NoTrust>,
    Connection<RustCrypto, Keys>,
) {
    let t = Instant::ZERO;
    let creds = Credentials::Psk {
        identity: b"sensor-1",
        key: client_key,
    };
    let mut client = match client_session {
        Some(s) => Connection::resume(
            RustCrypto,
            NoTrust,
            Config::default(),
            &mut Counter::new(seed, 37),
            creds,
            s,
            t,
        ),
        None => Connection::connect(
            RustCrypto,
            NoTrust,
            Config::default(),
            &mut Counter::new(seed, 37),
            creds,
            t,
        ),
    }
    .unwrap();
    let cookies = CookieKey::new([1; 32]);
    let mut buf = [0u8; 2048];
    let mut out = [0u8; 512];
    let n = client.poll_transmit(t, &mut buf).unwrap();
    let Stateless::HelloVerify(m) = cookies.respond(&RustCrypto, b"peer", &buf[..n], &mut out)
    else {
        panic!("expected a HelloVerifyRequest");
    };
    client.handle_datagram(t, &out[..m]).unwrap();
    let n = client.poll_transmit(t, &mut buf).unwrap();
    let Stateless::Accept(cookie) = cookies.respond(&RustCrypto, b"peer", &buf[..n], &mut out)
    else {
        panic!("expected the cookie to be accepted");
    };
    let mut server = Connection::accept(
        RustCrypto,
        Keys(server_key),
        Config::default(),
        &ServerCredentials {
            psk: true,
            issue_session_ids: true,
            resume: server_session,
            ..ServerCredentials::NONE
        },
        &mut Counter::new(seed.wrapping_add(100), 37),
        cookie,
        &buf[..n],
        t,
    )
    .unwrap();
    for _ in 0..6 {
        while let Some(n) = server.poll_transmit(t, &mut buf) {
            let _ = client.handle_datagram(t, &buf[..n]);
        }
        while let Some(n) = client.poll_transmit(t, &mut buf) {
            let _ = server.handle_datagram(t, &buf[..n]);
        }
    }
    (client, server)
}

#[test]
fn a_session_made_with_a_replaced_psk_is_not_resumed() {
    let (c, s) = handshake(OLD, None, OLD, None, 1);
    assert!(c.is_established() && s.is_established());
    let (client_session, server_session) = (c.session().unwrap(), s.session().unwrap());

    // Same key: the session resumes.
    let (c, s) = handshake(OLD, Some(&client_session), OLD, Some(&server_session), 2);
    assert!(
        s.is_established() && s.resumed(),
        "the unchanged key resumes"
    );
    drop(c);

    // The identity's key was replaced: no abbreviated handshake with the old session. The
    // client that still holds the old key gets nowhere; one with the new key makes a full
    // handshake.
    let (_, s) = handshake(OLD, Some(&client_session), NEW, Some(&server_session), 3);
    assert!(
        !(s.is_established() && s.resumed()),
        "resumed a session of the replaced key"
    );
    let (c, s) = handshake(NEW, Some(&client_session), NEW, Some(&server_session), 4);
    assert!(c.is_established() && s.is_established() && !s.resumed());
}
