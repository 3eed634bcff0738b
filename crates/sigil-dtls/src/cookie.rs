//! The server's stateless cookie exchange (RFC 6347 §4.2.1): a peer it holds no state for
//! gets a HelloVerifyRequest, and state is created only for a ClientHello that carries a
//! valid cookie. [`CookieVerified`] is the proof of that check, and only this module makes
//! one; [`crate::Connection::accept`] takes it.

use crate::handshake::{ClientHello, Fragment, HelloVerifyRequest};
use crate::record::{plaintext_record, Record};
use crate::wire::{AlertLevel, ContentType, HandshakeType, ProtocolVersion};
use crate::{Error, Writer};
use sigil_crypto::CryptoProvider;

/// Length of the cookies this server hands out.
pub const COOKIE_LEN: usize = 16;

/// The server's stateless cookie secret (RFC 6347 §4.2.1), and the one before it: a server
/// that rotates it ([`CookieKey::rotate`]) accepts the cookies of the current and the previous
/// secret, so an observed cookie (valid for one peer address and one ClientHello) stops
/// working after two rotations.
pub struct CookieKey {
    secret: [u8; 32],
    previous: Option<[u8; 32]>,
}

/// Proof that a ClientHello carried a cookie this server made for that peer and that
/// ClientHello. Only [`CookieKey::respond`] makes one, and it stands for that ClientHello
/// alone (its SHA-256): [`crate::Connection::accept`] refuses any other.
#[derive(Debug, PartialEq, Eq)]
pub struct CookieVerified {
    client_hello: [u8; 32],
}

impl CookieVerified {
    /// Whether `body` (a ClientHello's) is the one this proof was made for.
    pub(crate) fn is_for<C: CryptoProvider + ?Sized>(&self, crypto: &C, body: &[u8]) -> bool {
        constant_time_eq(&crypto.sha256(&[body]), &self.client_hello)
    }
}

/// What the stateless server does with a datagram from a peer it holds no state for.
#[derive(Debug, PartialEq, Eq)]
pub enum Stateless {
    /// Send these many bytes (written to the caller's buffer): a HelloVerifyRequest.
    HelloVerify(usize),
    /// The ClientHello carries a valid cookie: create a connection with
    /// [`crate::Connection::accept`], which takes the proof.
    Accept(CookieVerified),
    /// Not a ClientHello, or a malformed one: drop it (counted by the caller).
    Drop(Error),
}

impl CookieKey {
    pub fn new(secret: [u8; 32]) -> Self {
        Self {
            secret,
            previous: None,
        }
    }

    /// Replaces the secret by `fresh`; cookies of the replaced one stay valid until the next
    /// rotation (a client between its two ClientHellos is not refused).
    pub fn rotate(&mut self, fresh: [u8; 32]) {
        self.previous = Some(core::mem::replace(&mut self.secret, fresh));
    }

    /// Rotates to a secret derived from the current one (HMAC-SHA-256 of a label under it),
    /// for a caller without randomness at hand: the new secret does not reveal the old.
    pub fn rotate_derived<C: CryptoProvider + ?Sized>(&mut self, crypto: &C) {
        let fresh = crypto.hmac_sha256(&self.secret, &[b"sigil-dtls cookie rotation"]);
        self.rotate(fresh);
    }

    fn cookie<C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        secret: &[u8; 32],
        peer: &[u8],
        ch: &ClientHello<'_>,
    ) -> [u8; COOKIE_LEN] {
        let [a, b, c, d, e] = ch.cookie_input();
        let mac = crypto.hmac_sha256(secret, &[peer, a, b, c, d, e]);
        let mut out = [0u8; COOKIE_LEN];
        out.copy_from_slice(&mac[..COOKIE_LEN]);
        out
    }

    /// Looks at the first record of a datagram from an unknown `peer` (its address bytes). A
    /// ClientHello without a valid cookie gets a HelloVerifyRequest whose cookie is bound to
    /// the peer and to the ClientHello; nothing is remembered, and the answer is never larger
    /// than the request (no amplification).
    pub fn respond<C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        peer: &[u8],
        datagram: &[u8],
        out: &mut [u8],
    ) -> Stateless {
        let (rec, ch_fragment) = match first_client_hello(datagram) {
            Ok(x) => x,
            Err(e) => return Stateless::Drop(e),
        };
        let ch = match ClientHello::parse(ch_fragment.body) {
            Ok(ch) => ch,
            Err(e) => return Stateless::Drop(e),
        };
        let expected = self.cookie(crypto, &self.secret, peer, &ch);
        let earlier = self
            .previous
            .as_ref()
            .is_some_and(|old| constant_time_eq(ch.cookie, &self.cookie(crypto, old, peer, &ch)));
        if ch.cookie.len() == COOKIE_LEN && (constant_time_eq(ch.cookie, &expected) || earlier) {
            return Stateless::Accept(CookieVerified {
                client_hello: crypto.sha256(&[ch_fragment.body]),
            });
        }
        // HelloVerifyRequest: record and message sequence numbers mirror the ClientHello's
        // (RFC 6347 §4.2.1, §4.2.2), version DTLS 1.0 as the RFC recommends.
        let mut body = [0u8; 3 + COOKIE_LEN];
        let mut w = Writer::new(&mut body);
        let hvr = HelloVerifyRequest {
            server_version: ProtocolVersion::DTLS_1_0,
            cookie: &expected,
        };
        if hvr.write(&mut w).is_err() {
            return Stateless::Drop(Error::BufferTooSmall);
        }
        let frag = Fragment {
            msg_type: HandshakeType::HELLO_VERIFY_REQUEST,
            length: body.len() as u32,
            message_seq: ch_fragment.message_seq,
            offset: 0,
            body: &body,
        };
        match plaintext_record(
            ContentType::HANDSHAKE,
            rec.header.sequence,
            |w| frag.write(w),
            out,
        ) {
            Ok(n) if n <= datagram.len() => Stateless::HelloVerify(n),
            Ok(_) => Stateless::Drop(Error::Decode(
                "ClientHello shorter than the cookie exchange",
            )),
            Err(e) => Stateless::Drop(e),
        }
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The fatal alert a stateless server sends when [`crate::Connection::accept`] refuses a
/// ClientHello (e.g. no suite in common): an epoch-0 alert record, so the client stops at
/// once instead of retransmitting. `None` for errors that get no alert (a malformed datagram
/// is dropped).
pub fn refusal(error: &Error, client_hello: &[u8], out: &mut [u8]) -> Option<usize> {
    let desc = error.alert()?;
    let (rec, _) = Record::parse(client_hello).ok()?;
    plaintext_record(
        ContentType::ALERT,
        rec.header.sequence,
        |w| w.bytes(&[AlertLevel::FATAL.0, desc.0]),
        out,
    )
    .ok()
}

/// The first record of `datagram` must be an epoch-0 handshake record holding a whole
/// ClientHello.
pub(crate) fn first_client_hello(datagram: &[u8]) -> Result<(Record<'_>, Fragment<'_>), Error> {
    let (rec, _) = Record::parse(datagram)?;
    if rec.header.content_type != ContentType::HANDSHAKE || rec.header.epoch != 0 {
        return Err(Error::Decode(
            "first record is not a handshake record of epoch 0",
        ));
    }
    let (f, _) = Fragment::parse(rec.fragment)?;
    if f.msg_type != HandshakeType::CLIENT_HELLO || !f.is_whole() {
        return Err(Error::Decode("first message is not a whole ClientHello"));
    }
    Ok((rec, f))
}
