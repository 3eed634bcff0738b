//! The client's handshake, one struct per expected message (RFC 6347 §4.2.1, RFC 5246
//! §7.3): [`ExpectHelloVerifyOrServerHello`] (HelloVerifyRequest or ServerHello) → [`ExpectCertificate`]
//! → [`ExpectServerKeyExchange`] → [`ExpectServerHelloDone`] → ChangeCipherSpec → Finished
//! ([`crate::finished`]). Each consumes itself and one message, checking its type first.
//! With static ECDH (feature `static-ecdh`) the server sends no ServerKeyExchange: its
//! Certificate leads to [`ExpectServerHelloDone`], and the key it names is the one the
//! client's ephemeral key agrees with (RFC 4492 §2.1).
//! With RSA certificates (feature `rsa`) the states are those of ECDHE-ECDSA, signatures
//! being rsa_pkcs1_sha256; with RSA key transport (feature `rsa-kx`) there is no
//! ServerKeyExchange either, and the ClientKeyExchange carries the premaster secret
//! encrypted to the server's certificate key (RFC 5246 §7.4.7.1).

use crate::conn::{aead_of, kx_of, Cx, Hs, Kx, Next, OwnChain};
use crate::extensions::{
    self, CertificateTypes, Extension, Hello, HelloExtensions, OUR_SCHEMES, P256_ONLY, RPK_ONLY,
    UNCOMPRESSED,
};
use crate::finished::{ExpectCcs, ExpectFinished};
use crate::handshake::{ClientHelloParams, Fragment, HelloVerifyRequest, ServerHello};
use crate::keys::Side;
use crate::traffic::Session;
use crate::trust::{self, Credentials, Peer, PeerVerified, Psk, Trust, TrustedKey};
use crate::wire::{
    CertificateType, CipherSuite, ClientCertificateType, HandshakeType, NamedGroup, ProtocolVersion,
};
use crate::{Error, Reader, Writer};
use sigil_crypto::{AgreementSecret, CryptoProvider, Rng, SecretKey};
#[cfg(feature = "rsa")]
use sigil_crypto::{RsaSecretKey, SeededRng};

/// HelloVerifyRequests a client answers in one handshake.
const MAX_HELLO_VERIFY: u8 = 4;

/// What the client brings to every state: its suite, random and credentials.
pub(crate) struct ClientBase {
    suite: CipherSuite,
    client_random: [u8; 32],
    psk: Option<Psk>,
    /// The client trusts the server that knows its PSK (the Finished check proves that).
    psk_verified: Option<PeerVerified>,
    own_key: Option<SecretKey>,
    own_chain: OwnChain,
    /// The server's (resp. this client's) Certificate carries an X.509 chain, not a raw key.
    server_x509: bool,
    client_x509: bool,
    /// The ephemeral ECDH secret for ClientKeyExchange, drawn at connect while the caller's
    /// RNG is at hand.
    ephemeral: Option<AgreementSecret>,
    /// This client's RSA key (its chain is `own_chain`).
    #[cfg(feature = "rsa")]
    own_rsa_key: Option<RsaSecretKey>,
    /// Randomness for the RSA operations of the last flight (blinding, encryption padding,
    /// the premaster secret), seeded at connect from the caller's RNG.
    #[cfg(feature = "rsa")]
    rsa_rng: Option<SeededRng>,
}

impl ClientBase {
    fn kx(&self) -> Kx {
        kx_of(self.suite)
    }

    fn psk_peer<C: CryptoProvider + ?Sized>(&mut self, crypto: &C) -> Result<Peer, Error> {
        match (&self.psk, self.psk_verified.take()) {
            (Some(psk), Some(proof)) => Ok(Peer::psk(crypto, psk, proof)),
            _ => Err(Error::UnexpectedMessage("PSK suite without a PSK")),
        }
    }
}

/// The ECDHE-ECDSA suite a client offers for `config`.
#[cfg(feature = "ecdhe-ecdsa")]
fn ecdsa_suite(config: &crate::conn::Config) -> CipherSuite {
    #[cfg(feature = "gcm")]
    if config.gcm {
        return CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
    }
    let _ = config;
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8
}

/// The suite a client with a raw public key offers for `config`: static ECDH only when the
/// caller asked for it by name.
#[cfg(feature = "ecdhe-ecdsa")]
fn raw_public_key_suite(config: &crate::conn::Config) -> CipherSuite {
    #[cfg(feature = "static-ecdh")]
    if config.danger_static_ecdh {
        return CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8;
    }
    ecdsa_suite(config)
}

/// The RSA suite a client with RSA certificates offers for `config`: key transport only when
/// the caller asked for it by name.
#[cfg(feature = "rsa")]
fn rsa_suite(config: &crate::conn::Config) -> CipherSuite {
    #[cfg(feature = "rsa-kx")]
    if config.danger_rsa_key_transport {
        return CipherSuite::TLS_RSA_WITH_AES_128_CCM_8;
    }
    let _ = config;
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
}

/// A cached session the client asks to resume.
struct Resume {
    id: [u8; 32],
    master: [u8; 48],
    peer: Peer,
}

/// Sent a ClientHello; expects HelloVerifyRequest or ServerHello.
pub struct ExpectHelloVerifyOrServerHello {
    base: ClientBase,
    hello_verifies: u8,
    resume: Option<Resume>,
}

/// The client's first flight.
pub(crate) fn start<C: CryptoProvider, T: Trust>(
    cx: &mut Cx<'_, C, T>,
    rng: &mut dyn Rng,
    credentials: Credentials<'_>,
    session: Option<&Session>,
) -> Result<ExpectHelloVerifyOrServerHello, Error> {
    let mut base = ClientBase {
        suite: CipherSuite::TLS_PSK_WITH_AES_128_CCM_8,
        client_random: [0; 32],
        psk: None,
        psk_verified: None,
        own_key: None,
        own_chain: OwnChain::EMPTY,
        server_x509: false,
        client_x509: false,
        ephemeral: None,
        #[cfg(feature = "rsa")]
        own_rsa_key: None,
        #[cfg(feature = "rsa")]
        rsa_rng: None,
    };
    match credentials {
        #[cfg(feature = "psk")]
        Credentials::Psk { identity, key } => {
            let (psk, proof) = trust::configured_psk(identity, key)?;
            base.psk = Some(psk);
            base.psk_verified = Some(proof);
        }
        #[cfg(feature = "ecdhe-psk")]
        Credentials::EcdhePsk { identity, key } => {
            let (psk, proof) = trust::configured_psk(identity, key)?;
            base.psk = Some(psk);
            base.psk_verified = Some(proof);
            base.suite = CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256;
            base.ephemeral = Some(
                cx.crypto
                    .generate_agreement(sigil_crypto::AgreementAlgorithm::P256, rng)?,
            );
        }
        #[cfg(feature = "ecdhe-ecdsa")]
        Credentials::RawPublicKey(key) => {
            base.suite = raw_public_key_suite(cx.config);
            base.own_key = key.cloned();
            base.ephemeral = Some(
                cx.crypto
                    .generate_agreement(sigil_crypto::AgreementAlgorithm::P256, rng)?,
            );
        }
        #[cfg(feature = "x509")]
        Credentials::Certificate(own) => {
            base.suite = ecdsa_suite(cx.config);
            base.server_x509 = true;
            base.client_x509 = true;
            if let Some((chain, key)) = own {
                base.own_chain = OwnChain::new(chain)?;
                base.own_key = Some(key.clone());
            }
            base.ephemeral = Some(
                cx.crypto
                    .generate_agreement(sigil_crypto::AgreementAlgorithm::P256, rng)?,
            );
        }
        #[cfg(feature = "rsa")]
        Credentials::RsaCertificate(own) => {
            base.suite = rsa_suite(cx.config);
            base.server_x509 = true;
            base.client_x509 = true;
            if let Some((chain, key)) = own {
                base.own_chain = OwnChain::new(chain)?;
                base.own_rsa_key = Some(key.clone());
            }
            if !base.kx().is_rsa_transport() {
                base.ephemeral = Some(
                    cx.crypto
                        .generate_agreement(sigil_crypto::AgreementAlgorithm::P256, rng)?,
                );
            }
            base.rsa_rng = Some(SeededRng::from_rng(rng)?);
        }
    }
    rng.fill(&mut base.client_random)?;
    cx.rl.aead = aead_of(base.suite);
    let resume = session
        .filter(|s| s.suite == base.suite)
        .filter(|s| trust::client_may_resume(cx.crypto, cx.trust, s, base.psk.as_ref()))
        .map(|s| Resume {
            id: s.id,
            master: s.master,
            peer: s.peer().clone(),
        });
    let s = ExpectHelloVerifyOrServerHello {
        base,
        hello_verifies: 0,
        resume,
    };
    s.send_client_hello(&[], cx)?;
    Ok(s)
}

impl ExpectHelloVerifyOrServerHello {
    fn send_client_hello<C: CryptoProvider, T>(
        &self,
        cookie: &[u8],
        cx: &mut Cx<'_, C, T>,
    ) -> Result<(), Error> {
        let b = &self.base;
        let mut list = [Extension::ExtendedMasterSecret; 10];
        let mut n = 0;
        let mut add = |e: Extension<'static>| {
            list[n] = e;
            n += 1;
        };
        add(Extension::ExtendedMasterSecret);
        add(Extension::RenegotiationInfo(&[]));
        if b.kx() != Kx::Psk && !b.kx().is_rsa_transport() {
            add(Extension::SupportedGroups(P256_ONLY));
            add(Extension::EcPointFormats(UNCOMPRESSED));
        }
        #[cfg(feature = "rsa")]
        if b.kx().with_rsa() {
            add(Extension::SignatureAlgorithms(extensions::RSA_SCHEMES));
        }
        if b.kx().with_certificates() && !b.kx().with_rsa() {
            add(Extension::SignatureAlgorithms(OUR_SCHEMES));
            // With certificates, the default type X.509 needs no extension.
            if !b.server_x509 {
                add(Extension::ServerCertificateType(RPK_ONLY));
                if b.own_key.is_some() {
                    add(Extension::ClientCertificateType(RPK_ONLY));
                }
            }
        }
        if cx.config.connection_id {
            // connection_id with an empty ID: "send me plain records, I will use yours".
            add(Extension::ConnectionId(&[]));
        }
        let mut ext = [0u8; 64];
        let mut w = Writer::new(&mut ext);
        extensions::encode_all(&list[..n], &mut w)?;
        let en = w.len();
        let mut body = [0u8; 128 + 255 + 40];
        let mut w = Writer::new(&mut body);
        ClientHelloParams {
            random: &b.client_random,
            session_id: self.resume.as_ref().map_or(&[][..], |r| &r.id[..]),
            cookie,
            cipher_suites: &[b.suite],
            extensions: &ext[..en],
        }
        .write(&mut w)?;
        let n = w.len();
        cx.io.flight.clear();
        cx.io
            .queue_handshake(HandshakeType::CLIENT_HELLO, &body[..n])?;
        cx.send_flight()
    }

    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        mut self,
        m: &Fragment<'_>,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        match m.msg_type {
            HandshakeType::HELLO_VERIFY_REQUEST => {
                // A server may ask again (e.g. after rotating its cookie secret), but not
                // without end.
                self.hello_verifies += 1;
                if self.hello_verifies > MAX_HELLO_VERIFY {
                    return Err(Error::IllegalParameter("repeated HelloVerifyRequest"));
                }
                let hvr = HelloVerifyRequest::parse(m.body)?;
                // The first ClientHello and the HelloVerifyRequest are not in the transcript.
                cx.io.transcript.clear();
                self.send_client_hello(hvr.cookie, cx)?;
                Ok(Hs::ExpectHelloVerifyOrServerHello(self).into())
            }
            HandshakeType::SERVER_HELLO => self.server_hello(m, cx),
            t => Err(Error::UnexpectedHandshake(t.0)),
        }
    }

    fn server_hello<C: CryptoProvider, T: Trust>(
        self,
        m: &Fragment<'_>,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        let sh = ServerHello::parse(m.body)?;
        if sh.version != ProtocolVersion::DTLS_1_2 {
            return Err(Error::UnsupportedVersion(sh.version.0));
        }
        if sh.cipher_suite != self.base.suite || sh.compression_method != 0 {
            return Err(Error::IllegalParameter(
                "ServerHello cipher suite or compression",
            ));
        }
        let ext = HelloExtensions::decode(sh.extensions, Hello::Server)?;
        if !ext.extended_master_secret {
            return Err(Error::MissingExtendedMasterSecret);
        }
        ext.check_renegotiation_info(false)?;
        let resume = self.resume.filter(|r| sh.session_id == &r.id[..]);
        let kx = self.base.kx();
        if kx.with_certificates() && resume.is_none() {
            let chosen = ext.server_certificate_type;
            let ok = if self.base.server_x509 {
                chosen.is_none() || chosen == Some(CertificateTypes::Chosen(CertificateType::X509))
            } else {
                chosen == Some(CertificateTypes::Chosen(CertificateType::RAW_PUBLIC_KEY))
            };
            if !ok {
                return Err(Error::IllegalParameter("server certificate type"));
            }
        }
        let client_rpk = ext.client_certificate_type
            == Some(CertificateTypes::Chosen(CertificateType::RAW_PUBLIC_KEY));
        if let Some(theirs) = ext.connection_id {
            if !cx.config.connection_id {
                return Err(Error::IllegalParameter("unrequested connection_id"));
            }
            cx.rl.set_cids(&[], theirs)?;
        }
        let server_random = *sh.random;
        cx.io.transcript.add(m)?;
        if let Some(r) = resume {
            // Abbreviated: the server's ChangeCipherSpec and Finished follow. The timer keeps
            // running until they are in.
            cx.install_keys(
                cx.rl.aead,
                &r.master,
                &self.base.client_random,
                &server_random,
                Side::Client,
            );
            return Ok(Hs::ExpectChangeCipherSpec(ExpectCcs {
                next: ExpectFinished {
                    side: Side::Client,
                    suite: self.base.suite,
                    master: r.master,
                    session_id: Some(r.id),
                    peer: r.peer,
                    resumed: true,
                },
            })
            .into());
        }
        let mut hs = AfterHello {
            base: self.base,
            server_random,
            session_id: <[u8; 32]>::try_from(sh.session_id).ok(),
            client_rpk,
        };
        // The timer keeps running until the server's whole flight is in (RFC 6347 §4.2.4):
        // if the rest is lost, retransmitting the ClientHello makes the server send it again.
        Ok(match kx {
            Kx::Psk => {
                let peer = hs.base.psk_peer(cx.crypto)?;
                Hs::ExpectServerHelloDone(ExpectServerHelloDone {
                    hs,
                    peer_point: None,
                    #[cfg(feature = "rsa-kx")]
                    server_rsa_key: None,
                    peer,
                    cert_requested: false,
                })
            }
            Kx::EcdhePsk => Hs::ExpectServerKeyExchange(ExpectServerKeyExchange {
                hs,
                server_key: None,
            }),
            Kx::EcdheEcdsa => Hs::ExpectServerCertificate(ExpectCertificate { hs }),
            #[cfg(feature = "static-ecdh")]
            Kx::EcdhEcdsa => Hs::ExpectServerCertificate(ExpectCertificate { hs }),
            #[cfg(feature = "rsa")]
            Kx::EcdheRsa => Hs::ExpectServerCertificate(ExpectCertificate { hs }),
            #[cfg(feature = "rsa-kx")]
            Kx::Rsa => Hs::ExpectServerCertificate(ExpectCertificate { hs }),
        }
        .into())
    }
}

/// What the client knows once the ServerHello is in.
pub(crate) struct AfterHello {
    base: ClientBase,
    server_random: [u8; 32],
    session_id: Option<[u8; 32]>,
    /// The server agreed to a raw public key for the client (client_certificate_type).
    client_rpk: bool,
}

/// Expects the server's Certificate (ECDHE-ECDSA, static ECDH).
pub struct ExpectCertificate {
    hs: AfterHello,
}

impl ExpectCertificate {
    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        self,
        m: &Fragment<'_>,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        if m.msg_type != HandshakeType::CERTIFICATE || !cfg!(feature = "ecdhe-ecdsa") {
            return Err(Error::UnexpectedHandshake(m.msg_type.0));
        }
        let key =
            trust::peer_certificate(cx.trust, m.body, self.hs.base.server_x509, cx.config.now)?;
        if key.is_rsa() != self.hs.base.kx().with_rsa() {
            return Err(Error::KeyNotForSuite);
        }
        cx.io.transcript.add(m)?;
        #[cfg(feature = "rsa-kx")]
        if self.hs.base.kx().is_rsa_transport() {
            // No ServerKeyExchange follows: the premaster secret goes to the certificate's
            // key, and only its holder can answer with the right Finished.
            let (rsa_key, proof) = trust::rsa_transport_key(&key)?;
            return Ok(Hs::ExpectServerHelloDone(ExpectServerHelloDone {
                hs: self.hs,
                peer_point: None,
                server_rsa_key: Some(rsa_key),
                peer: Peer::key(&key, proof),
                cert_requested: false,
            })
            .into());
        }
        #[cfg(feature = "static-ecdh")]
        if self.hs.base.kx().is_static_ecdh() {
            // No ServerKeyExchange follows: the trusted key is the server's ECDH key, and only
            // its holder can answer the ClientKeyExchange with the right Finished.
            let (point, proof) = trust::static_ecdh_key(&key)?;
            return Ok(Hs::ExpectServerHelloDone(ExpectServerHelloDone {
                hs: self.hs,
                peer_point: Some(point),
                #[cfg(feature = "rsa-kx")]
                server_rsa_key: None,
                peer: Peer::key(&key, proof),
                cert_requested: false,
            })
            .into());
        }
        Ok(Hs::ExpectServerKeyExchange(ExpectServerKeyExchange {
            hs: self.hs,
            server_key: Some(key),
        })
        .into())
    }
}

/// Expects the ServerKeyExchange: signed under the certificate's key (ECDHE-ECDSA), or
/// unsigned (ECDHE-PSK: the PSK authenticates the exchange through the Finished messages).
pub struct ExpectServerKeyExchange {
    hs: AfterHello,
    server_key: Option<TrustedKey>,
}

impl ExpectServerKeyExchange {
    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        mut self,
        m: &Fragment<'_>,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        if m.msg_type != HandshakeType::SERVER_KEY_EXCHANGE {
            return Err(Error::UnexpectedHandshake(m.msg_type.0));
        }
        let mut r = Reader::new(m.body);
        let ecdhe_psk = self.hs.base.kx() == Kx::EcdhePsk;
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
        let peer = if ecdhe_psk {
            self.hs.base.psk_peer(cx.crypto)?
        } else {
            if !cfg!(feature = "ecdhe-ecdsa") {
                return Err(Error::UnexpectedHandshake(m.msg_type.0));
            }
            let mut signed = [0u8; 64 + 69];
            signed[..32].copy_from_slice(&self.hs.base.client_random);
            signed[32..64].copy_from_slice(&self.hs.server_random);
            signed[64..68].copy_from_slice(params);
            signed[68..].copy_from_slice(point);
            let key = self.server_key.ok_or(Error::UntrustedKey)?;
            let proof = trust::verify_signed(cx.crypto, &key, &signed, &mut r)?;
            Peer::key(&key, proof)
        };
        r.finish("ServerKeyExchange")?;
        let mut peer_point = [0u8; 65];
        peer_point.copy_from_slice(point);
        cx.io.transcript.add(m)?;
        Ok(Hs::ExpectServerHelloDone(ExpectServerHelloDone {
            hs: self.hs,
            peer_point: Some(peer_point),
            #[cfg(feature = "rsa-kx")]
            server_rsa_key: None,
            peer,
            cert_requested: false,
        })
        .into())
    }
}

/// Expects CertificateRequest (ECDHE-ECDSA, static ECDH), ServerKeyExchange (PSK identity
/// hint) or ServerHelloDone; the peer is authenticated by now (or, with a PSK or a static
/// ECDH key, will be by its Finished).
pub struct ExpectServerHelloDone {
    hs: AfterHello,
    peer_point: Option<[u8; 65]>,
    /// RSA key transport: the server's key the premaster secret is encrypted to.
    #[cfg(feature = "rsa-kx")]
    server_rsa_key: Option<sigil_crypto::RsaPublicKey>,
    peer: Peer,
    /// The server asked for the client's key.
    cert_requested: bool,
}

impl ExpectServerHelloDone {
    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        mut self,
        m: &Fragment<'_>,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        let kx = self.hs.base.kx();
        match m.msg_type {
            HandshakeType::SERVER_KEY_EXCHANGE if kx == Kx::Psk => {
                // psk_identity_hint<0..2^16-1> (RFC 4279 §2); Sigil does not use the hint.
                let mut r = Reader::new(m.body);
                r.vec16(0, 0xffff, "ServerKeyExchange identity hint")?;
                r.finish("ServerKeyExchange")?;
                cx.io.transcript.add(m)?;
                Ok(Hs::ExpectServerHelloDone(self).into())
            }
            HandshakeType::CERTIFICATE_REQUEST
                if cfg!(feature = "ecdhe-ecdsa")
                    && kx.with_certificates()
                    && !self.cert_requested =>
            {
                let mut r = Reader::new(m.body);
                let types = r.vec8(1, 255, "CertificateRequest types")?;
                let schemes = r.vec16(2, 0xfffe, "CertificateRequest schemes")?;
                r.vec16(0, 0xffff, "CertificateRequest authorities")?;
                r.finish("CertificateRequest")?;
                // With a key the server agreed to take, authenticate; otherwise answer with an
                // empty Certificate and let the server decide (RFC 5246 §7.4.6).
                let b = &self.hs.base;
                let usable = b.own_key.as_ref().is_some_and(|key| {
                    let want = trust::scheme_of(key.algorithm()).0.to_be_bytes();
                    types.contains(&ClientCertificateType::ECDSA_SIGN.0)
                        && schemes.chunks_exact(2).any(|c| c == want)
                });
                #[cfg(feature = "rsa")]
                let usable = usable
                    || b.own_rsa_key.is_some() && {
                        let want = crate::wire::SignatureScheme::RSA_PKCS1_SHA256
                            .0
                            .to_be_bytes();
                        types.contains(&ClientCertificateType::RSA_SIGN.0)
                            && schemes.chunks_exact(2).any(|c| c == want)
                    };
                let agreed = if b.client_x509 {
                    !b.own_chain.is_empty()
                } else {
                    self.hs.client_rpk
                };
                if !(usable && agreed) {
                    self.hs.base.own_key = None;
                    #[cfg(feature = "rsa")]
                    {
                        self.hs.base.own_rsa_key = None;
                    }
                }
                self.cert_requested = true;
                cx.io.transcript.add(m)?;
                Ok(Hs::ExpectServerHelloDone(self).into())
            }
            HandshakeType::SERVER_HELLO_DONE => {
                if !m.body.is_empty() {
                    return Err(Error::Decode("ServerHelloDone"));
                }
                cx.io.transcript.add(m)?;
                self.final_flight(cx)
            }
            t => Err(Error::UnexpectedHandshake(t.0)),
        }
    }

    /// Flight 5: [Certificate], ClientKeyExchange, [CertificateVerify], ChangeCipherSpec,
    /// Finished.
    fn final_flight<C: CryptoProvider, T: Trust>(
        self,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        cx.io.flight.clear();
        #[cfg(feature = "rsa-kx")]
        let server_rsa_key = self.server_rsa_key;
        let Self {
            hs,
            peer_point,
            peer,
            cert_requested,
            ..
        } = self;
        let AfterHello {
            mut base,
            server_random,
            session_id,
            ..
        } = hs;
        let kx = base.kx();
        let agree = |eph: &AgreementSecret, cx: &Cx<'_, C, T>| {
            let point = peer_point.ok_or(Error::UnexpectedHandshake(14))?;
            cx.crypto.agree(eph, &point).map_err(|_| {
                Error::IllegalParameter(if kx.is_static_ecdh() {
                    "Certificate key as an ECDH point"
                } else {
                    "ServerKeyExchange point"
                })
            })
        };
        // RSA key transport: the premaster secret the ClientKeyExchange carries.
        let mut premaster: Option<[u8; 48]> = None;
        let ecdh = if kx == Kx::Psk || kx == Kx::EcdhePsk {
            // ClientKeyExchange: psk_identity<0..2^16-1>, and with ECDHE-PSK our ephemeral
            // point (RFC 5489 §2).
            let psk = base.psk.as_ref().ok_or(Error::UnexpectedHandshake(14))?;
            let mut cke = [0u8; 130 + 66];
            let mut w = Writer::new(&mut cke);
            w.vec16(psk.identity())?;
            let mut z = None;
            if kx == Kx::EcdhePsk {
                let eph = base
                    .ephemeral
                    .take()
                    .ok_or(Error::Crypto(sigil_crypto::CryptoError::Rng))?;
                w.vec8(cx.crypto.agreement_public_key(&eph)?.as_bytes())?;
                z = Some(agree(&eph, cx)?);
            }
            let n = w.len();
            cx.io
                .queue_handshake(HandshakeType::CLIENT_KEY_EXCHANGE, &cke[..n])?;
            z
        } else {
            if cert_requested {
                queue_client_certificate(cx, &base)?;
            }
            #[cfg(feature = "rsa-kx")]
            if kx.is_rsa_transport() {
                let key = server_rsa_key.ok_or(Error::UnexpectedHandshake(14))?;
                premaster = Some(rsa_client_key_exchange(cx, &key, base.rsa_rng.as_mut())?);
            }
            if premaster.is_some() {
                None
            } else {
                // ClientKeyExchange: our ephemeral point (RFC 8422 §5.7; with static ECDH too,
                // since the client authenticates by signing, RFC 4492 §3.2), drawn at connect.
                let eph = base
                    .ephemeral
                    .take()
                    .ok_or(Error::Crypto(sigil_crypto::CryptoError::Rng))?;
                let point = cx.crypto.agreement_public_key(&eph)?;
                let z = agree(&eph, cx)?;
                let mut cke = [0u8; 66];
                let mut w = Writer::new(&mut cke);
                w.vec8(point.as_bytes())?;
                cx.io
                    .queue_handshake(HandshakeType::CLIENT_KEY_EXCHANGE, &cke)?;
                Some(z)
            }
        };
        let master = match premaster.take() {
            #[cfg(feature = "rsa-kx")]
            Some(pm) => cx.master_secret_rsa(&pm)?,
            _ => cx.master_secret(kx, base.psk.as_ref(), ecdh.as_ref())?,
        };
        cx.install_keys(
            cx.rl.aead,
            &master,
            &base.client_random,
            &server_random,
            Side::Client,
        );
        if let Some(key) = base.own_key.as_ref().filter(|_| cert_requested) {
            let mut cv = [0u8; 4 + 72];
            let mut w = Writer::new(&mut cv);
            trust::write_signature(cx.crypto, key, cx.io.transcript.bytes(), &mut w)?;
            let cn = w.len();
            cx.io
                .queue_handshake(HandshakeType::CERTIFICATE_VERIFY, &cv[..cn])?;
        }
        #[cfg(feature = "rsa")]
        if let Some(key) = base.own_rsa_key.as_ref().filter(|_| cert_requested) {
            let rng = base
                .rsa_rng
                .as_mut()
                .ok_or(Error::Crypto(sigil_crypto::CryptoError::Rng))?;
            let mut cv = [0u8; 4 + sigil_crypto::MAX_RSA_MODULUS_LEN];
            let mut w = Writer::new(&mut cv);
            trust::write_rsa_signature(cx.crypto, key, cx.io.transcript.bytes(), rng, &mut w)?;
            let cn = w.len();
            cx.io
                .queue_handshake(HandshakeType::CERTIFICATE_VERIFY, &cv[..cn])?;
        }
        cx.queue_ccs_finished(&master, Side::Client)?;
        cx.send_flight()?;
        Ok(Hs::ExpectChangeCipherSpec(ExpectCcs {
            next: ExpectFinished {
                side: Side::Client,
                suite: base.suite,
                master,
                session_id,
                peer,
                resumed: false,
            },
        })
        .into())
    }
}

/// The client's Certificate in answer to a CertificateRequest: its RSA chain, X.509 chain or
/// raw public key, or an empty list when it has none the server takes (RFC 5246 §7.4.6).
fn queue_client_certificate<C: CryptoProvider, T>(
    cx: &mut Cx<'_, C, T>,
    base: &ClientBase,
) -> Result<(), Error> {
    #[cfg(feature = "rsa")]
    if base.own_rsa_key.is_some() {
        return cx.queue_chain(&base.own_chain);
    }
    match &base.own_key {
        Some(key) => {
            let chain = base.client_x509.then_some(&base.own_chain);
            cx.queue_certificate(chain, key)
        }
        None => cx
            .io
            .queue_handshake(HandshakeType::CERTIFICATE, &[0, 0, 0]),
    }
}

/// RSA key transport's ClientKeyExchange (RFC 5246 §7.4.7.1): the premaster secret,
/// client_version (DTLS 1.2, what the ClientHello offered) and 46 random bytes, RSAES-PKCS1-v1_5
/// encrypted to the server's key in an opaque<0..2^16-1>; returns the premaster secret.
#[cfg(feature = "rsa-kx")]
fn rsa_client_key_exchange<C: CryptoProvider, T>(
    cx: &mut Cx<'_, C, T>,
    key: &sigil_crypto::RsaPublicKey,
    rng: Option<&mut SeededRng>,
) -> Result<[u8; 48], Error> {
    let rng = rng.ok_or(Error::Crypto(sigil_crypto::CryptoError::Rng))?;
    let mut premaster = [0u8; 48];
    premaster[..2].copy_from_slice(&ProtocolVersion::DTLS_1_2.0.to_be_bytes());
    rng.fill(&mut premaster[2..])?;
    let mut ct = [0u8; sigil_crypto::MAX_RSA_MODULUS_LEN];
    let n = cx.crypto.rsa_pkcs1_encrypt(key, &premaster, rng, &mut ct)?;
    let mut cke = [0u8; 2 + sigil_crypto::MAX_RSA_MODULUS_LEN];
    let mut w = Writer::new(&mut cke);
    w.vec16(&ct[..n])?;
    let len = w.len();
    cx.io
        .queue_handshake(HandshakeType::CLIENT_KEY_EXCHANGE, &cke[..len])?;
    Ok(premaster)
}
