//! The DTLS 1.2 handshake as a CoAP resource: each flight is the payload of a CoAP request or
//! response, so CoAP's Confirmable exchange (RFC 7252 §4.2) gives the handshake its
//! reliability and block-wise transfer (RFC 7959) its fragmentation. Sans-IO and `no_std`:
//! the caller passes in datagrams, time ([`sigil_time::Instant`]) and randomness, and takes
//! out datagrams and the next wake-up.
//!
//! The exchange (docs/wire-formats.md, "DTLS as a CoAP resource", has a byte-level trace):
//!
//! ```text
//! client                                            server
//! CON PUT /dtls         [ClientHello]          ->   stateless: CookieKey::respond
//!                                              <-   ACK 4.01 [HelloVerifyRequest]
//! CON PUT /dtls         [ClientHello+cookie]   ->   session resource created
//!                                              <-   ACK 2.01 Location-Path dtls/<id>
//!                                                   [ServerHello .. ServerHelloDone]
//! CON GET /dtls/<id>    Block2 n               ->   (only when the flight needs blocks)
//! CON POST /dtls/<id>   [.. ClientKeyExchange, ChangeCipherSpec, Finished] (Block1)
//!                                              <-   ACK 2.04 [ChangeCipherSpec, Finished]
//! ```
//!
//! Every payload is a sequence of DTLS records holding whole handshake messages (the
//! Finished protected in epoch 1), driven by [`sigil_dtls::WholeFlights`], the same handshake
//! states as the record-layer [`sigil_dtls`] connection. Both sides end with a
//! [`sigil_dtls::Traffic`]: application data then travels as ordinary DTLS records with the
//! session's keys.
//!
//! - [`client::Client`]: the client role, one handshake.
//! - [`server::Endpoint`]: the server role: the stateless cookie exchange, a bounded table of
//!   session resources (in total and per peer address), idle expiry, `DELETE`, and a counter
//!   for every refusal.
//!
//! Why 4.01 for the HelloVerifyRequest: the request was understood but lacks what
//! authorises the server to hold state for it (a cookie proving the return address), and the
//! client is expected to repeat it with that proof, which is what 4.01 Unauthorized says
//! (RFC 7252 §5.9.2.2). The response is never larger than the request.
//!
//! No third-party implementation of this carrier exists, so interoperability is tested only
//! for the record layer it shares with sigil-dtls (against OpenSSL and GnuTLS there).
#![no_std]
#![forbid(unsafe_code)]

pub mod client;
pub mod server;

pub use client::{CarrierConfig, Client};
pub use server::{Counters, Endpoint, EndpointConfig, Established, Standing};

use sigil_coap::Code;

/// The resource a client opens a session with (`PUT /dtls`); sessions live below it.
pub const PATH: &str = "dtls";

/// Largest flight either side sends or accepts, as records.
pub const MAX_FLIGHT: usize = sigil_dtls::whole::MAX_FLIGHT_RECORDS;

/// Largest CoAP datagram either side builds: a block of up to 1024 bytes plus header,
/// token and options.
pub const MAX_DATAGRAM: usize = 1024 + 64;

/// Longest Location-Path segment of a session (decimal u32).
pub(crate) const MAX_ID_LEN: usize = 10;

/// What went wrong for a client handshake over CoAP (the server side counts its refusals in
/// [`Counters`] instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The DTLS handshake failed (names what the peer did).
    Dtls(sigil_dtls::Error),
    /// A CoAP message could not be built (a caller buffer too small).
    Coap(sigil_coap::Error),
    /// The server answered with this response code.
    Refused(Code),
    /// MAX_RETRANSMIT reached without an answer (RFC 7252 §4.2).
    Timeout,
    /// The server's answer breaks the carrier's rules (names which).
    Protocol(&'static str),
    /// A flight larger than [`MAX_FLIGHT`].
    FlightTooLarge,
}

impl From<sigil_dtls::Error> for Error {
    fn from(e: sigil_dtls::Error) -> Self {
        Self::Dtls(e)
    }
}

impl From<sigil_coap::Error> for Error {
    fn from(e: sigil_coap::Error) -> Self {
        Self::Coap(e)
    }
}

/// Whether a datagram on the carrier's port is a DTLS record (the application data after the
/// handshake) rather than a CoAP message, so one socket can serve both: a record starts with
/// its content type (20..=25, RFC 6347 §4.1; 25 is tls12_cid, RFC 9146), a CoAP message with
/// version 1 in its top two bits (0x40..=0x7f, RFC 7252 §3). The ranges do not overlap.
pub fn is_dtls_record(datagram: &[u8]) -> bool {
    matches!(datagram.first(), Some(20..=25))
}

/// Writes `id` in decimal; returns the digits.
pub(crate) fn id_text(id: u32, buf: &mut [u8; MAX_ID_LEN]) -> &str {
    let mut n = id;
    let mut i = MAX_ID_LEN;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    core::str::from_utf8(&buf[i..]).unwrap_or("0")
}

/// Reads a decimal session id (no sign, no leading zeros but "0", at most u32).
pub(crate) fn parse_id(s: &[u8]) -> Option<u32> {
    if s.is_empty() || s.len() > MAX_ID_LEN || (s.len() > 1 && s[0] == b'0') {
        return None;
    }
    s.iter().try_fold(0u32, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u32::from(b - b'0'))
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_coap_messages_are_told_apart_by_their_first_byte() {
        assert!(is_dtls_record(&[23, 0xfe, 0xfd]));
        assert!(is_dtls_record(&[25]));
        for b in [0x40u8, 0x44, 0x64, 0x7f, 19, 26, 0] {
            assert!(!is_dtls_record(&[b, 0, 0, 0]), "{b:#x}");
        }
        assert!(!is_dtls_record(&[]));
    }

    #[test]
    fn session_ids_round_trip_and_odd_forms_are_refused() {
        let mut b = [0u8; MAX_ID_LEN];
        for id in [0, 7, 42, 4_294_967_295] {
            assert_eq!(parse_id(id_text(id, &mut b).as_bytes()), Some(id));
        }
        for bad in [&b""[..], b"01", b"-1", b"4294967296", b"1a", b"12345678901"] {
            assert_eq!(parse_id(bad), None, "{bad:?}");
        }
    }
}
