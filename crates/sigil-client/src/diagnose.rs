//! Why a client's handshake or request got nowhere, in words a user can act on: the DTLS
//! alerts a Sigil server sends explained for the credentials in use ([`explain`]), where a
//! handshake stood when it was given up ([`Stall`], [`explain_stall`]), and how many
//! retransmissions fit in a one-shot command's wait. Re-exported from [`crate::transport`].

use crate::transport::Security;
use anyhow::anyhow;
use sigil_crypto::RustCrypto;
use sigil_dtls::Config;
use sigil_identity::Identity;
use std::net::SocketAddr;
use std::time::Duration;

/// Why a handshake failed: what the DTLS layer says (explained for the user by
/// [`explain`]), or anything else (the socket, the CoAP carrier).
pub(crate) enum HandshakeFailure {
    Dtls(sigil_dtls::Error),
    Other(anyhow::Error),
}

impl From<sigil_dtls::Error> for HandshakeFailure {
    fn from(e: sigil_dtls::Error) -> Self {
        Self::Dtls(e)
    }
}

impl From<anyhow::Error> for HandshakeFailure {
    fn from(e: anyhow::Error) -> Self {
        Self::Other(e)
    }
}

impl From<std::io::Error> for HandshakeFailure {
    fn from(e: std::io::Error) -> Self {
        Self::Other(e.into())
    }
}

/// What a DTLS alert from a Sigil server means for a client with these credentials, and the
/// fix: the one table of alerts the tools explain (docs/security.md names the same). Empty
/// for an error that is not an alert from the peer, or one with nothing to add.
pub fn explain(e: &sigil_dtls::Error, security: &Security) -> String {
    let sigil_dtls::Error::PeerAlert(d) = e else {
        return match e {
            sigil_dtls::Error::HandshakeTimeout => {
                ": no answer to the handshake: is `sigil server --dtls-listen` running there?"
                    .into()
            }
            _ => String::new(),
        };
    };
    let who = own_identity(security);
    let who = who.as_deref().unwrap_or("<identity>");
    let psk = matches!(security, Security::Psk { .. });
    let text = match sigil_dtls::wire::AlertDescription(*d) {
        sigil_dtls::wire::AlertDescription::CERTIFICATE_UNKNOWN
        | sigil_dtls::wire::AlertDescription::UNKNOWN_PSK_IDENTITY
            if psk =>
        {
            format!("the server does not know this PSK identity (not provisioned, revoked, or no PSK): run `sigil provision psk {who}` on the server (for a node with only a PSK, `sigil provision psk-node`) and use the PSK it prints")
        }
        sigil_dtls::wire::AlertDescription::CERTIFICATE_UNKNOWN
        | sigil_dtls::wire::AlertDescription::UNKNOWN_PSK_IDENTITY => {
            format!("the server does not know this identity (not provisioned, or revoked): run `sigil provision add {who}` on the server")
        }
        sigil_dtls::wire::AlertDescription::DECRYPT_ERROR if psk => {
            "wrong PSK: the key does not match the one the server holds for this identity (`sigil provision psk` prints it)".into()
        }
        sigil_dtls::wire::AlertDescription::DECRYPT_ERROR => {
            "a handshake signature or Finished did not verify (wrong key for this identity?)".into()
        }
        sigil_dtls::wire::AlertDescription::HANDSHAKE_FAILURE => {
            "no cipher suite in common, or the server needs a client key: check --dtls (psk, ecdhe-psk, rpk, cert) and --key-file".into()
        }
        sigil_dtls::wire::AlertDescription::BAD_CERTIFICATE
        | sigil_dtls::wire::AlertDescription::UNSUPPORTED_CERTIFICATE => {
            "the server refused this certificate or key (malformed, or of a kind it does not take)".into()
        }
        sigil_dtls::wire::AlertDescription::CERTIFICATE_EXPIRED => {
            "the server finds this certificate not valid now (expired or not yet valid; check both clocks)".into()
        }
        sigil_dtls::wire::AlertDescription::UNKNOWN_CA => {
            "the server's trust anchors (--dtls-ca) do not reach this certificate's issuer".into()
        }
        sigil_dtls::wire::AlertDescription::CLOSE_NOTIFY => {
            "the server ended the session (it stopped, the identity was revoked, or the identity opened more sessions than the server keeps for one, `--dtls-max-sessions-per-identity`, and this was its least recently active)".into()
        }
        sigil_dtls::wire::AlertDescription::INTERNAL_ERROR => {
            "the server failed (see its log)".into()
        }
        sigil_dtls::wire::AlertDescription::PROTOCOL_VERSION
        | sigil_dtls::wire::AlertDescription::UNEXPECTED_MESSAGE
        | sigil_dtls::wire::AlertDescription::DECODE_ERROR
        | sigil_dtls::wire::AlertDescription::ILLEGAL_PARAMETER => {
            "the server refused a handshake message (a protocol error between the two sides)".into()
        }
        _ => return String::new(),
    };
    format!(": {text}")
}

/// The identity a client authenticates as, as text, when its credentials name one.
pub fn own_identity(security: &Security) -> Option<String> {
    use sigil_crypto::CryptoProvider;
    let key = match security {
        Security::Psk { identity, .. } => return String::from_utf8(identity.clone()).ok(),
        Security::RawPublicKey { own: Some(k), .. } => k,
        Security::Certificate {
            own: Some((_, k)), ..
        } => k,
        _ => return None,
    };
    let public = RustCrypto.public_key(key).ok()?;
    Identity::of_key(&RustCrypto, &public, b"")
        .ok()
        .map(|i| i.to_string())
}

/// Where a client handshake stood when it was given up: what its silence means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// Nothing came back from the server: no server there, or the wrong port.
    Silent,
    /// The server answered the hello, then fell silent before the client sent its Finished.
    Answered,
    /// The client sent its Finished (its last flight) and heard nothing after: a Sigil
    /// server drops a Finished it cannot authenticate (a wrong PSK), or a client it does not
    /// accept, without an answer (RFC 6347 §4.1.2.7).
    SentFinished,
}

impl Stall {
    /// The stall of a handshake in DTLS records, from the connection's state.
    pub fn of_records(heard: bool, state: sigil_dtls::State) -> Self {
        use sigil_dtls::State;
        match state {
            State::ExpectChangeCipherSpec | State::ExpectFinished => Self::SentFinished,
            _ if heard => Self::Answered,
            _ => Self::Silent,
        }
    }
}

/// What a handshake given up at `stall` most likely means for a client with these
/// credentials, and the fix; `limit` is how long it waited (none: the DTLS layer's own
/// retransmissions ran out).
pub fn explain_stall(
    stall: Stall,
    server: SocketAddr,
    security: &Security,
    limit: Option<Duration>,
) -> String {
    let within = limit.map_or(String::new(), |l| format!(" within {}", humanize(l)));
    let who = own_identity(security);
    let who = who.as_deref().unwrap_or("<identity>");
    match (stall, security) {
        (Stall::Silent, _) => format!(
            "no answer from coaps://{server}{within}: nothing answered at {server} to the DTLS handshake: is the server running, is the port right (`sigil server --dtls-listen`, 5684 by default)?"
        ),
        (Stall::Answered, _) => format!(
            "DTLS handshake with {server} did not complete{within}: the server answered, then fell silent before our Finished (overloaded, or the path lost its answers): try again"
        ),
        (Stall::SentFinished, Security::Psk { .. }) => format!(
            "DTLS handshake with {server} did not complete{within}: no answer to Finished: is the PSK right? The server answered the hello but not the Finished, which with a PSK means the key is wrong (the server drops what it cannot authenticate): check --psk against what `sigil provision psk {who}` printed"
        ),
        (Stall::SentFinished, _) => format!(
            "DTLS handshake with {server} did not complete{within}: the server did not answer our Finished: is this client provisioned/trusted? (`sigil provision list` on the server should show {who}; `sigil provision add {who}` adds it)"
        ),
    }
}

/// What a refusal of the client's last flight (its Finished) means for these credentials.
pub(crate) fn explain_refused_finished(security: &Security) -> String {
    let who = own_identity(security);
    let who = who.as_deref().unwrap_or("<identity>");
    match security {
        Security::Psk { .. } => format!(
            ": the server could not authenticate our Finished: is the PSK right? A wrong key shows this way: check --psk against what `sigil provision psk {who}` printed"
        ),
        _ => format!(
            ": the server refused our Finished: is this client provisioned/trusted? (`sigil provision add {who}` on the server)"
        ),
    }
}

/// The most retransmissions of one handshake flight whose timers (doubling from
/// `initial_timeout`, at most `max_timeout`) all run out within `limit`: a one-shot command
/// whose handshake is not bounded by [`Transport::open_within`] gives up after these, with
/// the explanation of where it stopped, instead of after the default seven (184 s).
pub fn retransmissions_within(config: &Config, limit: Duration) -> u32 {
    let mut timeout = config.initial_timeout;
    let mut spent = timeout;
    let mut n = 0;
    while n < config.max_retransmissions {
        timeout = (timeout * 2).min(config.max_timeout);
        spent += timeout;
        if spent >= limit {
            break;
        }
        n += 1;
    }
    n
}

/// The error of a client that heard nothing from `server` within `wait`.
pub fn no_answer(server: SocketAddr, secure: bool, wait: Duration) -> anyhow::Error {
    let scheme = if secure { "coaps" } else { "coap" };
    anyhow!(
        "no answer from {scheme}://{server} within {}: is `sigil server` running there?",
        humanize(wait)
    )
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}
