//! A DTLS 1.2 connection (RFC 6347) for both roles, sans-IO, with the two cipher suites
//! RFC 7252 §9.1.3 makes mandatory for CoAP:
//! - TLS_PSK_WITH_AES_128_CCM_8 (RFC 4279, RFC 6655) with pre-shared keys;
//! - TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 (RFC 7251, RFC 8422) with raw public keys (RFC 7250):
//!   P-256 or Ed25519 signature keys, ephemeral P-256 ECDH, server-only or mutual
//!   authentication. A raw public key is accepted only if [`Trust::trusted_key`] says so, which
//!   [`PinnedIdentities`] answers with RFC 8387 secure identities: the provisioning list is
//!   the trust store.
//!
//! The caller feeds datagrams ([`Connection::handle_datagram`]) and time
//! ([`Connection::handle_timeout`]) and drains datagrams ([`Connection::poll_transmit`]),
//! received application data ([`Connection::poll_app_data`]) and the next wake-up
//! ([`Connection::poll_timeout`]). A server answers unknown peers statelessly first
//! ([`CookieKey::respond`]) and creates a connection only for a ClientHello that carries a
//! valid cookie.
//!
//! The handshake is a chain of states, one per expected message ([`State`]); a transition
//! checks the message type before anything else, and the established state can only be built
//! from a [`FinishedVerified`] proof that only the Finished check makes. Extended master secret
//! (RFC 7627) is required, renegotiation is refused (RFC 5746 `renegotiation_info`, empty).

use crate::handshake::{
    ClientHello, ClientHelloParams, Extensions, Fragment, HelloVerifyRequest, Reassembler,
    ServerHello, HEADER_LEN as HS_HEADER_LEN,
};
use crate::keys::{self, KeyBlock, Side, MAX_PSK_LEN};
use crate::protection::{self, Ccm8Keys};
use crate::record::{Record, RecordHeader, Records, ReplayWindow, HEADER_LEN};
use crate::spki;
use crate::wire::{
    AlertDescription, AlertLevel, CipherSuite, ContentType, ExtensionType, HandshakeType,
    NamedGroup, ProtocolVersion, SignatureScheme,
};
use crate::{Error, Reader, Writer};
use sigil_crypto::{
    AgreementAlgorithm, AgreementSecret, CryptoProvider, PublicKey, Rng, SecretKey,
    SignatureAlgorithm,
};
use sigil_identity::Identity;

/// Largest handshake message this side reassembles (certificate chains need more room, so
/// the `x509` feature raises it).
#[cfg(not(feature = "x509"))]
pub const MAX_MESSAGE: usize = 512;
#[cfg(feature = "x509")]
pub const MAX_MESSAGE: usize = 1536;
/// Bytes of handshake messages kept for the Finished hash (the first ClientHello and the
/// HelloVerifyRequest are not part of it, RFC 6347 §4.2.1).
#[cfg(not(feature = "x509"))]
pub const MAX_TRANSCRIPT: usize = 2048;
#[cfg(feature = "x509")]
pub const MAX_TRANSCRIPT: usize = 4096;
/// Bytes of handshake messages in one flight.
#[cfg(not(feature = "x509"))]
pub const MAX_FLIGHT: usize = 1024;
#[cfg(feature = "x509")]
pub const MAX_FLIGHT: usize = 2048;
/// Bytes of this side's own certificate chain in Certificate-message form.
#[cfg(feature = "x509")]
pub const MAX_CHAIN: usize = 1200;
#[cfg(not(feature = "x509"))]
const MAX_CHAIN: usize = 0;
/// Longest connection ID accepted (RFC 9146 allows 255; Sigil's server uses 8).
pub const MAX_CID: usize = 16;
/// certificate_type X509 (RFC 7250 §3).
const X509: u8 = 0;
/// Datagrams waiting to be sent (a flight at a small PMTU takes many: an X.509 flight at a
/// 64-byte PMTU is about 50).
pub const MAX_QUEUED: usize = 64;
/// HelloVerifyRequests a client answers in one handshake.
const MAX_HELLO_VERIFY: u8 = 4;
/// Largest datagram this side builds.
pub const MAX_DATAGRAM: usize = 1400;
/// Largest application record payload.
pub const MAX_APP_DATA: usize = 1024;
/// Bytes of datagrams waiting to be sent (a flight, or a few application records), with room
/// for the per-datagram headers of a flight cut to a small PMTU.
#[cfg(not(feature = "x509"))]
const SEND_QUEUE_BYTES: usize = MAX_FLIGHT + 1024;
#[cfg(feature = "x509")]
const SEND_QUEUE_BYTES: usize = MAX_FLIGHT + 2048;
/// Bytes of handshake fragments kept when they arrive ahead of the message this side expects
/// (RFC 6347 §4.2.2: when the first datagram of a flight is lost, the rest is kept for when the
/// retransmission fills the gap).
#[cfg(not(feature = "x509"))]
const AHEAD_BYTES: usize = 512;
#[cfg(feature = "x509")]
const AHEAD_BYTES: usize = 2048;
/// How far ahead of the expected message a kept fragment may be.
const AHEAD_MESSAGES: u16 = 4;
/// Bytes of received application records waiting for the caller.
const RECEIVE_QUEUE_BYTES: usize = MAX_APP_DATA + 512;

/// The extensions both sides send: extended_master_secret (empty) and renegotiation_info
/// with an empty renegotiated_connection.
const HELLO_EXTENSIONS: [u8; 9] = [0x00, 0x17, 0x00, 0x00, 0xff, 0x01, 0x00, 0x01, 0x00];
/// RFC 7250 certificate type RawPublicKey.
const RAW_PUBLIC_KEY: u8 = 2;
/// ClientCertificateType ecdsa_sign (RFC 8422 §5.5), the only one Sigil requests.
const ECDSA_SIGN: u8 = 64;
/// The signature schemes Sigil offers and accepts, in preference order.
const SCHEMES: [SignatureScheme; 2] = [
    SignatureScheme::ECDSA_SECP256R1_SHA256,
    SignatureScheme::ED25519,
];

/// What this side trusts: pre-shared keys by identity (RFC 4279 §5.1) and peers' raw public
/// keys. A connection asks it at the moment the peer presents either.
pub trait Trust {
    /// Writes the key for `identity` into `key` and returns its length, or `None`.
    fn psk(&self, identity: &[u8], key: &mut [u8; MAX_PSK_LEN]) -> Option<usize> {
        let _ = (identity, key);
        None
    }

    /// Whether the peer's raw public key may authenticate it.
    fn trusted_key(&self, key: &PublicKey) -> bool {
        let _ = key;
        false
    }

    /// Validates the peer's X.509 chain (leaf first) and returns the leaf's key; see
    /// [`X509Anchors`].
    fn certificate_chain(&self, chain: &[&[u8]]) -> Result<PublicKey, Error> {
        let _ = chain;
        Err(Error::UnknownCa)
    }
}

impl<T: Trust + ?Sized> Trust for &T {
    fn psk(&self, identity: &[u8], key: &mut [u8; MAX_PSK_LEN]) -> Option<usize> {
        (**self).psk(identity, key)
    }
    fn trusted_key(&self, key: &PublicKey) -> bool {
        (**self).trusted_key(key)
    }
    fn certificate_chain(&self, chain: &[&[u8]]) -> Result<PublicKey, Error> {
        (**self).certificate_chain(chain)
    }
}

/// Trusts X.509 chains that lead to one of `anchors` (DER certificates) at the caller's Unix
/// time `now` (RFC 7925 §4.4.2; the time comes from the caller, so the library reads no
/// clock). Raw public keys are checked by `rpk`.
pub struct X509Anchors<'a, C, R = NoTrust> {
    pub crypto: C,
    pub anchors: &'a [&'a [u8]],
    pub now: u64,
    pub rpk: R,
}

impl<C: CryptoProvider, R: Trust> Trust for X509Anchors<'_, C, R> {
    fn psk(&self, identity: &[u8], key: &mut [u8; MAX_PSK_LEN]) -> Option<usize> {
        self.rpk.psk(identity, key)
    }
    fn trusted_key(&self, key: &PublicKey) -> bool {
        self.rpk.trusted_key(key)
    }
    fn certificate_chain(&self, chain: &[&[u8]]) -> Result<PublicKey, Error> {
        crate::x509::verify_chain(&self.crypto, chain, self.anchors, self.now)
    }
}

/// Trusts nothing beyond the credentials the client was given (a PSK client needs no store).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTrust;

impl Trust for NoTrust {}

/// Trusts a raw public key whose RFC 8387 secure identity `I = h(P|O)` (with empty `O`) is on
/// the list: provisioning feeds identities, and the handshake pins keys to them.
pub struct PinnedIdentities<'a, C> {
    pub crypto: C,
    pub identities: &'a [Identity],
}

impl<C: CryptoProvider> Trust for PinnedIdentities<'_, C> {
    fn trusted_key(&self, key: &PublicKey) -> bool {
        Identity::of_key(&self.crypto, key, b"").is_ok_and(|id| self.identities.contains(&id))
    }
}

/// What a client authenticates with.
#[derive(Clone, Copy)]
pub enum Credentials<'a> {
    /// TLS_PSK_WITH_AES_128_CCM_8 with this identity and key.
    #[cfg(feature = "psk")]
    Psk { identity: &'a [u8], key: &'a [u8] },
    /// TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 (RFC 8442): the PSK authenticates an
    /// ephemeral ECDH exchange, so recorded traffic stays secret if the PSK leaks later.
    #[cfg(feature = "ecdhe-psk")]
    EcdhePsk { identity: &'a [u8], key: &'a [u8] },
    /// TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with a raw public key: `Some(key)` lets the client
    /// authenticate itself when the server asks; the server's key must be trusted.
    #[cfg(feature = "ecdhe-ecdsa")]
    RawPublicKey(Option<&'a SecretKey>),
    /// TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with X.509 certificates: the server's chain must
    /// lead to a trust anchor ([`Trust::certificate_chain`]); `Some((chain, key))` (leaf
    /// first, DER) authenticates the client when the server asks.
    #[cfg(feature = "x509")]
    Certificate(Option<(&'a [&'a [u8]], &'a SecretKey)>),
}

/// What a server offers.
#[derive(Clone, Copy)]
pub struct ServerCredentials<'a> {
    /// Accept TLS_PSK_WITH_AES_128_CCM_8 and, with the `ecdhe-psk` feature,
    /// TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 (keys come from [`Trust::psk`]).
    pub psk: bool,
    /// Accept TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with this raw public key.
    pub key: Option<&'a SecretKey>,
    /// With `key`: require the client's raw public key or certificate (CertificateRequest).
    pub require_client_key: bool,
    /// With `key`: its X.509 chain (leaf first, DER), offered to clients that do not ask for
    /// a raw public key.
    #[cfg(feature = "x509")]
    pub chain: Option<&'a [&'a [u8]]>,
    /// The connection ID this server wants in the client's records (RFC 9146), unique among
    /// its sessions; used when the client offers the extension. Empty: none.
    pub connection_id: &'a [u8],
    /// Give each full handshake a session ID so the client may resume it later.
    pub issue_session_ids: bool,
    /// The cached session the ClientHello asks for ([`requested_session`]), if the caller
    /// has it: the handshake is then abbreviated, after the peer's credentials are checked
    /// against [`Trust`] again.
    pub resume: Option<&'a Session>,
}

impl ServerCredentials<'_> {
    /// Nothing offered; fill in with struct update syntax.
    pub const NONE: ServerCredentials<'static> = ServerCredentials {
        psk: false,
        key: None,
        require_client_key: false,
        #[cfg(feature = "x509")]
        chain: None,
        connection_id: &[],
        issue_session_ids: false,
        resume: None,
    };
}

/// Timing and size parameters.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Initial retransmission timeout (RFC 6347 §4.2.4.1 suggests 1 s; RFC 7925 §11 allows
    /// more for constrained links, e.g. the seed's 5 s).
    pub initial_timeout_ms: u64,
    /// Largest timeout after doubling (RFC 6347: 60 s).
    pub max_timeout_ms: u64,
    /// Give up after this many retransmissions of a flight.
    pub max_retransmissions: u32,
    /// Path MTU available to DTLS records (datagram payload size): handshake messages are
    /// fragmented to fit it, except the ClientHello, which a stateless server must see whole.
    pub pmtu: usize,
    /// An ECDHE-ECDSA client offers TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 instead of the
    /// CCM-8 suite (for comparison: 8 more bytes per record). Servers accept either.
    #[cfg(feature = "gcm")]
    pub gcm: bool,
    /// A client offers the connection_id extension (RFC 9146) with an empty ID of its own:
    /// the server's ID then goes into every protected record the client sends, so the
    /// server keeps the session when the client's address changes.
    pub connection_id: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            initial_timeout_ms: 1_000,
            max_timeout_ms: 60_000,
            max_retransmissions: 7,
            pmtu: 1_152,
            #[cfg(feature = "gcm")]
            gcm: false,
            connection_id: false,
        }
    }
}

/// The server's stateless cookie secret (RFC 6347 §4.2.1).
pub struct CookieKey {
    secret: [u8; 32],
}

/// What the stateless server does with a datagram from a peer it holds no state for.
#[derive(Debug, PartialEq, Eq)]
pub enum Stateless {
    /// Send these many bytes (written to the caller's buffer): a HelloVerifyRequest.
    HelloVerify(usize),
    /// The ClientHello carries a valid cookie: create a connection with [`Connection::accept`].
    Accept,
    /// Not a ClientHello, or a malformed one: drop it (counted by the caller).
    Drop(Error),
}

/// Length of the cookies this server hands out.
pub const COOKIE_LEN: usize = 16;

impl CookieKey {
    pub fn new(secret: [u8; 32]) -> Self {
        Self { secret }
    }

    fn cookie<C: CryptoProvider + ?Sized>(
        &self,
        crypto: &C,
        peer: &[u8],
        ch: &ClientHello<'_>,
    ) -> [u8; COOKIE_LEN] {
        let [a, b, c, d, e] = ch.cookie_input();
        let mac = crypto.hmac_sha256(&self.secret, &[peer, a, b, c, d, e]);
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
        let expected = self.cookie(crypto, peer, &ch);
        if ch.cookie.len() == COOKIE_LEN && constant_time_eq(ch.cookie, &expected) {
            return Stateless::Accept;
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The fatal alert a stateless server sends when [`Connection::accept`] refuses a ClientHello
/// (e.g. no suite in common): an epoch-0 alert record, so the client stops at once instead of
/// retransmitting. `None` for errors that get no alert (a malformed datagram is dropped).
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
fn first_client_hello(datagram: &[u8]) -> Result<(Record<'_>, Fragment<'_>), Error> {
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

fn plaintext_record(
    ct: ContentType,
    sequence: u64,
    body: impl FnOnce(&mut Writer<'_>) -> Result<(), Error>,
    out: &mut [u8],
) -> Result<usize, Error> {
    let mut w = Writer::new(out);
    w.bytes(&[0; HEADER_LEN])?;
    body(&mut w)?;
    let n = w.len();
    let mut hw = Writer::new(&mut out[..HEADER_LEN]);
    RecordHeader {
        content_type: ct,
        version: ProtocolVersion::DTLS_1_2,
        epoch: 0,
        sequence,
        length: u16::try_from(n - HEADER_LEN).map_err(|_| Error::RecordOverflow)?,
    }
    .write(&mut hw)?;
    Ok(n)
}

/// What a full handshake leaves for an abbreviated one (RFC 5246 §7.3; RFC 7627 §5.3: the
/// master secret is an extended one). Keep it as secret as a key.
#[derive(Clone)]
pub struct Session {
    pub id: [u8; 32],
    pub suite: CipherSuite,
    pub master: [u8; 48],
    /// What the peer authenticated with: its PSK identity, or its public key.
    pub psk_identity: [u8; 128],
    pub psk_identity_len: usize,
    pub peer_key: Option<PublicKey>,
}

impl Session {
    /// The PSK identity the session was authenticated with (empty for key-based sessions).
    pub fn psk_identity(&self) -> &[u8] {
        &self.psk_identity[..self.psk_identity_len.min(self.psk_identity.len())]
    }
}

impl core::fmt::Debug for Session {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Session({:?}, <secret>)", self.suite)
    }
}

/// The session ID a ClientHello datagram asks to resume (for the server's cache lookup).
pub fn requested_session(datagram: &[u8]) -> Option<[u8; 32]> {
    let (_, f) = first_client_hello(datagram).ok()?;
    let ch = ClientHello::parse(f.body).ok()?;
    ch.session_id.try_into().ok()
}

/// The client random of a ClientHello datagram (to tell a new handshake from a retransmitted
/// one).
pub fn client_hello_random(datagram: &[u8]) -> Option<[u8; 32]> {
    let (_, f) = first_client_hello(datagram).ok()?;
    Some(*ClientHello::parse(f.body).ok()?.random)
}

/// How a suite authenticates and agrees on keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kx {
    /// Pre-shared key only (RFC 4279).
    Psk,
    /// Ephemeral ECDH authenticated by a pre-shared key (RFC 5489, RFC 8442).
    EcdhePsk,
    /// Ephemeral ECDH signed with ECDSA/EdDSA keys (RFC 8422).
    EcdheEcdsa,
}

fn kx_of(s: CipherSuite) -> Kx {
    match s {
        CipherSuite::TLS_PSK_WITH_AES_128_CCM_8 => Kx::Psk,
        CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 => Kx::EcdhePsk,
        _ => Kx::EcdheEcdsa,
    }
}

fn aead_of(s: CipherSuite) -> protection::Aead {
    if s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 {
        protection::Aead::Gcm
    } else {
        protection::Aead::Ccm8
    }
}

/// The ECDHE-ECDSA suite a client offers for `config`.
#[cfg(feature = "ecdhe-ecdsa")]
fn ecdsa_suite(config: &Config) -> CipherSuite {
    #[cfg(feature = "gcm")]
    if config.gcm {
        return CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
    }
    let _ = config;
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8
}

/// Proof that the peer's Finished verified. Only [`verify_finished`] makes one.
pub struct FinishedVerified(());

fn verify_finished<C: CryptoProvider + ?Sized>(
    crypto: &C,
    master: &[u8; 48],
    side: Side,
    transcript_hash: &[u8; 32],
    body: &[u8],
) -> Result<FinishedVerified, Error> {
    let expected = keys::verify_data(crypto, master, side, transcript_hash);
    if body.len() == expected.len() && constant_time_eq(body, &expected) {
        Ok(FinishedVerified(()))
    } else {
        Err(Error::BadFinished)
    }
}

/// Where a connection is in the handshake: one state per expected message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Client: sent a ClientHello, expects HelloVerifyRequest or ServerHello.
    ExpectServerHello,
    /// Client (raw public keys): expects the server's Certificate.
    ExpectServerCertificate,
    /// Client (raw public keys): expects the signed ServerKeyExchange.
    ExpectServerKeyExchange,
    /// Client: expects CertificateRequest (raw public keys), ServerKeyExchange (PSK identity
    /// hint) or ServerHelloDone.
    ExpectServerHelloDone,
    /// Server (mutual authentication): expects the client's Certificate.
    ExpectClientCertificate,
    /// Server: expects the client's ClientKeyExchange.
    ExpectClientKeyExchange,
    /// Server (mutual authentication): expects the client's CertificateVerify.
    ExpectCertificateVerify,
    /// Either: expects the peer's ChangeCipherSpec.
    ExpectChangeCipherSpec,
    /// Either: expects the peer's Finished (epoch 1).
    ExpectFinished,
    /// The handshake is complete: application data flows.
    Established,
    /// A fatal error: nothing more is accepted or sent (but the alert).
    Failed(Error),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Client,
    Server,
}

#[derive(Clone, Copy)]
struct OutMessage {
    content_type: ContentType,
    epoch: u16,
    start: usize,
    len: usize,
}

/// A flight: the handshake messages (and ChangeCipherSpec) sent together, kept so the whole
/// flight can be sent again with fresh record numbers (RFC 6347 §4.2.4).
struct Flight {
    buf: [u8; MAX_FLIGHT],
    used: usize,
    msgs: [Option<OutMessage>; 6],
}

impl Flight {
    const fn new() -> Self {
        Self {
            buf: [0; MAX_FLIGHT],
            used: 0,
            msgs: [None; 6],
        }
    }

    fn clear(&mut self) {
        self.used = 0;
        self.msgs = [None; 6];
    }

    fn push(&mut self, content_type: ContentType, epoch: u16, bytes: &[u8]) -> Result<(), Error> {
        let slot = self
            .msgs
            .iter_mut()
            .find(|m| m.is_none())
            .ok_or(Error::BufferTooSmall)?;
        let end = self.used + bytes.len();
        if end > MAX_FLIGHT {
            return Err(Error::BufferTooSmall);
        }
        self.buf[self.used..end].copy_from_slice(bytes);
        *slot = Some(OutMessage {
            content_type,
            epoch,
            start: self.used,
            len: bytes.len(),
        });
        self.used = end;
        Ok(())
    }
}

/// Datagrams (or application records) waiting to be taken, in `N` bytes.
struct Queue<const N: usize> {
    buf: [u8; N],
    lens: [u16; MAX_QUEUED],
    n: usize,
    used: usize,
}

impl<const N: usize> Queue<N> {
    const fn new() -> Self {
        Self {
            buf: [0; N],
            lens: [0; MAX_QUEUED],
            n: 0,
            used: 0,
        }
    }

    fn push(&mut self, d: &[u8]) -> Result<(), Error> {
        if self.n == MAX_QUEUED || self.used + d.len() > N {
            return Err(Error::BufferTooSmall);
        }
        self.buf[self.used..self.used + d.len()].copy_from_slice(d);
        self.lens[self.n] = d.len() as u16;
        self.n += 1;
        self.used += d.len();
        Ok(())
    }

    fn pop(&mut self, out: &mut [u8]) -> Option<usize> {
        if self.n == 0 {
            return None;
        }
        let len = usize::from(self.lens[0]);
        if out.len() < len {
            return None;
        }
        out[..len].copy_from_slice(&self.buf[..len]);
        self.buf.copy_within(len..self.used, 0);
        self.lens.copy_within(1..self.n, 0);
        self.n -= 1;
        self.used -= len;
        Some(len)
    }
}

/// Epoch-0 handshake fragments that arrived ahead of the expected message, each stored as
/// `len (u16) || fragment (header and body)`, oldest first; bounded by [`AHEAD_BYTES`].
struct Ahead {
    buf: [u8; AHEAD_BYTES],
    used: usize,
}

impl Ahead {
    const fn new() -> Self {
        Self {
            buf: [0; AHEAD_BYTES],
            used: 0,
        }
    }

    fn entries(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        let mut at = 0;
        core::iter::from_fn(move || {
            if at + 2 > self.used {
                return None;
            }
            let len = usize::from(u16::from_be_bytes([self.buf[at], self.buf[at + 1]]));
            let start = at;
            at += 2 + len;
            Some((start, &self.buf[start + 2..start + 2 + len]))
        })
    }

    /// Keeps `f` unless an identical fragment is kept already or there is no room (then it
    /// is dropped: the peer's retransmission brings it again).
    fn keep(&mut self, f: &Fragment<'_>) -> bool {
        let len = HS_HEADER_LEN + f.body.len();
        if self.used + 2 + len > AHEAD_BYTES {
            return false;
        }
        let duplicate = self.entries().any(|(_, e)| {
            Fragment::parse(e).is_ok_and(|(k, _)| {
                k.message_seq == f.message_seq && k.offset == f.offset && k.body == f.body
            })
        });
        if duplicate {
            return true;
        }
        let start = self.used;
        self.buf[start..start + 2].copy_from_slice(&(len as u16).to_be_bytes());
        let mut w = Writer::new(&mut self.buf[start + 2..start + 2 + len]);
        if f.write(&mut w).is_err() {
            return false;
        }
        self.used += 2 + len;
        true
    }

    /// Removes and copies into `out` the first kept fragment of message `seq`, dropping any
    /// kept for messages before it. Returns its length.
    fn take(&mut self, seq: u16, out: &mut [u8]) -> Option<usize> {
        loop {
            let (start, n, msg_seq) = self.entries().find_map(|(start, e)| {
                let (k, _) = Fragment::parse(e).ok()?;
                (k.message_seq <= seq).then_some((start, e.len(), k.message_seq))
            })?;
            let found = msg_seq == seq && n <= out.len();
            if found {
                out[..n].copy_from_slice(&self.buf[start + 2..start + 2 + n]);
            }
            self.buf.copy_within(start + 2 + n..self.used, start);
            self.used -= 2 + n;
            if found {
                return Some(n);
            }
        }
    }

    fn clear(&mut self) {
        self.used = 0;
    }
}

/// Keys and sequence state of one epoch in one direction.
struct Epoch1 {
    write: Ccm8Keys,
    read: Ccm8Keys,
}

/// A DTLS 1.2 connection, client or server. `T` says what this side trusts.
pub struct Connection<C, T = NoTrust> {
    crypto: C,
    trust: T,
    config: Config,
    role: Role,
    state: State,
    suite: CipherSuite,
    client_random: [u8; 32],
    server_random: [u8; 32],
    identity: [u8; 128],
    identity_len: usize,
    psk: [u8; MAX_PSK_LEN],
    psk_len: usize,
    /// This side's signature key (raw public keys).
    own_key: Option<SecretKey>,
    /// The peer's authenticated raw public key.
    peer_key: Option<PublicKey>,
    /// Client: the server asked for the client's key. Server: it asks for it.
    client_auth: bool,
    /// Client: the server agreed to a raw public key for the client (client_certificate_type).
    client_rpk: bool,
    /// The server's (resp. the client's) Certificate carries an X.509 chain, not a raw key.
    server_x509: bool,
    client_x509: bool,
    /// This side's chain as the Certificate message carries it (`certificate_list`).
    own_chain: [u8; MAX_CHAIN],
    own_chain_len: usize,
    /// RFC 9146: the connection ID the peer puts in records it sends us, and the one we put
    /// in records we send it (empty: plain records in that direction).
    own_cid: [u8; MAX_CID],
    own_cid_len: usize,
    peer_cid: [u8; MAX_CID],
    peer_cid_len: usize,
    /// The session ID of this handshake (empty: not resumable), and whether it is an
    /// abbreviated one (client: asked to resume; then whether the server agreed).
    session_id: [u8; 32],
    session_id_len: usize,
    resuming: bool,
    /// This side's ephemeral ECDH secret (server: from its ServerKeyExchange).
    ephemeral: Option<AgreementSecret>,
    /// Client: the server's ephemeral point.
    peer_point: [u8; 65],
    master: [u8; 48],
    keys: Option<Epoch1>,
    read_epoch: u16,
    write_epoch: u16,
    write_seq: [u64; 2],
    replay: [ReplayWindow; 2],
    next_send_msg: u16,
    next_recv_msg: u16,
    /// HelloVerifyRequests answered so far (client).
    hello_verifies: u8,
    reassembler: Reassembler<MAX_MESSAGE>,
    ahead: Ahead,
    transcript: [u8; MAX_TRANSCRIPT],
    transcript_len: usize,
    flight: Flight,
    /// Whether our last flight is the final one of the handshake (no timer: it is resent
    /// only when the peer's final flight shows up again).
    flight_is_final: bool,
    timer: Option<u64>,
    timeout_ms: u64,
    retransmissions: u32,
    /// The timer was armed by a flight not yet handed to [`Connection::poll_transmit_at`].
    timer_from_send: bool,
    queue: Queue<SEND_QUEUE_BYTES>,
    /// Received application records not yet taken by the caller.
    app: Queue<RECEIVE_QUEUE_BYTES>,
    /// Records dropped: bad MAC, replays, unknown epochs, malformed.
    pub dropped: u32,
}

impl<C: CryptoProvider, T: Trust> Connection<C, T> {
    /// Starts a client handshake; the first ClientHello is queued. `trust` decides whether
    /// the server's raw public key is acceptable.
    pub fn connect(
        crypto: C,
        trust: T,
        config: Config,
        rng: &mut dyn Rng,
        credentials: Credentials<'_>,
        now: u64,
    ) -> Result<Self, Error> {
        let mut c = Self::blank(crypto, trust, config, Role::Client);
        match credentials {
            #[cfg(feature = "psk")]
            Credentials::Psk { identity, key } => {
                c.set_psk(identity, key)?;
                c.suite = CipherSuite::TLS_PSK_WITH_AES_128_CCM_8;
            }
            #[cfg(feature = "ecdhe-psk")]
            Credentials::EcdhePsk { identity, key } => {
                c.set_psk(identity, key)?;
                c.suite = CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256;
                c.ephemeral = Some(c.crypto.generate_agreement(AgreementAlgorithm::P256, rng)?);
            }
            #[cfg(feature = "ecdhe-ecdsa")]
            Credentials::RawPublicKey(key) => {
                c.suite = ecdsa_suite(&config);
                c.own_key = key.cloned();
                // The ephemeral ECDH secret for ClientKeyExchange, drawn now while the
                // caller's RNG is at hand.
                c.ephemeral = Some(c.crypto.generate_agreement(AgreementAlgorithm::P256, rng)?);
            }
            #[cfg(feature = "x509")]
            Credentials::Certificate(own) => {
                c.suite = ecdsa_suite(&config);
                c.server_x509 = true;
                c.client_x509 = true;
                if let Some((chain, key)) = own {
                    c.set_own_chain(chain)?;
                    c.own_key = Some(key.clone());
                }
                c.ephemeral = Some(c.crypto.generate_agreement(AgreementAlgorithm::P256, rng)?);
            }
        }
        rng.fill(&mut c.client_random)?;
        c.send_client_hello(&[], now)?;
        Ok(c)
    }

    /// Like [`Connection::connect`], asking to resume `session` (abbreviated handshake: no
    /// key exchange, no signatures). If the server no longer has it, the handshake falls back
    /// to a full one with `credentials`.
    pub fn resume(
        crypto: C,
        trust: T,
        config: Config,
        rng: &mut dyn Rng,
        credentials: Credentials<'_>,
        session: &Session,
        now: u64,
    ) -> Result<Self, Error> {
        let mut c = Self::connect(crypto, trust, config, rng, credentials, now)?;
        if session.suite != c.suite {
            return Ok(c);
        }
        c.session_id = session.id;
        c.session_id_len = 32;
        c.master = session.master;
        c.peer_key = session.peer_key;
        c.resuming = true;
        // Replace the queued ClientHello with one naming the session.
        c.queue = Queue::new();
        c.transcript_len = 0;
        c.next_send_msg = 0;
        c.write_seq[0] = 0;
        c.send_client_hello(&[], now)?;
        Ok(c)
    }

    /// This handshake's client random.
    pub fn client_random(&self) -> &[u8; 32] {
        &self.client_random
    }

    /// Whether this connection was an abbreviated handshake that resumed a session.
    pub fn resumed(&self) -> bool {
        self.resuming && self.is_established()
    }

    /// The session a later handshake may resume, once established with a session ID.
    pub fn session(&self) -> Option<Session> {
        if !self.is_established() || self.session_id_len != 32 {
            return None;
        }
        let mut psk_identity = [0u8; 128];
        psk_identity[..self.identity_len].copy_from_slice(&self.identity[..self.identity_len]);
        Some(Session {
            id: self.session_id,
            suite: self.suite,
            master: self.master,
            psk_identity,
            psk_identity_len: self.identity_len,
            peer_key: self.peer_key,
        })
    }

    #[cfg(any(feature = "psk", feature = "ecdhe-psk"))]
    fn set_psk(&mut self, identity: &[u8], key: &[u8]) -> Result<(), Error> {
        if identity.len() > 128 || key.is_empty() || key.len() > MAX_PSK_LEN {
            return Err(Error::Decode("PSK identity or key length"));
        }
        self.identity[..identity.len()].copy_from_slice(identity);
        self.identity_len = identity.len();
        self.psk[..key.len()].copy_from_slice(key);
        self.psk_len = key.len();
        Ok(())
    }

    /// Creates the server side for a datagram whose ClientHello [`CookieKey::respond`]
    /// accepted, picks the suite, and queues the server's flight.
    pub fn accept(
        crypto: C,
        trust: T,
        config: Config,
        offer: &ServerCredentials<'_>,
        rng: &mut dyn Rng,
        datagram: &[u8],
        now: u64,
    ) -> Result<Self, Error> {
        let (rec, f) = first_client_hello(datagram)?;
        let ch = ClientHello::parse(f.body)?;
        if ch.version != ProtocolVersion::DTLS_1_2 {
            return Err(Error::UnsupportedVersion(ch.version.0));
        }
        if ch
            .extensions
            .get(ExtensionType::EXTENDED_MASTER_SECRET)
            .is_none()
        {
            return Err(Error::MissingExtendedMasterSecret);
        }
        let scsv = ch
            .cipher_suites()
            .any(|s| s == CipherSuite::TLS_EMPTY_RENEGOTIATION_INFO_SCSV);
        check_renegotiation_info(ch.extensions, scsv)?;
        let rpk_ok = |ext: ExtensionType| {
            ch.extensions
                .get(ext)
                .and_then(|d| d.split_first())
                .is_some_and(|(n, types)| {
                    usize::from(*n) == types.len() && types.contains(&RAW_PUBLIC_KEY)
                })
        };
        // X.509 is the default certificate type: a client that sends no certificate-type
        // extension, or lists X509 in it, takes certificates (RFC 7250 §4.1).
        let x509_ok = |ext: ExtensionType| match ch.extensions.get(ext) {
            None => true,
            Some(d) => d
                .split_first()
                .is_some_and(|(n, types)| usize::from(*n) == types.len() && types.contains(&X509)),
        };
        #[cfg(feature = "x509")]
        let have_chain = offer.chain.is_some();
        #[cfg(not(feature = "x509"))]
        let have_chain = false;
        // Raw public keys when the client asks for them, else the chain if there is one.
        let server_rpk = rpk_ok(ExtensionType::SERVER_CERTIFICATE_TYPE);
        let server_x509 =
            !server_rpk && have_chain && x509_ok(ExtensionType::SERVER_CERTIFICATE_TYPE);
        let client_rpk = rpk_ok(ExtensionType::CLIENT_CERTIFICATE_TYPE);
        // Client certificates only on a server configured with certificates itself.
        let client_x509 =
            !client_rpk && have_chain && x509_ok(ExtensionType::CLIENT_CERTIFICATE_TYPE);
        // Resumption (RFC 5246 §7.3): the cached session the client names, if its peer is
        // still trusted and the client still offers its suite.
        let resume = offer.resume.filter(|sess| {
            ch.session_id == sess.id
                && ch.cipher_suites().any(|s| s == sess.suite)
                && match kx_of(sess.suite) {
                    Kx::Psk | Kx::EcdhePsk => {
                        let mut k = [0u8; MAX_PSK_LEN];
                        trust.psk(sess.psk_identity(), &mut k).is_some()
                    }
                    // A client key must still be trusted as a key: a session from a certificate
                    // whose key `Trust` does not know otherwise takes a full handshake.
                    Kx::EcdheEcdsa => match &sess.peer_key {
                        Some(key) => trust.trusted_key(key),
                        None => !offer.require_client_key,
                    },
                }
        });
        // The client's preference order decides among the suites this server offers.
        let suite = ch
            .cipher_suites()
            .find(|s| {
                (cfg!(feature = "psk")
                    && *s == CipherSuite::TLS_PSK_WITH_AES_128_CCM_8
                    && offer.psk)
                    || (cfg!(feature = "ecdhe-psk")
                        && *s == CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256
                        && offer.psk
                        && offers_p256(&ch))
                    || (cfg!(feature = "ecdhe-ecdsa")
                        && (*s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8
                            || (cfg!(feature = "gcm")
                                && *s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256))
                        && offer.key.is_some()
                        && (server_rpk || server_x509)
                        && offers_p256(&ch)
                        && offer
                            .key
                            .is_some_and(|k| offers_scheme(&ch, scheme_of(k.algorithm())))
                        && (!offer.require_client_key || client_rpk || client_x509))
            })
            .or(resume.map(|sess| sess.suite))
            .ok_or(Error::NoCommonCipherSuite)?;
        let suite = resume.map_or(suite, |sess| sess.suite);
        let mut c = Self::blank(crypto, trust, config, Role::Server);
        c.suite = suite;
        c.client_random = *ch.random;
        rng.fill(&mut c.server_random)?;
        c.replay[0].accept(rec.header.sequence);
        c.write_seq[0] = rec.header.sequence + 1;
        c.next_recv_msg = next_seq(f.message_seq)?;
        c.next_send_msg = f.message_seq;
        c.add_transcript(&f)?;
        c.flight.clear();
        // connection_id (RFC 9146 §3): the client's ID goes into our records, ours into its.
        let mut cid_ext = [0u8; 4 + 1 + MAX_CID];
        let mut cid_ext_len = 0;
        if let Some(d) = ch.extensions.get(ExtensionType::CONNECTION_ID) {
            let mut r = Reader::new(d);
            let theirs = r.vec8(0, MAX_CID, "connection_id")?;
            r.finish("connection_id")?;
            if !offer.connection_id.is_empty() && offer.connection_id.len() <= MAX_CID {
                c.peer_cid[..theirs.len()].copy_from_slice(theirs);
                c.peer_cid_len = theirs.len();
                let ours = offer.connection_id;
                c.own_cid[..ours.len()].copy_from_slice(ours);
                c.own_cid_len = ours.len();
                let mut w = Writer::new(&mut cid_ext);
                w.u16(ExtensionType::CONNECTION_ID.0)?;
                w.u16((ours.len() + 1) as u16)?;
                w.vec8(ours)?;
                cid_ext_len = w.len();
            }
        }
        let cid_ext = &cid_ext[..cid_ext_len];
        if let Some(sess) = resume {
            // Abbreviated handshake: ServerHello naming the session, ChangeCipherSpec,
            // Finished; the client's ChangeCipherSpec and Finished end it.
            c.session_id = sess.id;
            c.session_id_len = 32;
            c.resuming = true;
            c.master = sess.master;
            c.peer_key = sess.peer_key;
            let id = sess.psk_identity();
            c.identity[..id.len()].copy_from_slice(id);
            c.identity_len = id.len();
            let points: &[u8] = if kx_of(suite) == Kx::Psk {
                &[]
            } else {
                &[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00]
            };
            c.queue_server_hello(points, cid_ext)?;
            c.install_keys();
            c.queue_ccs_finished()?;
            c.state = State::ExpectChangeCipherSpec;
            c.send_flight(now, false)?;
            return Ok(c);
        }
        if offer.issue_session_ids {
            rng.fill(&mut c.session_id)?;
            c.session_id_len = 32;
        }
        if kx_of(suite) == Kx::Psk {
            // Flight 4: ServerHello, ServerHelloDone (no identity hint: RFC 7925 §4.1 advises
            // against sending one).
            c.queue_server_hello(&[], cid_ext)?;
            c.queue_handshake(HandshakeType::SERVER_HELLO_DONE, &[])?;
            c.state = State::ExpectClientKeyExchange;
        } else if kx_of(suite) == Kx::EcdhePsk {
            // ServerHello (ec_point_formats), ServerKeyExchange (empty hint, the ephemeral
            // point, no signature: RFC 5489 §2), ServerHelloDone.
            c.queue_server_hello(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00], cid_ext)?;
            let params = c.ephemeral_params(rng)?;
            let mut ske = [0u8; 2 + 69];
            ske[2..].copy_from_slice(&params);
            c.queue_handshake(HandshakeType::SERVER_KEY_EXCHANGE, &ske)?;
            c.queue_handshake(HandshakeType::SERVER_HELLO_DONE, &[])?;
            c.state = State::ExpectClientKeyExchange;
        } else {
            let key = offer.key.ok_or(Error::NoCommonCipherSuite)?;
            c.own_key = Some(key.clone());
            c.client_auth = offer.require_client_key;
            c.server_x509 = server_x509;
            c.client_x509 = c.client_auth && !client_rpk;
            #[cfg(feature = "x509")]
            if let Some(chain) = offer.chain.filter(|_| server_x509) {
                c.set_own_chain(chain)?;
            }
            // server_certificate_type, ec_point_formats [uncompressed], and with mutual
            // authentication client_certificate_type (RFC 7250 §4.2: one type each, and only
            // in answer to the client's extension).
            let mut ext = [0u8; 24];
            let mut w = Writer::new(&mut ext);
            if ch
                .extensions
                .get(ExtensionType::SERVER_CERTIFICATE_TYPE)
                .is_some()
            {
                let t = if server_x509 { X509 } else { RAW_PUBLIC_KEY };
                w.bytes(&[0x00, 0x14, 0x00, 0x01, t])?;
            }
            w.bytes(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00])?;
            if c.client_auth
                && ch
                    .extensions
                    .get(ExtensionType::CLIENT_CERTIFICATE_TYPE)
                    .is_some()
            {
                let t = if c.client_x509 { X509 } else { RAW_PUBLIC_KEY };
                w.bytes(&[0x00, 0x13, 0x00, 0x01, t])?;
            }
            let n = w.len();
            c.queue_server_hello(&ext[..n], cid_ext)?;
            c.queue_own_certificate()?;
            c.queue_server_key_exchange(rng)?;
            if c.client_auth {
                // CertificateRequest: types [ecdsa_sign], schemes, no authorities (RFC 5246
                // §7.4.4; RFC 8422 §5.5).
                let mut cr = [0u8; 16];
                let mut w = Writer::new(&mut cr);
                w.vec8(&[ECDSA_SIGN])?;
                w.u16((SCHEMES.len() * 2) as u16)?;
                for sc in SCHEMES {
                    w.u16(sc.0)?;
                }
                w.u16(0)?;
                let n = w.len();
                c.queue_handshake(HandshakeType::CERTIFICATE_REQUEST, &cr[..n])?;
                c.state = State::ExpectClientCertificate;
            } else {
                c.state = State::ExpectClientKeyExchange;
            }
            c.queue_handshake(HandshakeType::SERVER_HELLO_DONE, &[])?;
        }
        c.send_flight(now, false)?;
        Ok(c)
    }

    fn queue_server_hello(&mut self, suite_extensions: &[u8], cid_ext: &[u8]) -> Result<(), Error> {
        let mut ext = [0u8; 64 + 4 + 1 + MAX_CID];
        let mut w = Writer::new(&mut ext);
        w.bytes(&HELLO_EXTENSIONS)?;
        w.bytes(suite_extensions)?;
        w.bytes(cid_ext)?;
        let en = w.len();
        let mut body = [0u8; 160 + 4 + 1 + MAX_CID];
        let mut w = Writer::new(&mut body);
        ServerHello {
            version: ProtocolVersion::DTLS_1_2,
            random: &self.server_random,
            session_id: &self.session_id[..self.session_id_len],
            cipher_suite: self.suite,
            compression_method: 0,
            extensions: Extensions::parse(&ext[..en])?,
        }
        .write(&mut w)?;
        let n = w.len();
        self.queue_handshake(HandshakeType::SERVER_HELLO, &body[..n])
    }

    /// Certificate carrying this side's raw public key (RFC 7250 §3: one
    /// `ASN.1_subjectPublicKeyInfo<1..2^24-1>`).
    fn queue_own_certificate(&mut self) -> Result<(), Error> {
        let ours_x509 = match self.role {
            Role::Client => self.client_x509,
            Role::Server => self.server_x509,
        };
        if ours_x509 {
            // certificate_list as stored by set_own_chain.
            let mut body = [0u8; 3 + MAX_CHAIN];
            let n = self.own_chain_len;
            body[..3].copy_from_slice(&(n as u32).to_be_bytes()[1..]);
            body[3..3 + n].copy_from_slice(&self.own_chain[..n]);
            return self.queue_handshake(HandshakeType::CERTIFICATE, &body[..3 + n]);
        }
        let key = self.own_key.as_ref().ok_or(Error::MissingClientKey)?;
        let public = self.crypto.public_key(key)?;
        let mut body = [0u8; 3 + 91];
        let mut w = Writer::new(&mut body);
        w.u24(spki::spki_len(&public) as u32)?;
        spki::write_spki(&public, &mut w)?;
        let n = w.len();
        self.queue_handshake(HandshakeType::CERTIFICATE, &body[..n])
    }

    /// A fresh ephemeral P-256 secret (kept for the ClientKeyExchange) and its ServerECDHParams:
    /// named_curve secp256r1 and the uncompressed point (RFC 8422 §5.4).
    fn ephemeral_params(&mut self, rng: &mut dyn Rng) -> Result<[u8; 4 + 65], Error> {
        let eph = self
            .crypto
            .generate_agreement(AgreementAlgorithm::P256, rng)?;
        let point = self.crypto.agreement_public_key(&eph)?;
        self.ephemeral = Some(eph);
        let mut params = [0u8; 4 + 65];
        params[0] = 3; // named_curve
        params[1..3].copy_from_slice(&NamedGroup::SECP256R1.0.to_be_bytes());
        params[3] = 65;
        params[4..].copy_from_slice(point.as_bytes());
        Ok(params)
    }

    /// Keeps this side's chain (leaf first) as `ASN.1Cert` entries of a certificate_list.
    #[cfg(feature = "x509")]
    fn set_own_chain(&mut self, chain: &[&[u8]]) -> Result<(), Error> {
        let mut w = Writer::new(&mut self.own_chain);
        for cert in chain {
            w.u24(cert.len() as u32)
                .map_err(|_| Error::BufferTooSmall)?;
            w.bytes(cert).map_err(|_| Error::BufferTooSmall)?;
        }
        self.own_chain_len = w.len();
        Ok(())
    }

    /// ServerKeyExchange for ECDHE (RFC 8422 §5.4): named curve secp256r1, the ephemeral
    /// point, and a signature over client_random || server_random || params.
    fn queue_server_key_exchange(&mut self, rng: &mut dyn Rng) -> Result<(), Error> {
        let params = self.ephemeral_params(rng)?;
        let key = self.own_key.as_ref().ok_or(Error::MissingClientKey)?;
        let mut signed = [0u8; 64 + 69];
        signed[..32].copy_from_slice(&self.client_random);
        signed[32..64].copy_from_slice(&self.server_random);
        signed[64..].copy_from_slice(&params);
        let mut body = [0u8; 69 + 4 + 72];
        let mut w = Writer::new(&mut body);
        w.bytes(&params)?;
        write_signature(&self.crypto, key, &signed, &mut w)?;
        let n = w.len();
        self.queue_handshake(HandshakeType::SERVER_KEY_EXCHANGE, &body[..n])
    }

    fn blank(crypto: C, trust: T, config: Config, role: Role) -> Self {
        Self {
            crypto,
            trust,
            config,
            role,
            suite: CipherSuite::TLS_PSK_WITH_AES_128_CCM_8,
            own_key: None,
            peer_key: None,
            client_auth: false,
            client_rpk: false,
            server_x509: false,
            client_x509: false,
            own_chain: [0; MAX_CHAIN],
            own_chain_len: 0,
            own_cid: [0; MAX_CID],
            own_cid_len: 0,
            peer_cid: [0; MAX_CID],
            peer_cid_len: 0,
            session_id: [0; 32],
            session_id_len: 0,
            resuming: false,
            ephemeral: None,
            peer_point: [0; 65],
            state: if role == Role::Client {
                State::ExpectServerHello
            } else {
                State::ExpectClientKeyExchange
            },
            client_random: [0; 32],
            server_random: [0; 32],
            identity: [0; 128],
            identity_len: 0,
            psk: [0; MAX_PSK_LEN],
            psk_len: 0,
            master: [0; 48],
            keys: None,
            read_epoch: 0,
            write_epoch: 0,
            write_seq: [0; 2],
            replay: [ReplayWindow::new(); 2],
            next_send_msg: 0,
            next_recv_msg: 0,
            hello_verifies: 0,
            reassembler: Reassembler::new(),
            ahead: Ahead::new(),
            transcript: [0; MAX_TRANSCRIPT],
            transcript_len: 0,
            flight: Flight::new(),
            flight_is_final: false,
            timer: None,
            timeout_ms: config.initial_timeout_ms,
            retransmissions: 0,
            timer_from_send: false,
            queue: Queue::new(),
            app: Queue::new(),
            dropped: 0,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    /// Why the connection ended (our error or the peer's fatal alert / close_notify), if it
    /// did. A received alert is not an error of `handle_datagram`; callers check here.
    pub fn failure(&self) -> Option<Error> {
        match self.state {
            State::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Ends an established connection with a close_notify alert (RFC 5246 §7.2.1), queued
    /// for sending; afterwards the connection sends and accepts nothing.
    pub fn close(&mut self) -> Result<(), Error> {
        if self.state != State::Established {
            return Err(Error::NotEstablished);
        }
        let mut out = [0u8; 64];
        let n = self.record(
            ContentType::ALERT,
            1,
            &[AlertLevel::WARNING.0, AlertDescription::CLOSE_NOTIFY.0],
            &mut out,
        )?;
        self.queue.push(&out[..n])?;
        self.state = State::Failed(Error::PeerAlert(AlertDescription::CLOSE_NOTIFY.0));
        self.timer = None;
        Ok(())
    }

    /// The next datagram to send, if any. The flight's timer keeps running from the call
    /// that built the flight (see [`Connection::poll_transmit_at`]).
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Option<usize> {
        let n = self.queue.pop(out)?;
        self.timer_from_send = false;
        Some(n)
    }

    /// [`Connection::poll_transmit`] for callers that know when the datagram really leaves:
    /// a flight's retransmission timer then runs from the moment its first datagram is sent
    /// (RFC 6347 §4.2.4), not from the call that produced it. On a slow device the handshake
    /// computation between the two can take longer than the timeout itself.
    pub fn poll_transmit_at(&mut self, now: u64, out: &mut [u8]) -> Option<usize> {
        let n = self.queue.pop(out)?;
        if self.timer_from_send {
            self.timer_from_send = false;
            if self.timer.is_some() {
                self.timer = Some(now + self.timeout_ms);
            }
        }
        Some(n)
    }

    /// When to call [`Connection::handle_timeout`] next (milliseconds, the caller's clock).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.timer
    }

    /// Received application data, one record at a time, in arrival order.
    pub fn poll_app_data(&mut self, out: &mut [u8]) -> Option<usize> {
        self.app.pop(out)
    }

    /// Retransmits the last flight with a doubled timeout (RFC 6347 §4.2.4.1).
    pub fn handle_timeout(&mut self, now: u64) -> Result<(), Error> {
        match self.timer {
            Some(t) if now >= t => {}
            _ => return Ok(()),
        }
        if self.retransmissions >= self.config.max_retransmissions {
            self.timer = None;
            return self.fail(Error::HandshakeTimeout);
        }
        self.retransmissions += 1;
        self.timeout_ms = (self.timeout_ms * 2).min(self.config.max_timeout_ms);
        self.send_flight(now, true)
    }

    /// Protects `data` as one application-data record and queues it.
    pub fn send(&mut self, data: &[u8]) -> Result<(), Error> {
        if self.state != State::Established {
            return Err(Error::NotEstablished);
        }
        let mut out = [0u8; MAX_DATAGRAM];
        let n = self.protect(ContentType::APPLICATION_DATA, data, &mut out)?;
        self.queue.push(&out[..n])
    }

    /// Handles one received datagram. Records that fail checks are dropped (and counted);
    /// a handshake error queues a fatal alert and fails the connection.
    pub fn handle_datagram(&mut self, now: u64, datagram: &[u8]) -> Result<(), Error> {
        if let State::Failed(e) = self.state {
            return Err(e);
        }
        for rec in Records::with_cid(datagram, self.own_cid_len) {
            let Ok(rec) = rec else {
                self.dropped += 1;
                break;
            };
            if let Err(e) = self.handle_record(now, &rec) {
                if e.alert().is_none() {
                    self.dropped += 1;
                    continue;
                }
                return self.fail(e);
            }
        }
        Ok(())
    }

    fn handle_record(&mut self, now: u64, rec: &Record<'_>) -> Result<(), Error> {
        let h = rec.header;
        if h.version != ProtocolVersion::DTLS_1_2 && h.version != ProtocolVersion::DTLS_1_0 {
            return Err(Error::BadRecordVersion(h.version.0));
        }
        // Only epochs this side holds read keys for: 0, and 1 once the peer's
        // ChangeCipherSpec arrived. Older and future epochs are dropped (RFC 6347 §4.1).
        if h.epoch > self.read_epoch || h.epoch > 1 {
            return Err(Error::UnknownEpoch(h.epoch));
        }
        let window = &self.replay[h.epoch as usize];
        window.check(h.sequence)?;
        let mut buf = [0u8; MAX_DATAGRAM];
        // With a connection ID of ours, protected records must carry it (RFC 9146 §4); without
        // one, no record may.
        let cid_record = h.content_type == ContentType::TLS12_CID;
        if cid_record != (h.epoch > 0 && self.own_cid_len > 0) {
            // Unauthenticated, so dropped like a record that fails its MAC.
            return Err(Error::BadRecordMac);
        }
        if cid_record && rec.cid != &self.own_cid[..self.own_cid_len] {
            return Err(Error::BadRecordMac);
        }
        let mut h = h;
        let plain: &[u8] = if h.epoch == 0 {
            rec.fragment
        } else {
            let keys = self.keys.as_ref().ok_or(Error::UnknownEpoch(1))?;
            let frag = buf
                .get_mut(..rec.fragment.len())
                .ok_or(Error::RecordOverflow)?;
            frag.copy_from_slice(rec.fragment);
            if cid_record {
                let (real, plain) =
                    protection::open_cid(&self.crypto, &keys.read, &h, rec.cid, frag)?;
                h.content_type = real;
                plain
            } else {
                protection::open(&self.crypto, &keys.read, &h, frag)?
            }
        };
        // Authenticated (or epoch 0): now the window may move.
        self.replay[h.epoch as usize].accept(h.sequence);
        match h.content_type {
            ContentType::HANDSHAKE => {
                let mut rest = plain;
                while !rest.is_empty() {
                    let (f, next) = Fragment::parse(rest)?;
                    rest = next;
                    self.handle_fragment(now, h.epoch, &f)?;
                }
                Ok(())
            }
            ContentType::CHANGE_CIPHER_SPEC => self.handle_ccs(h.epoch, plain),
            // Once the peer's records are protected, an epoch-0 alert is unauthenticated
            // (anyone can forge it): dropped, so a spoofed datagram cannot end the connection.
            ContentType::ALERT if h.epoch < self.read_epoch => Err(Error::UnknownEpoch(h.epoch)),
            ContentType::ALERT => self.handle_alert(plain),
            ContentType::APPLICATION_DATA => {
                // Never before the peer's Finished verified, never at epoch 0
                // (CVE-2020-24585's class).
                if self.state != State::Established || h.epoch == 0 {
                    return Err(Error::UnexpectedMessage(
                        "application data before the handshake completed",
                    ));
                }
                if plain.len() > MAX_APP_DATA {
                    return Err(Error::RecordOverflow);
                }
                if self.app.push(plain).is_err() {
                    // The caller is not draining: drop, as a full socket buffer would.
                    self.dropped += 1;
                }
                Ok(())
            }
            _ => Err(Error::UnexpectedMessage("unknown content type")),
        }
    }

    fn handle_alert(&mut self, plain: &[u8]) -> Result<(), Error> {
        let mut r = Reader::new(plain);
        let level = AlertLevel(r.u8("alert")?);
        let desc = AlertDescription(r.u8("alert")?);
        r.finish("alert")?;
        if level == AlertLevel::FATAL || desc == AlertDescription::CLOSE_NOTIFY {
            self.state = State::Failed(Error::PeerAlert(desc.0));
            self.timer = None;
        }
        Ok(())
    }

    fn handle_ccs(&mut self, epoch: u16, plain: &[u8]) -> Result<(), Error> {
        if plain != [1] {
            return Err(Error::Decode("ChangeCipherSpec"));
        }
        match self.state {
            // CCS is only valid where the handshake expects it: an early one (before the keys
            // exist) is the CVE-2017-7243 class of bug.
            State::ExpectChangeCipherSpec if epoch == 0 => {
                self.read_epoch = 1;
                self.state = State::ExpectFinished;
                Ok(())
            }
            // A retransmitted CCS after the handshake: ignore.
            State::Established | State::ExpectFinished => Ok(()),
            _ => Err(Error::UnexpectedChangeCipherSpec),
        }
    }

    fn handle_fragment(&mut self, now: u64, epoch: u16, f: &Fragment<'_>) -> Result<(), Error> {
        if f.message_seq < self.next_recv_msg {
            // A retransmission of the peer's previous flight: our answer was lost, send our
            // last flight again (RFC 6347 §4.2.4). For the final flight this is the only
            // trigger.
            // The final flight answers only the peer's authenticated (epoch 1) Finished: an
            // epoch-0 fragment can be forged by anyone and must not make this side send.
            // One trigger per retransmitted flight, not one per fragment: only the end of the
            // last message of the peer's previous flight (the fragment every complete
            // retransmission carries exactly once).
            let ends_flight = f.message_seq + 1 == self.next_recv_msg
                && f.offset as usize + f.body.len() == f.length as usize;
            let trigger = ends_flight
                && if self.flight_is_final {
                    epoch == 1
                } else {
                    self.timer.is_some()
                };
            if self.flight.used > 0 && trigger {
                // A full send queue (the caller is not draining) drops the retransmission
                // rather than failing the connection.
                match self.send_flight(now, true) {
                    Err(Error::BufferTooSmall) => self.dropped += 1,
                    r => r?,
                }
            }
            return Ok(());
        }
        if f.message_seq > self.next_recv_msg {
            // Ahead of the expected message (an earlier datagram of the flight was lost):
            // kept, within bounds, until the gap is filled. Only epoch 0 carries them.
            if epoch == 0
                && self.state != State::Established
                && f.message_seq - self.next_recv_msg <= AHEAD_MESSAGES
                && !self.ahead.keep(f)
            {
                self.dropped += 1;
            }
            return Ok(());
        }
        let mut body = [0u8; MAX_MESSAGE];
        let len = match self.reassembler.add(f)? {
            Some(b) => {
                body[..b.len()].copy_from_slice(b);
                b.len()
            }
            None => return Ok(()),
        };
        let whole = Fragment {
            body: &body[..len],
            offset: 0,
            ..*f
        };
        self.next_recv_msg = next_seq(self.next_recv_msg)?;
        self.handle_message(now, epoch, &whole)?;
        self.replay_ahead(now)
    }

    /// Hands kept fragments of the now expected message to [`Self::handle_fragment`], as if
    /// they had just arrived, until none is kept for it.
    fn replay_ahead(&mut self, now: u64) -> Result<(), Error> {
        if self.state == State::Established {
            self.ahead.clear();
            return Ok(());
        }
        let mut buf = [0u8; HS_HEADER_LEN + MAX_MESSAGE];
        // Each replayed fragment either completes a message (which replays the next one's
        // from within) or is taken out of the store, so this ends.
        while let Some(n) = self.ahead.take(self.next_recv_msg, &mut buf) {
            let (f, _) = Fragment::parse(&buf[..n])?;
            let seq = self.next_recv_msg;
            self.handle_fragment(now, 0, &f)?;
            if self.next_recv_msg != seq {
                return Ok(());
            }
        }
        Ok(())
    }

    fn handle_message(&mut self, now: u64, epoch: u16, m: &Fragment<'_>) -> Result<(), Error> {
        // Every handshake message but Finished travels in epoch 0.
        if epoch != 0 && m.msg_type != HandshakeType::FINISHED {
            return Err(Error::UnexpectedHandshake(m.msg_type.0));
        }
        match (self.state, m.msg_type) {
            (State::ExpectServerHello, HandshakeType::HELLO_VERIFY_REQUEST) => {
                // A server may ask again (e.g. after rotating its cookie secret), but not
                // without end.
                self.hello_verifies += 1;
                if self.hello_verifies > MAX_HELLO_VERIFY {
                    return Err(Error::IllegalParameter("repeated HelloVerifyRequest"));
                }
                let hvr = HelloVerifyRequest::parse(m.body)?;
                let mut cookie = [0u8; 255];
                cookie[..hvr.cookie.len()].copy_from_slice(hvr.cookie);
                // The first ClientHello and the HelloVerifyRequest are not in the transcript.
                self.transcript_len = 0;
                self.send_client_hello(&cookie[..hvr.cookie.len()], now)
            }
            (State::ExpectServerHello, HandshakeType::SERVER_HELLO) => {
                let sh = ServerHello::parse(m.body)?;
                if sh.version != ProtocolVersion::DTLS_1_2 {
                    return Err(Error::UnsupportedVersion(sh.version.0));
                }
                if sh.cipher_suite != self.suite || sh.compression_method != 0 {
                    return Err(Error::IllegalParameter(
                        "ServerHello cipher suite or compression",
                    ));
                }
                if sh
                    .extensions
                    .get(ExtensionType::EXTENDED_MASTER_SECRET)
                    .is_none()
                {
                    return Err(Error::MissingExtendedMasterSecret);
                }
                check_renegotiation_info(sh.extensions, false)?;
                let resumed = self.resuming
                    && self.session_id_len == 32
                    && sh.session_id == &self.session_id[..];
                if !resumed {
                    // A full handshake: whatever was cached is not used.
                    self.resuming = false;
                    self.peer_key = None;
                    self.session_id_len = 0;
                    if let Ok(id) = <[u8; 32]>::try_from(sh.session_id) {
                        self.session_id = id;
                        self.session_id_len = 32;
                    }
                }
                let server_type = sh.extensions.get(ExtensionType::SERVER_CERTIFICATE_TYPE);
                if kx_of(self.suite) == Kx::EcdheEcdsa && !resumed {
                    let ok = if self.server_x509 {
                        server_type.is_none() || server_type == Some(&[X509][..])
                    } else {
                        server_type == Some(&[RAW_PUBLIC_KEY][..])
                    };
                    if !ok {
                        return Err(Error::IllegalParameter("server certificate type"));
                    }
                }
                self.client_rpk = sh.extensions.get(ExtensionType::CLIENT_CERTIFICATE_TYPE)
                    == Some(&[RAW_PUBLIC_KEY][..]);
                if let Some(d) = sh.extensions.get(ExtensionType::CONNECTION_ID) {
                    if !self.config.connection_id {
                        return Err(Error::IllegalParameter("unrequested connection_id"));
                    }
                    let mut r = Reader::new(d);
                    let theirs = r.vec8(0, MAX_CID, "connection_id")?;
                    r.finish("connection_id")?;
                    self.peer_cid[..theirs.len()].copy_from_slice(theirs);
                    self.peer_cid_len = theirs.len();
                }
                self.server_random = *sh.random;
                self.add_transcript(m)?;
                // The timer keeps running until the server's whole flight is in (RFC 6347
                // §4.2.4): if the rest is lost, retransmitting the ClientHello makes the
                // server send it again.
                if resumed {
                    self.install_keys();
                    self.state = State::ExpectChangeCipherSpec;
                    return Ok(());
                }
                self.state = match kx_of(self.suite) {
                    Kx::Psk => State::ExpectServerHelloDone,
                    Kx::EcdhePsk => State::ExpectServerKeyExchange,
                    Kx::EcdheEcdsa => State::ExpectServerCertificate,
                };
                Ok(())
            }
            (State::ExpectServerCertificate, HandshakeType::CERTIFICATE)
                if cfg!(feature = "ecdhe-ecdsa") =>
            {
                let key = self.peer_certificate(m.body, self.server_x509)?;
                self.peer_key = Some(key);
                self.add_transcript(m)?;
                self.state = State::ExpectServerKeyExchange;
                Ok(())
            }
            (State::ExpectServerKeyExchange, HandshakeType::SERVER_KEY_EXCHANGE) => {
                let mut r = Reader::new(m.body);
                let ecdhe_psk = kx_of(self.suite) == Kx::EcdhePsk;
                if ecdhe_psk {
                    // psk_identity_hint<0..2^16-1> first (RFC 5489 §2); not used.
                    r.vec16(0, 0xffff, "ServerKeyExchange identity hint")?;
                }
                let params = r.take(4, "ServerKeyExchange params")?;
                if params[0] != 3
                    || params[1..3] != NamedGroup::SECP256R1.0.to_be_bytes()
                    || params[3] != 65
                {
                    return Err(Error::IllegalParameter("ServerKeyExchange curve"));
                }
                let point = r.take(65, "ServerKeyExchange point")?;
                let mut signed = [0u8; 64 + 69];
                signed[..32].copy_from_slice(&self.client_random);
                signed[32..64].copy_from_slice(&self.server_random);
                signed[64..68].copy_from_slice(params);
                signed[68..].copy_from_slice(point);
                if !ecdhe_psk {
                    // Unsigned with ECDHE-PSK: the PSK authenticates the exchange through the
                    // Finished messages.
                    if !cfg!(feature = "ecdhe-ecdsa") {
                        return Err(Error::UnexpectedHandshake(m.msg_type.0));
                    }
                    let key = self.peer_key.ok_or(Error::UntrustedKey)?;
                    verify_signature(&self.crypto, &key, &signed, &mut r)?;
                }
                r.finish("ServerKeyExchange")?;
                self.peer_point.copy_from_slice(point);
                self.add_transcript(m)?;
                self.state = State::ExpectServerHelloDone;
                Ok(())
            }
            (State::ExpectServerHelloDone, HandshakeType::SERVER_KEY_EXCHANGE)
                if kx_of(self.suite) == Kx::Psk =>
            {
                // psk_identity_hint<0..2^16-1> (RFC 4279 §2); Sigil does not use the hint.
                let mut r = Reader::new(m.body);
                r.vec16(0, 0xffff, "ServerKeyExchange identity hint")?;
                r.finish("ServerKeyExchange")?;
                self.add_transcript(m)
            }
            (State::ExpectServerHelloDone, HandshakeType::CERTIFICATE_REQUEST)
                if cfg!(feature = "ecdhe-ecdsa")
                    && kx_of(self.suite) == Kx::EcdheEcdsa
                    && !self.client_auth =>
            {
                let mut r = Reader::new(m.body);
                let types = r.vec8(1, 255, "CertificateRequest types")?;
                let schemes = r.vec16(2, 0xfffe, "CertificateRequest schemes")?;
                r.vec16(0, 0xffff, "CertificateRequest authorities")?;
                r.finish("CertificateRequest")?;
                // With a key the server agreed to take as a raw public key, authenticate;
                // otherwise answer with an empty Certificate and let the server decide
                // (RFC 5246 §7.4.6).
                let usable = self.own_key.as_ref().is_some_and(|key| {
                    let want = scheme_of(key.algorithm()).0.to_be_bytes();
                    types.contains(&ECDSA_SIGN) && schemes.chunks_exact(2).any(|c| c == want)
                });
                let agreed = if self.client_x509 {
                    self.own_chain_len > 0
                } else {
                    self.client_rpk
                };
                if !(usable && agreed) {
                    self.own_key = None;
                }
                self.client_auth = true;
                self.add_transcript(m)
            }
            (State::ExpectServerHelloDone, HandshakeType::SERVER_HELLO_DONE) => {
                if !m.body.is_empty() {
                    return Err(Error::Decode("ServerHelloDone"));
                }
                self.add_transcript(m)?;
                self.client_final_flight(now)
            }
            (State::ExpectClientCertificate, HandshakeType::CERTIFICATE)
                if cfg!(feature = "ecdhe-ecdsa") =>
            {
                // An empty Certificate where one is required fails (RFC 5246 §7.4.6).
                if m.body.len() <= 3 {
                    return Err(Error::MissingClientKey);
                }
                let key = self.peer_certificate(m.body, self.client_x509)?;
                self.peer_key = Some(key);
                self.add_transcript(m)?;
                self.state = State::ExpectClientKeyExchange;
                Ok(())
            }
            (State::ExpectClientKeyExchange, HandshakeType::CLIENT_KEY_EXCHANGE) => {
                self.handle_client_key_exchange(m)
            }
            (State::ExpectCertificateVerify, HandshakeType::CERTIFICATE_VERIFY)
                if cfg!(feature = "ecdhe-ecdsa") =>
            {
                // Signed: every handshake message before this one (RFC 5246 §7.4.8).
                let key = self.peer_key.ok_or(Error::MissingClientKey)?;
                let mut r = Reader::new(m.body);
                let signed = &self.transcript[..self.transcript_len];
                verify_signature(&self.crypto, &key, signed, &mut r)?;
                r.finish("CertificateVerify")?;
                self.add_transcript(m)?;
                self.state = State::ExpectChangeCipherSpec;
                Ok(())
            }
            (State::ExpectFinished, HandshakeType::FINISHED) if epoch == 1 => {
                let hash = self.transcript_hash();
                let peer = match self.role {
                    Role::Client => Side::Server,
                    Role::Server => Side::Client,
                };
                let proof = verify_finished(&self.crypto, &self.master, peer, &hash, m.body)?;
                self.add_transcript(m)?;
                self.flight.clear();
                // Whoever did not send Finished first answers with the final flight: the
                // server in a full handshake (flight 6), the client in an abbreviated one.
                // It is kept for retransmission when the peer's final flight shows up again.
                if (self.role == Role::Client) == self.resuming {
                    self.queue_ccs_finished()?;
                    self.flight_is_final = true;
                    self.send_flight(now, false)?;
                }
                self.stop_timer();
                self.established(proof);
                Ok(())
            }
            (_, t) => Err(Error::UnexpectedHandshake(t.0)),
        }
    }

    /// A Certificate carrying a raw public key or an X.509 chain: parsed, then checked
    /// against [`Trust`].
    fn peer_certificate(&self, body: &[u8], x509: bool) -> Result<PublicKey, Error> {
        if x509 {
            let mut r = Reader::new(body);
            let len = r.u24("Certificate")? as usize;
            let mut list = Reader::new(r.take(len, "certificate_list")?);
            r.finish("Certificate")?;
            let mut chain: [&[u8]; crate::x509::MAX_DEPTH + 1] = [&[]; crate::x509::MAX_DEPTH + 1];
            let mut n = 0;
            while !list.is_empty() {
                if n == chain.len() {
                    return Err(Error::BadCertificate("chain too long"));
                }
                let l = list.u24("ASN.1Cert")? as usize;
                chain[n] = list.take(l, "ASN.1Cert")?;
                n += 1;
            }
            return self.trust.certificate_chain(&chain[..n]);
        }
        let mut r = Reader::new(body);
        let len = r.u24("Certificate")? as usize;
        let der = r.take(len, "Certificate")?;
        r.finish("Certificate")?;
        let key = spki::parse_spki(der)?;
        if !self.trust.trusted_key(&key) {
            return Err(Error::UntrustedKey);
        }
        Ok(key)
    }

    fn established(&mut self, _proof: FinishedVerified) {
        self.state = State::Established;
        self.transcript_len = 0;
        self.ahead.clear();
    }

    fn handle_client_key_exchange(&mut self, f: &Fragment<'_>) -> Result<(), Error> {
        let mut r = Reader::new(f.body);
        let kx = kx_of(self.suite);
        let premaster_input = if kx == Kx::Psk || kx == Kx::EcdhePsk {
            let identity = r.vec16(0, 128, "ClientKeyExchange identity")?;
            let point = if kx == Kx::EcdhePsk {
                Some(r.vec8(1, 255, "ClientKeyExchange point")?)
            } else {
                None
            };
            r.finish("ClientKeyExchange")?;
            let mut key = [0u8; MAX_PSK_LEN];
            let n = self
                .trust
                .psk(identity, &mut key)
                .ok_or(Error::UnknownPskIdentity)?;
            self.identity[..identity.len()].copy_from_slice(identity);
            self.identity_len = identity.len();
            self.psk[..n].copy_from_slice(&key[..n]);
            self.psk_len = n;
            match point {
                None => None,
                Some(point) => Some(self.agree_with_client(point)?),
            }
        } else {
            let point = r.vec8(1, 255, "ClientKeyExchange point")?;
            r.finish("ClientKeyExchange")?;
            Some(self.agree_with_client(point)?)
        };
        self.add_transcript(f)?;
        self.derive_keys(premaster_input.as_ref())?;
        // The timer keeps running until the client's whole flight (up to Finished) is in.
        self.state = if self.client_auth {
            State::ExpectCertificateVerify
        } else {
            State::ExpectChangeCipherSpec
        };
        Ok(())
    }

    /// ECDH of the server's ephemeral secret (from its ServerKeyExchange) with the client's
    /// point.
    fn agree_with_client(&mut self, point: &[u8]) -> Result<[u8; 32], Error> {
        let eph = self
            .ephemeral
            .take()
            .ok_or(Error::UnexpectedHandshake(16))?;
        self.crypto
            .agree(&eph, point)
            .map_err(|_| Error::IllegalParameter("ClientKeyExchange point"))
    }

    /// The PSK identity the peer authenticated with (server side), once known.
    pub fn psk_identity(&self) -> &[u8] {
        &self.identity[..self.identity_len]
    }

    /// The connection ID the peer puts in its records to us (RFC 9146), if negotiated.
    pub fn connection_id(&self) -> &[u8] {
        &self.own_cid[..self.own_cid_len]
    }

    /// The peer's raw public key, once authenticated (for authorization by identity).
    pub fn peer_public_key(&self) -> Option<&PublicKey> {
        self.peer_key.as_ref()
    }

    /// Derives the keys from the PSK or the ECDH shared secret, with the extended master
    /// secret over the transcript through ClientKeyExchange (RFC 7627 §4).
    fn derive_keys(&mut self, ecdh: Option<&[u8; 32]>) -> Result<(), Error> {
        let mut pre = [0u8; 4 + 2 * MAX_PSK_LEN];
        let psk = &self.psk[..self.psk_len];
        let n = match (kx_of(self.suite), ecdh) {
            (Kx::EcdheEcdsa, Some(z)) => {
                pre[..32].copy_from_slice(z);
                32
            }
            // RFC 5489 §2: other_secret<0..2^16-1> = Z, then psk<0..2^16-1>.
            (Kx::EcdhePsk, Some(z)) => {
                let mut w = Writer::new(&mut pre);
                w.vec16(z)?;
                w.vec16(psk)?;
                w.len()
            }
            (Kx::Psk, None) => keys::psk_premaster(psk, &mut pre)?,
            _ => return Err(Error::UnexpectedHandshake(16)),
        };
        let session_hash = self.transcript_hash();
        self.master = keys::extended_master_secret(&self.crypto, &pre[..n], &session_hash);
        self.install_keys();
        Ok(())
    }

    /// Adds ChangeCipherSpec and this side's Finished (over the transcript so far) to the
    /// flight.
    fn queue_ccs_finished(&mut self) -> Result<(), Error> {
        self.flight.push(ContentType::CHANGE_CIPHER_SPEC, 0, &[1])?;
        let side = match self.role {
            Role::Client => Side::Client,
            Role::Server => Side::Server,
        };
        let vd = keys::verify_data(&self.crypto, &self.master, side, &self.transcript_hash());
        self.queue_handshake_epoch(HandshakeType::FINISHED, &vd, 1)
    }

    /// The key block from the master secret and this handshake's randoms.
    fn install_keys(&mut self) {
        let KeyBlock { client, server } = keys::key_block(
            &self.crypto,
            aead_of(self.suite),
            &self.master,
            &self.client_random,
            &self.server_random,
        );
        self.keys = Some(match self.role {
            Role::Client => Epoch1 {
                write: client,
                read: server,
            },
            Role::Server => Epoch1 {
                write: server,
                read: client,
            },
        });
    }

    fn client_final_flight(&mut self, now: u64) -> Result<(), Error> {
        self.flight.clear();
        let kx = kx_of(self.suite);
        let ecdh = if kx == Kx::Psk || kx == Kx::EcdhePsk {
            // ClientKeyExchange: psk_identity<0..2^16-1>, and with ECDHE-PSK our ephemeral
            // point (RFC 5489 §2).
            let mut cke = [0u8; 130 + 66];
            let mut w = Writer::new(&mut cke);
            w.vec16(&self.identity[..self.identity_len])?;
            let mut z = None;
            if kx == Kx::EcdhePsk {
                let eph = self
                    .ephemeral
                    .take()
                    .ok_or(Error::Crypto(sigil_crypto::CryptoError::Rng))?;
                w.vec8(self.crypto.agreement_public_key(&eph)?.as_bytes())?;
                z = Some(
                    self.crypto
                        .agree(&eph, &self.peer_point)
                        .map_err(|_| Error::IllegalParameter("ServerKeyExchange point"))?,
                );
            }
            let n = w.len();
            self.queue_handshake(HandshakeType::CLIENT_KEY_EXCHANGE, &cke[..n])?;
            z
        } else {
            if self.client_auth {
                if self.own_key.is_some() {
                    self.queue_own_certificate()?;
                } else {
                    self.queue_handshake(HandshakeType::CERTIFICATE, &[0, 0, 0])?;
                }
            }
            // ClientKeyExchange: our ephemeral point (RFC 8422 §5.7), drawn at connect.
            let eph = self
                .ephemeral
                .take()
                .ok_or(Error::Crypto(sigil_crypto::CryptoError::Rng))?;
            let point = self.crypto.agreement_public_key(&eph)?;
            let z = self
                .crypto
                .agree(&eph, &self.peer_point)
                .map_err(|_| Error::IllegalParameter("ServerKeyExchange point"))?;
            let mut cke = [0u8; 66];
            let mut w = Writer::new(&mut cke);
            w.vec8(point.as_bytes())?;
            self.queue_handshake(HandshakeType::CLIENT_KEY_EXCHANGE, &cke)?;
            Some(z)
        };
        self.derive_keys(ecdh.as_ref())?;
        if let Some(key) = self.own_key.clone().filter(|_| self.client_auth) {
            let mut cv = [0u8; 4 + 72];
            let mut w = Writer::new(&mut cv);
            write_signature(
                &self.crypto,
                &key,
                &self.transcript[..self.transcript_len],
                &mut w,
            )?;
            let cn = w.len();
            self.queue_handshake(HandshakeType::CERTIFICATE_VERIFY, &cv[..cn])?;
        }
        self.queue_ccs_finished()?;
        self.state = State::ExpectChangeCipherSpec;
        self.send_flight(now, false)
    }

    fn send_client_hello(&mut self, cookie: &[u8], now: u64) -> Result<(), Error> {
        let mut ext = [0u8; 64];
        let mut w = Writer::new(&mut ext);
        w.bytes(&HELLO_EXTENSIONS)?;
        if kx_of(self.suite) == Kx::EcdhePsk {
            // supported_groups [secp256r1], ec_point_formats [uncompressed].
            w.bytes(&[0x00, 0x0a, 0x00, 0x04, 0x00, 0x02, 0x00, 0x17])?;
            w.bytes(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00])?;
        }
        if kx_of(self.suite) == Kx::EcdheEcdsa {
            // supported_groups [secp256r1], ec_point_formats [uncompressed],
            // signature_algorithms, server_certificate_type [RawPublicKey], and
            // client_certificate_type [RawPublicKey] when this client has a key.
            w.bytes(&[0x00, 0x0a, 0x00, 0x04, 0x00, 0x02, 0x00, 0x17])?;
            w.bytes(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00])?;
            w.bytes(&[0x00, 0x0d, 0x00, 0x06, 0x00, 0x04])?;
            for sc in SCHEMES {
                w.u16(sc.0)?;
            }
            // With certificates, the default type X.509 needs no extension.
            if !self.server_x509 {
                w.bytes(&[0x00, 0x14, 0x00, 0x02, 0x01, RAW_PUBLIC_KEY])?;
                if self.own_key.is_some() {
                    w.bytes(&[0x00, 0x13, 0x00, 0x02, 0x01, RAW_PUBLIC_KEY])?;
                }
            }
        }
        if self.config.connection_id {
            // connection_id with an empty ID: "send me plain records, I will use yours".
            w.bytes(&[0x00, 0x36, 0x00, 0x01, 0x00])?;
        }
        let en = w.len();
        let mut body = [0u8; 128 + 255 + 40];
        let mut w = Writer::new(&mut body);
        ClientHelloParams {
            random: &self.client_random,
            session_id: &self.session_id[..self.session_id_len],
            cookie,
            cipher_suites: &[self.suite],
            extensions: &ext[..en],
        }
        .write(&mut w)?;
        let n = w.len();
        self.flight.clear();
        self.queue_handshake(HandshakeType::CLIENT_HELLO, &body[..n])?;
        self.state = State::ExpectServerHello;
        self.timeout_ms = self.config.initial_timeout_ms;
        self.retransmissions = 0;
        self.send_flight(now, false)
    }

    /// Adds a handshake message (epoch 0) to the flight and the transcript.
    fn queue_handshake(&mut self, t: HandshakeType, body: &[u8]) -> Result<(), Error> {
        self.queue_handshake_epoch(t, body, 0)
    }

    fn queue_handshake_epoch(
        &mut self,
        t: HandshakeType,
        body: &[u8],
        epoch: u16,
    ) -> Result<(), Error> {
        let f = Fragment {
            msg_type: t,
            length: body.len() as u32,
            message_seq: self.next_send_msg,
            offset: 0,
            body,
        };
        self.next_send_msg = next_seq(self.next_send_msg)?;
        let mut msg = [0u8; MAX_MESSAGE + HS_HEADER_LEN];
        let mut w = Writer::new(&mut msg);
        f.write(&mut w)?;
        let n = w.len();
        self.flight.push(ContentType::HANDSHAKE, epoch, &msg[..n])?;
        self.add_transcript(&f)
    }

    /// Appends a whole message, as if sent in one fragment (RFC 6347 §4.2.6).
    fn add_transcript(&mut self, f: &Fragment<'_>) -> Result<(), Error> {
        let mut w = Writer::new(&mut self.transcript[self.transcript_len..]);
        Fragment { offset: 0, ..*f }
            .write(&mut w)
            .map_err(|_| Error::MessageTooLarge {
                length: f.length,
                capacity: MAX_TRANSCRIPT,
            })?;
        self.transcript_len += w.len();
        Ok(())
    }

    fn transcript_hash(&self) -> [u8; 32] {
        self.crypto
            .sha256(&[&self.transcript[..self.transcript_len]])
    }

    fn stop_timer(&mut self) {
        self.timer = None;
        self.retransmissions = 0;
        self.timeout_ms = self.config.initial_timeout_ms;
    }

    /// Records the flight's messages into datagrams of at most the PMTU, fragmenting
    /// handshake messages that do not fit, and queues them. Every transmission uses fresh
    /// record sequence numbers.
    fn send_flight(&mut self, now: u64, retransmission: bool) -> Result<(), Error> {
        if !retransmission {
            // A new flight starts with the initial timeout and a fresh retransmission budget.
            self.timeout_ms = self.config.initial_timeout_ms;
            self.retransmissions = 0;
        }
        if self.state != State::Established {
            // During the handshake the queue holds only flight datagrams, and any the caller
            // has not sent yet belong to an earlier (re)transmission this one supersedes.
            self.queue = Queue::new();
        }
        let mut dgram = [0u8; MAX_DATAGRAM];
        let pmtu = self.config.pmtu.min(MAX_DATAGRAM);
        let mut used = 0;
        let msgs = self.flight.msgs;
        for m in msgs.iter().flatten() {
            let mut bytes = [0u8; MAX_MESSAGE + HS_HEADER_LEN];
            bytes[..m.len].copy_from_slice(&self.flight.buf[m.start..m.start + m.len]);
            let bytes = &bytes[..m.len];
            let overhead = if m.epoch == 0 {
                HEADER_LEN
            } else {
                aead_of(self.suite).overhead()
                    + if self.peer_cid_len > 0 {
                        self.peer_cid_len + 1
                    } else {
                        0
                    }
            };
            if m.content_type != ContentType::HANDSHAKE {
                let mut rec = [0u8; 64];
                let n = self.record(m.content_type, m.epoch, bytes, &mut rec)?;
                if used + n > pmtu {
                    self.queue.push(&dgram[..used])?;
                    used = 0;
                }
                dgram[used..used + n].copy_from_slice(&rec[..n]);
                used += n;
                continue;
            }
            let (f, _) = Fragment::parse(bytes)?;
            // A ClientHello always goes whole: a stateless server (the cookie exchange) can
            // only answer one it sees in a single datagram. Below the PMTU, the network layer
            // (6LoWPAN, IPv6) fragments it instead.
            let pmtu = if f.msg_type == HandshakeType::CLIENT_HELLO {
                MAX_DATAGRAM
            } else {
                pmtu
            };
            let mut offset = 0usize;
            loop {
                let room = pmtu.saturating_sub(used + overhead + HS_HEADER_LEN);
                if room == 0 || (room < f.body.len() - offset && used > 0) {
                    if used == 0 {
                        return Err(Error::BufferTooSmall); // PMTU below one header
                    }
                    self.queue.push(&dgram[..used])?;
                    used = 0;
                    continue;
                }
                let take = room.min(f.body.len() - offset);
                let part = Fragment {
                    offset: offset as u32,
                    body: &f.body[offset..offset + take],
                    ..f
                };
                let mut plain = [0u8; MAX_MESSAGE + HS_HEADER_LEN];
                let mut w = Writer::new(&mut plain);
                part.write(&mut w)?;
                let pn = w.len();
                let n = self.record(
                    ContentType::HANDSHAKE,
                    m.epoch,
                    &plain[..pn],
                    &mut dgram[used..],
                )?;
                used += n;
                offset += take;
                if offset >= f.body.len() {
                    break;
                }
            }
        }
        if used > 0 {
            self.queue.push(&dgram[..used])?;
        }
        if !self.flight_is_final {
            self.timer = Some(now + self.timeout_ms);
            self.timer_from_send = true;
        }
        Ok(())
    }

    /// One record in `epoch` (0: plaintext; 1: CCM-8) with the next sequence number.
    fn record(
        &mut self,
        ct: ContentType,
        epoch: u16,
        plain: &[u8],
        out: &mut [u8],
    ) -> Result<usize, Error> {
        let seq = self.write_seq[epoch as usize];
        if seq > crate::record::MAX_SEQUENCE {
            return Err(Error::SequenceExhausted);
        }
        self.write_seq[epoch as usize] += 1;
        if epoch == 0 {
            plaintext_record(ct, seq, |w| w.bytes(plain), out)
        } else {
            let keys = self.keys.as_ref().ok_or(Error::NotEstablished)?;
            self.write_epoch = 1;
            if self.peer_cid_len > 0 {
                let cid = &self.peer_cid[..self.peer_cid_len];
                return protection::seal_cid(
                    &self.crypto,
                    &keys.write,
                    ct,
                    1,
                    seq,
                    cid,
                    plain,
                    out,
                );
            }
            protection::seal(&self.crypto, &keys.write, ct, 1, seq, plain, out)
        }
    }

    fn protect(&mut self, ct: ContentType, plain: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        self.record(ct, 1, plain, out)
    }

    /// Fails the connection with a fatal alert (sent in the current write epoch).
    fn fail(&mut self, e: Error) -> Result<(), Error> {
        if let State::Failed(_) = self.state {
            return Err(e);
        }
        if let Some(desc) = e.alert() {
            let alert = [AlertLevel::FATAL.0, desc.0];
            let mut out = [0u8; 64];
            let epoch = if self.write_epoch == 1 && self.keys.is_some() {
                1
            } else {
                0
            };
            if let Ok(n) = self.record(ContentType::ALERT, epoch, &alert, &mut out) {
                let _ = self.queue.push(&out[..n]);
            }
        }
        self.state = State::Failed(e);
        self.timer = None;
        Err(e)
    }
}

/// RFC 5746: the peer must signal secure renegotiation (extension with an empty
/// renegotiated_connection, or the SCSV in a ClientHello); any non-empty value would be a
/// renegotiation, which Sigil refuses.
fn check_renegotiation_info(ext: Extensions<'_>, scsv: bool) -> Result<(), Error> {
    match ext.get(ExtensionType::RENEGOTIATION_INFO) {
        Some([0]) => Ok(()),
        Some(_) => Err(Error::Renegotiation),
        None if scsv => Ok(()),
        None => Err(Error::Renegotiation),
    }
}

fn scheme_of(alg: SignatureAlgorithm) -> SignatureScheme {
    match alg {
        SignatureAlgorithm::EcdsaP256 => SignatureScheme::ECDSA_SECP256R1_SHA256,
        SignatureAlgorithm::Ed25519 => SignatureScheme::ED25519,
    }
}

/// Whether the ClientHello allows ECDHE on secp256r1 (absent supported_groups means any,
/// RFC 8422 §4).
fn offers_p256(ch: &ClientHello<'_>) -> bool {
    match ch.extensions.get(ExtensionType::SUPPORTED_GROUPS) {
        None => true,
        Some(d) => d.get(2..).is_some_and(|g| {
            g.chunks_exact(2)
                .any(|c| c == NamedGroup::SECP256R1.0.to_be_bytes())
        }),
    }
}

/// Whether the ClientHello's signature_algorithms allows `scheme` (absent: SHA-1 defaults,
/// which Sigil does not use, so only ECDSA with SHA-256 is assumed, RFC 5246 §7.4.1.4.1).
fn offers_scheme(ch: &ClientHello<'_>, scheme: SignatureScheme) -> bool {
    match ch.extensions.get(ExtensionType::SIGNATURE_ALGORITHMS) {
        None => scheme == SignatureScheme::ECDSA_SECP256R1_SHA256,
        Some(d) => d
            .get(2..)
            .is_some_and(|g| g.chunks_exact(2).any(|c| c == scheme.0.to_be_bytes())),
    }
}

/// `digitally-signed` (RFC 5246 §4.7): scheme, then the signature (DER for ECDSA, raw for
/// Ed25519, RFC 8422 §5.4).
fn write_signature<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &SecretKey,
    message: &[u8],
    w: &mut Writer<'_>,
) -> Result<(), Error> {
    let sig = crypto.sign(key, message)?;
    w.u16(scheme_of(key.algorithm()).0)?;
    match key.algorithm() {
        SignatureAlgorithm::EcdsaP256 => {
            let mut der = [0u8; 72];
            let n = spki::ecdsa_to_der(&sig.0, &mut der)?;
            w.vec16(&der[..n])
        }
        SignatureAlgorithm::Ed25519 => w.vec16(&sig.0),
    }
}

fn verify_signature<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &PublicKey,
    message: &[u8],
    r: &mut Reader<'_>,
) -> Result<(), Error> {
    let scheme = SignatureScheme(r.u16("signature scheme")?);
    let sig = r.vec16(1, 0xffff, "signature")?;
    if scheme != scheme_of(key.algorithm()) {
        return Err(Error::IllegalParameter("signature scheme"));
    }
    let raw = match key.algorithm() {
        SignatureAlgorithm::EcdsaP256 => spki::ecdsa_from_der(sig)?,
        SignatureAlgorithm::Ed25519 => sig.try_into().map_err(|_| Error::BadSignature)?,
    };
    crypto
        .verify(key, message, &raw)
        .map_err(|_| Error::BadSignature)
}

/// The next handshake message_seq; a handshake never needs 2^16 messages.
fn next_seq(seq: u16) -> Result<u16, Error> {
    seq.checked_add(1).ok_or(Error::Decode("message_seq"))
}
