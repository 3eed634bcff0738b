//! What each side trusts and authenticates with, and the one proof that the peer is who the
//! trust store says: [`PeerVerified`]. Only this module makes it, and only after
//! - a handshake signature (the server's ServerKeyExchange, RFC 8422 §5.4, or the client's
//!   CertificateVerify, RFC 5246 §7.4.8) verified under a key [`Trust`] accepted
//!   (`TrustedKey`, made only here from a Certificate message), or
//! - the PSK identity was found in the trust store (server, RFC 4279 §2), or the client took
//!   the key it was configured with (the Finished check then proves the server holds it), or
//! - with static ECDH (feature `static-ecdh`), the client took a P-256 key `Trust` accepted
//!   as the server's key-agreement key (the Finished check then proves the server holds its
//!   secret, without which the premaster secret cannot be computed), or
//! - with RSA key transport (feature `rsa-kx`), the client took the RSA key of a chain `Trust`
//!   accepted as the key to encrypt the premaster secret to (the Finished check then proves
//!   the server could decrypt it), or
//! - a cached session's credentials were checked against the trust store again (resumption).

use crate::keys::MAX_PSK_LEN;
use crate::spki;
use crate::traffic::Session;
use crate::wire::SignatureScheme;
use crate::x509::CertifiedKey;
use crate::{Error, Reader, Writer};
use sigil_crypto::{CryptoProvider, PublicKey, SecretKey, SignatureAlgorithm};
#[cfg(feature = "rsa")]
use sigil_crypto::{Rng, RsaPublicKey, RsaSecretKey};
use sigil_identity::Identity;
use sigil_time::UnixTime;

/// What this side trusts: pre-shared keys by identity (RFC 4279 §5.1) and peers' raw public
/// keys. A connection asks it at the moment the peer presents either; a certificate chain is
/// checked at the time the caller gave the handshake (a client's [`crate::Config::now`], a
/// server's [`ServerCredentials::now`]), so no implementation needs a clock of its own.
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

    /// Validates the peer's X.509 chain (leaf first) at the caller's Unix time `now` and
    /// returns the leaf's key; see [`X509Anchors`].
    fn certificate_chain(&self, chain: &[&[u8]], now: UnixTime) -> Result<PublicKey, Error> {
        let _ = (chain, now);
        Err(Error::UnknownCa)
    }

    /// [`Trust::certificate_chain`] for a leaf of any key type the build supports (with the
    /// `rsa` feature, RSA keys too); by default, the leaf's key as `certificate_chain` gives it.
    fn certificate_chain_any(&self, chain: &[&[u8]], now: UnixTime) -> Result<CertifiedKey, Error> {
        self.certificate_chain(chain, now).map(CertifiedKey::Key)
    }
}

impl<T: Trust + ?Sized> Trust for &T {
    fn psk(&self, identity: &[u8], key: &mut [u8; MAX_PSK_LEN]) -> Option<usize> {
        (**self).psk(identity, key)
    }
    fn trusted_key(&self, key: &PublicKey) -> bool {
        (**self).trusted_key(key)
    }
    fn certificate_chain(&self, chain: &[&[u8]], now: UnixTime) -> Result<PublicKey, Error> {
        (**self).certificate_chain(chain, now)
    }
    fn certificate_chain_any(&self, chain: &[&[u8]], now: UnixTime) -> Result<CertifiedKey, Error> {
        (**self).certificate_chain_any(chain, now)
    }
}

/// Trusts X.509 chains that lead to one of `anchors` (DER certificates) at the fixed time
/// `now` it was made with (RFC 7925 §4.4.2), whatever time the handshake passes: for callers
/// that check at one known time (tests, a device with a build date). Raw public keys are
/// checked by `rpk`.
pub struct X509Anchors<'a, C, R = NoTrust> {
    pub crypto: C,
    pub anchors: &'a [&'a [u8]],
    pub now: UnixTime,
    pub rpk: R,
}

impl<C: CryptoProvider, R: Trust> Trust for X509Anchors<'_, C, R> {
    fn psk(&self, identity: &[u8], key: &mut [u8; MAX_PSK_LEN]) -> Option<usize> {
        self.rpk.psk(identity, key)
    }
    fn trusted_key(&self, key: &PublicKey) -> bool {
        self.rpk.trusted_key(key)
    }
    fn certificate_chain(&self, chain: &[&[u8]], _: UnixTime) -> Result<PublicKey, Error> {
        crate::x509::verify_chain(&self.crypto, chain, self.anchors, self.now)
    }
    fn certificate_chain_any(&self, chain: &[&[u8]], _: UnixTime) -> Result<CertifiedKey, Error> {
        crate::x509::verify_chain_any(&self.crypto, chain, self.anchors, self.now)
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
    /// TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 with RSA X.509 certificates (feature `rsa`, for
    /// comparison), or TLS_RSA_WITH_AES_128_CCM_8 when `Config::danger_rsa_key_transport` is
    /// set (feature `rsa-kx`): the server's chain must lead to a trust anchor and hold an RSA
    /// key; `Some((chain, key))` authenticates the client with its RSA chain when asked.
    #[cfg(feature = "rsa")]
    RsaCertificate(Option<(&'a [&'a [u8]], &'a RsaSecretKey)>),
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
    /// An RSA key and its X.509 chain (leaf first, DER), for TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    /// and, with `Config::danger_rsa_key_transport`, TLS_RSA_WITH_AES_128_CCM_8 (feature
    /// `rsa`). `require_client_key` applies to them too: the client then sends a chain.
    #[cfg(feature = "rsa")]
    pub rsa: Option<(&'a [&'a [u8]], &'a RsaSecretKey)>,
    /// The connection ID this server wants in the client's records (RFC 9146), unique among
    /// its sessions; used when the client offers the extension. Empty: none.
    pub connection_id: &'a [u8],
    /// Give each full handshake a session ID so the client may resume it later.
    pub issue_session_ids: bool,
    /// The cached session the ClientHello asks for ([`crate::record::RecordFacts`]'s
    /// `requested_session`), if the caller has it: the handshake is then abbreviated, after
    /// the peer's credentials are checked against [`Trust`] again.
    pub resume: Option<&'a Session>,
    /// The caller's Unix time for this ClientHello: a client certificate chain is checked at
    /// it ([`Trust::certificate_chain`]). The handshake reads no clock; left at zero, every
    /// chain is refused as not yet valid.
    pub now: UnixTime,
}

impl ServerCredentials<'_> {
    /// Nothing offered; fill in with struct update syntax.
    pub const NONE: ServerCredentials<'static> = ServerCredentials {
        psk: false,
        key: None,
        require_client_key: false,
        #[cfg(feature = "x509")]
        chain: None,
        #[cfg(feature = "rsa")]
        rsa: None,
        connection_id: &[],
        issue_session_ids: false,
        resume: None,
        now: UnixTime::from_secs(0),
    };
}

/// Proof that the peer is authenticated by this side's trust store: its handshake signature
/// verified under a trusted key, or its PSK identity is known. Only this module makes one;
/// [`crate::traffic::Traffic`] stores it (in [`Peer`]).
#[derive(Debug, PartialEq, Eq)]
pub struct PeerVerified(());

/// A server that did not ask the client for a key (server-only ECDHE-ECDSA): the client stays
/// anonymous. Only `client_not_asked` makes one, from the server's own configuration.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientNotAsked(());

/// Who the peer of an established connection is, with the proof that says so.
// With `rsa`, an RSA key (up to 4096 bits) is kept inline: the crate allocates nothing.
#[cfg_attr(feature = "rsa", allow(clippy::large_enum_variant))]
#[derive(Debug, PartialEq, Eq)]
pub enum Peer {
    /// It knows the pre-shared key of this identity.
    Psk {
        identity: [u8; 128],
        len: u8,
        /// Which key it was (resumption needs the same one still).
        key: PskCheck,
        proof: PeerVerified,
    },
    /// It holds the secret of this trusted public key (raw or a certificate's).
    Key { key: PublicKey, proof: PeerVerified },
    /// It holds the secret of this certificate's RSA key (feature `rsa`).
    #[cfg(feature = "rsa")]
    RsaKey {
        key: RsaPublicKey,
        proof: PeerVerified,
    },
    /// The server did not ask the client to authenticate.
    Anonymous(ClientNotAsked),
}

impl Clone for Peer {
    /// A copy of a proof this side holds (for a session): it cannot be made from nothing.
    fn clone(&self) -> Self {
        match self {
            Self::Psk {
                identity, len, key, ..
            } => Self::Psk {
                identity: *identity,
                len: *len,
                key: *key,
                proof: PeerVerified(()),
            },
            Self::Key { key, .. } => Self::Key {
                key: *key,
                proof: PeerVerified(()),
            },
            #[cfg(feature = "rsa")]
            Self::RsaKey { key, .. } => Self::RsaKey {
                key: *key,
                proof: PeerVerified(()),
            },
            Self::Anonymous(_) => Self::Anonymous(ClientNotAsked(())),
        }
    }
}

/// Which pre-shared key a peer authenticated with: a keyed hash of it, so a cached session
/// can tell whether the identity's key was replaced since (the key itself is not kept).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PskCheck([u8; 32]);

impl PskCheck {
    pub(crate) fn of<C: CryptoProvider + ?Sized>(crypto: &C, key: &[u8]) -> Self {
        Self(crypto.hmac_sha256(key, &[b"sigil-dtls session psk"]))
    }
}

impl PskCheck {
    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl core::fmt::Debug for PskCheck {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("PskCheck(<secret>)")
    }
}

impl Peer {
    pub(crate) fn psk<C: CryptoProvider + ?Sized>(
        crypto: &C,
        psk: &Psk,
        proof: PeerVerified,
    ) -> Self {
        let mut identity = [0u8; 128];
        identity[..psk.identity().len()].copy_from_slice(psk.identity());
        Self::Psk {
            identity,
            len: psk.identity_len,
            key: PskCheck::of(crypto, psk.key()),
            proof,
        }
    }

    pub(crate) fn key(key: &TrustedKey, proof: PeerVerified) -> Self {
        match key.0 {
            CertifiedKey::Key(key) => Self::Key { key, proof },
            #[cfg(feature = "rsa")]
            CertifiedKey::Rsa(key) => Self::RsaKey { key, proof },
        }
    }

    /// The peer's RSA key, whose possession it proved (feature `rsa`).
    #[cfg(feature = "rsa")]
    pub fn rsa_public_key(&self) -> Option<&RsaPublicKey> {
        match self {
            Self::RsaKey { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The PSK identity the peer authenticated with (empty for key-based peers).
    pub fn psk_identity(&self) -> &[u8] {
        match self {
            Self::Psk { identity, len, .. } => &identity[..usize::from(*len).min(128)],
            _ => &[],
        }
    }

    /// The peer's public key, whose possession it proved.
    pub fn public_key(&self) -> Option<&PublicKey> {
        match self {
            Self::Key { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// What a saved association says the peer was, as read back from this side's storage.
pub(crate) enum SavedPeer<'a> {
    Psk { identity: &'a [u8], check: [u8; 32] },
    Key(PublicKey),
    Anonymous,
}

impl Peer {
    /// The peer of a restored association: the proof was made by the handshake before the
    /// association was saved, and only a save whose MAC under this side's storage key
    /// verified (the [`crate::saved::Vouched`] token) may bring it back.
    pub(crate) fn restored(saved: SavedPeer<'_>, _: &crate::saved::Vouched) -> Option<Self> {
        Some(match saved {
            SavedPeer::Psk { identity, check } => {
                if identity.len() > 128 {
                    return None;
                }
                let mut id = [0u8; 128];
                id[..identity.len()].copy_from_slice(identity);
                Self::Psk {
                    identity: id,
                    len: identity.len() as u8,
                    key: PskCheck(check),
                    proof: PeerVerified(()),
                }
            }
            SavedPeer::Key(key) => Self::Key {
                key,
                proof: PeerVerified(()),
            },
            SavedPeer::Anonymous => Self::Anonymous(ClientNotAsked(())),
        })
    }
}

/// Server: the client stays anonymous only when this server's offer did not require a key.
pub(crate) fn client_not_asked(require_client_key: bool) -> Option<ClientNotAsked> {
    (!require_client_key).then_some(ClientNotAsked(()))
}

/// A pre-shared key and the identity it goes with (RFC 4279 §2).
#[derive(Clone)]
pub(crate) struct Psk {
    identity: [u8; 128],
    identity_len: u8,
    key: [u8; MAX_PSK_LEN],
    key_len: u8,
}

impl Psk {
    fn new(identity: &[u8], key: &[u8]) -> Result<Self, Error> {
        if identity.len() > 128 || key.is_empty() || key.len() > MAX_PSK_LEN {
            return Err(Error::Decode("PSK identity or key length"));
        }
        let mut p = Psk {
            identity: [0; 128],
            identity_len: identity.len() as u8,
            key: [0; MAX_PSK_LEN],
            key_len: key.len() as u8,
        };
        p.identity[..identity.len()].copy_from_slice(identity);
        p.key[..key.len()].copy_from_slice(key);
        Ok(p)
    }

    pub(crate) fn identity(&self) -> &[u8] {
        &self.identity[..usize::from(self.identity_len)]
    }

    pub(crate) fn key(&self) -> &[u8] {
        &self.key[..usize::from(self.key_len)]
    }
}

/// Client: the key it was configured with is the only one it trusts; the server proves it
/// holds the same key with its Finished.
#[cfg(any(feature = "psk", feature = "ecdhe-psk"))]
pub(crate) fn configured_psk(identity: &[u8], key: &[u8]) -> Result<(Psk, PeerVerified), Error> {
    Ok((Psk::new(identity, key)?, PeerVerified(())))
}

/// Server: the key for the client's PSK identity, if the trust store knows it.
pub(crate) fn lookup_psk<T: Trust + ?Sized>(
    trust: &T,
    identity: &[u8],
) -> Result<(Psk, PeerVerified), Error> {
    if identity.len() > 128 {
        return Err(Error::UnknownPskIdentity);
    }
    let mut key = [0u8; MAX_PSK_LEN];
    let n = trust
        .psk(identity, &mut key)
        .filter(|n| (1..=MAX_PSK_LEN).contains(n))
        .ok_or(Error::UnknownPskIdentity)?;
    Ok((Psk::new(identity, &key[..n])?, PeerVerified(())))
}

/// Server: a cached session may be resumed while what the peer authenticated with is still
/// trusted (RFC 5246 §7.3 leaves the policy to the server).
pub(crate) fn recheck_session<C: CryptoProvider + ?Sized, T: Trust + ?Sized>(
    crypto: &C,
    trust: &T,
    session: &Session,
    require_client_key: bool,
) -> Option<Peer> {
    match session.peer() {
        // The identity must still have the same key: a replaced key (after a leak) must not
        // leave sessions made with the old one resumable.
        Peer::Psk { key, .. } => {
            let mut k = [0u8; MAX_PSK_LEN];
            let n = trust
                .psk(session.psk_identity(), &mut k)
                .filter(|n| (1..=MAX_PSK_LEN).contains(n))?;
            (PskCheck::of(crypto, &k[..n]) == *key).then(|| session.peer().clone())
        }
        // A client key must still be trusted as a key: a session from a certificate whose
        // key `Trust` does not know otherwise takes a full handshake.
        Peer::Key { key, .. } => trust.trusted_key(key).then(|| session.peer().clone()),
        // An RSA key came from a chain, which cannot be rechecked without it.
        #[cfg(feature = "rsa")]
        Peer::RsaKey { .. } => None,
        Peer::Anonymous(_) => client_not_asked(require_client_key).map(Peer::Anonymous),
    }
}

/// Client: whether a cached session may be offered for resumption. The abbreviated handshake
/// authenticates the server only by its knowledge of the old master secret, so the session is
/// offered only while what authenticated the server then still would now: the same PSK
/// identity and key as this connection's credentials, or a server key [`Trust`] still accepts
/// as a key (a session from a certificate chain, which cannot be rechecked without the chain,
/// takes a full handshake, as on the server side).
pub(crate) fn client_may_resume<C: CryptoProvider + ?Sized, T: Trust + ?Sized>(
    crypto: &C,
    trust: &T,
    session: &Session,
    psk: Option<&Psk>,
) -> bool {
    match session.peer() {
        Peer::Psk { key, .. } => psk.is_some_and(|p| {
            p.identity() == session.psk_identity() && PskCheck::of(crypto, p.key()) == *key
        }),
        Peer::Key { key, .. } => trust.trusted_key(key),
        #[cfg(feature = "rsa")]
        Peer::RsaKey { .. } => false,
        Peer::Anonymous(_) => false,
    }
}

/// A peer's public key that [`Trust`] accepted (a pinned raw key or the leaf of a valid
/// chain). Possession is not proven yet: that takes a signature ([`verify_signed`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TrustedKey(CertifiedKey);

impl TrustedKey {
    /// An RSA key: what the RSA suites need, and only they.
    pub(crate) fn is_rsa(&self) -> bool {
        #[cfg(feature = "rsa")]
        if let CertifiedKey::Rsa(_) = self.0 {
            return true;
        }
        false
    }
}

/// Client, RSA key transport: the server's trusted RSA key, to which the premaster secret is
/// encrypted (RFC 5246 §7.4.7.1). Nothing is signed in this exchange; only the holder of the
/// key's secret can compute the master secret, so the server's Finished proves possession,
/// which the established state requires, as with a PSK.
#[cfg(feature = "rsa-kx")]
pub(crate) fn rsa_transport_key(key: &TrustedKey) -> Result<(RsaPublicKey, PeerVerified), Error> {
    match key.0 {
        CertifiedKey::Rsa(k) => Ok((k, PeerVerified(()))),
        CertifiedKey::Key(_) => Err(Error::KeyNotForSuite),
    }
}

/// Client, static ECDH: the server's trusted key as the ECDH point the client's ephemeral key
/// agrees with (RFC 4492 §2.1, ECDH_ECDSA). Nothing is signed in this exchange; the server
/// proves it holds the key's secret by its Finished, which the established state requires,
/// as with a PSK. Only a P-256 key can be one.
#[cfg(feature = "static-ecdh")]
pub(crate) fn static_ecdh_key(key: &TrustedKey) -> Result<([u8; 65], PeerVerified), Error> {
    #[allow(irrefutable_let_patterns)]
    let CertifiedKey::Key(key) = key.0
    else {
        return Err(Error::StaticKeyNotP256);
    };
    if key.algorithm() != SignatureAlgorithm::EcdsaP256 {
        return Err(Error::StaticKeyNotP256);
    }
    let point = <[u8; 65]>::try_from(key.as_bytes()).map_err(|_| Error::StaticKeyNotP256)?;
    Ok((point, PeerVerified(())))
}

/// A Certificate message (RFC 7250 §3 raw public key, or an RFC 5246 §7.4.2 X.509 chain),
/// parsed, then checked against [`Trust`] (a chain at the caller's time `now`).
pub(crate) fn peer_certificate<T: Trust + ?Sized>(
    trust: &T,
    body: &[u8],
    x509: bool,
    now: UnixTime,
) -> Result<TrustedKey, Error> {
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
        return trust
            .certificate_chain_any(&chain[..n], now)
            .map(TrustedKey);
    }
    let mut r = Reader::new(body);
    let len = r.u24("Certificate")? as usize;
    let der = r.take(len, "Certificate")?;
    r.finish("Certificate")?;
    let key = spki::parse_spki(der)?;
    if !trust.trusted_key(&key) {
        return Err(Error::UntrustedKey);
    }
    Ok(TrustedKey(CertifiedKey::Key(key)))
}

pub(crate) fn scheme_of(alg: SignatureAlgorithm) -> SignatureScheme {
    match alg {
        SignatureAlgorithm::EcdsaP256 => SignatureScheme::ECDSA_SECP256R1_SHA256,
        SignatureAlgorithm::Ed25519 => SignatureScheme::ED25519,
    }
}

/// `digitally-signed` (RFC 5246 §4.7): scheme, then the signature (DER for ECDSA, raw for
/// Ed25519, RFC 8422 §5.4).
pub(crate) fn write_signature<C: CryptoProvider + ?Sized>(
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

/// Checks a `digitally-signed` field over `message` under the trusted `key`: the peer holds
/// the key's secret, so it is authenticated.
pub(crate) fn verify_signed<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &TrustedKey,
    message: &[u8],
    r: &mut Reader<'_>,
) -> Result<PeerVerified, Error> {
    let scheme = SignatureScheme(r.u16("signature scheme")?);
    let sig = r.vec16(1, 0xffff, "signature")?;
    #[allow(clippy::infallible_destructuring_match)]
    let key = match &key.0 {
        CertifiedKey::Key(k) => k,
        #[cfg(feature = "rsa")]
        CertifiedKey::Rsa(k) => {
            if scheme != SignatureScheme::RSA_PKCS1_SHA256 {
                return Err(Error::IllegalParameter("signature scheme"));
            }
            return crypto
                .rsa_pkcs1_sha256_verify(k, message, sig)
                .map(|()| PeerVerified(()))
                .map_err(|_| Error::BadSignature);
        }
    };
    if scheme != scheme_of(key.algorithm()) {
        return Err(Error::IllegalParameter("signature scheme"));
    }
    let raw = match key.algorithm() {
        SignatureAlgorithm::EcdsaP256 => spki::ecdsa_from_der(sig)?,
        SignatureAlgorithm::Ed25519 => sig.try_into().map_err(|_| Error::BadSignature)?,
    };
    crypto
        .verify(key, message, &raw)
        .map(|()| PeerVerified(()))
        .map_err(|_| Error::BadSignature)
}

/// `digitally-signed` with an RSA key (feature `rsa`): rsa_pkcs1_sha256, then the signature
/// (RFC 5246 §4.7, §7.4.1.4.1).
#[cfg(feature = "rsa")]
pub(crate) fn write_rsa_signature<C: CryptoProvider + ?Sized>(
    crypto: &C,
    key: &RsaSecretKey,
    message: &[u8],
    rng: &mut dyn Rng,
    w: &mut Writer<'_>,
) -> Result<(), Error> {
    let mut sig = [0u8; sigil_crypto::MAX_RSA_MODULUS_LEN];
    let n = crypto.rsa_pkcs1_sha256_sign(key, message, rng, &mut sig)?;
    w.u16(SignatureScheme::RSA_PKCS1_SHA256.0)?;
    w.vec16(&sig[..n])
}
