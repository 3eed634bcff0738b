//! The server's handshake, one struct per expected message: `accept` (behind
//! [`crate::Connection::accept`], which takes the [`CookieVerified`] proof) answers the
//! ClientHello with the server's flight, then
//! [`ExpectCertificate`] (mutual authentication) → [`ExpectClientKeyExchange`] →
//! [`ExpectCertificateVerify`] (mutual) → ChangeCipherSpec → Finished ([`crate::finished`]).
//! With static ECDH (feature `static-ecdh` and `Config::danger_static_ecdh`) the server's
//! flight has no ServerKeyExchange, and its own key's scalar is the ECDH secret the
//! client's ephemeral point agrees with (RFC 4492 §2.1).
//! With an RSA key and chain (feature `rsa`) the flight is ECDHE-ECDSA's with rsa_pkcs1_sha256
//! signatures; with RSA key transport (feature `rsa-kx` and
//! `Config::danger_rsa_key_transport`) it has no ServerKeyExchange, and the ClientKeyExchange
//! is decrypted with the Bleichenbacher countermeasure of RFC 5246 §7.4.7.1
//! (`CryptoProvider::rsa_tls_premaster`).

use crate::conn::{aead_of, kx_of, next_seq, Config, Cx, Hs, Kx, Next, OwnChain};
use crate::cookie::{first_client_hello, CookieVerified};
use crate::extensions::{
    CertificateTypes, Extension, Hello, HelloExtensions, SCHEMES, UNCOMPRESSED,
};
use crate::finished::{ExpectCcs, ExpectFinished};
use crate::handshake::{ClientHello, Extensions, Fragment, ServerHello};
use crate::keys::Side;
use crate::trust::{self, Peer, ServerCredentials, Trust, TrustedKey};
use crate::wire::{
    CertificateType, CipherSuite, ClientCertificateType, HandshakeType, NamedGroup, ProtocolVersion,
};
use crate::{Error, Reader, Writer};
use sigil_crypto::{AgreementAlgorithm, AgreementSecret, CryptoProvider, Rng, SignatureAlgorithm};
#[cfg(feature = "rsa-kx")]
use sigil_crypto::{RsaSecretKey, SeededRng};
use sigil_time::UnixTime;

/// RSA key transport: the server's key and the randomness its decryption takes (the
/// replacement premaster secret, blinding), seeded at accept from the caller's RNG.
#[cfg(feature = "rsa-kx")]
pub(crate) struct RsaTransport {
    key: RsaSecretKey,
    rng: SeededRng,
}

/// Whether this server takes RSA key transport: only with the feature and the caller's
/// `Config::danger_rsa_key_transport`.
fn rsa_transport_enabled(config: &Config) -> bool {
    #[cfg(feature = "rsa-kx")]
    return config.danger_rsa_key_transport;
    #[cfg(not(feature = "rsa-kx"))]
    {
        let _ = config;
        false
    }
}

/// What the server knows once it answered the ClientHello.
pub(crate) struct ServerBase {
    suite: CipherSuite,
    client_random: [u8; 32],
    server_random: [u8; 32],
    session_id: Option<[u8; 32]>,
    /// The caller's Unix time for the ClientHello ([`ServerCredentials::now`]): a client
    /// certificate chain is checked at it.
    now: UnixTime,
}

/// Whether this server takes static ECDH: only with the feature and the caller's
/// `Config::danger_static_ecdh`.
fn static_ecdh_enabled(config: &Config) -> bool {
    #[cfg(feature = "static-ecdh")]
    return config.danger_static_ecdh;
    #[cfg(not(feature = "static-ecdh"))]
    {
        let _ = config;
        false
    }
}

/// The server's answer to a ClientHello that passed the cookie check; returns the first
/// state and the next message_seq expected from the client.
pub(crate) fn accept<C: CryptoProvider, T: Trust>(
    cx: &mut Cx<'_, C, T>,
    offer: &ServerCredentials<'_>,
    rng: &mut dyn Rng,
    cookie: CookieVerified,
    datagram: &[u8],
) -> Result<(Hs, u16), Error> {
    let (rec, f) = first_client_hello(datagram)?;
    if !cookie.is_for(cx.crypto, f.body) {
        return Err(Error::IllegalParameter(
            "ClientHello other than the one whose cookie was checked",
        ));
    }
    let ch = ClientHello::parse(f.body)?;
    if ch.version != ProtocolVersion::DTLS_1_2 {
        return Err(Error::UnsupportedVersion(ch.version.0));
    }
    let ext = HelloExtensions::decode(ch.extensions, Hello::Client)?;
    if !ext.extended_master_secret {
        return Err(Error::MissingExtendedMasterSecret);
    }
    let scsv = ch
        .cipher_suites()
        .any(|s| s == CipherSuite::TLS_EMPTY_RENEGOTIATION_INFO_SCSV);
    ext.check_renegotiation_info(scsv)?;
    let rpk_ok = |t: Option<CertificateTypes<'_>>| {
        t.is_some_and(|t| t.allows(CertificateType::RAW_PUBLIC_KEY))
    };
    // X.509 is the default certificate type: a client that sends no certificate-type
    // extension, or lists X509 in it, takes certificates (RFC 7250 §4.1).
    let x509_ok =
        |t: Option<CertificateTypes<'_>>| t.is_none_or(|t| t.allows(CertificateType::X509));
    #[cfg(feature = "x509")]
    let have_chain = offer.chain.is_some();
    #[cfg(not(feature = "x509"))]
    let have_chain = false;
    // Raw public keys when the client asks for them, else the chain if there is one.
    let server_rpk = rpk_ok(ext.server_certificate_type);
    let server_x509 = !server_rpk && have_chain && x509_ok(ext.server_certificate_type);
    let client_rpk = rpk_ok(ext.client_certificate_type);
    // Client certificates only on a server configured with certificates itself.
    let client_x509 = !client_rpk && have_chain && x509_ok(ext.client_certificate_type);
    // RSA suites: an X.509 chain with an RSA key, for clients that take X.509.
    #[cfg(feature = "rsa")]
    let rsa_x509 = offer.rsa.is_some() && !server_rpk && x509_ok(ext.server_certificate_type);
    #[cfg(not(feature = "rsa"))]
    let rsa_x509 = false;
    let rsa_client_ok = !offer.require_client_key || x509_ok(ext.client_certificate_type);
    let rsa_transport = rsa_transport_enabled(cx.config);
    // Resumption (RFC 5246 §7.3): the cached session the client names, if its peer is still
    // trusted and the client still offers its suite (and a static ECDH one is still enabled).
    let static_ecdh = static_ecdh_enabled(cx.config);
    let resume = offer
        .resume
        .filter(|sess| ch.session_id == sess.id && ch.cipher_suites().any(|s| s == sess.suite))
        .filter(|sess| {
            static_ecdh || sess.suite != CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8
        })
        .filter(|sess| rsa_transport || sess.suite != CipherSuite::TLS_RSA_WITH_AES_128_CCM_8)
        .and_then(|sess| {
            trust::recheck_session(cx.crypto, cx.trust, sess, offer.require_client_key)
                .map(|p| (sess, p))
        });
    // The client's preference order decides among the suites this server offers.
    let suite = ch
        .cipher_suites()
        .find(|s| {
            (cfg!(feature = "psk") && *s == CipherSuite::TLS_PSK_WITH_AES_128_CCM_8 && offer.psk)
                || (cfg!(feature = "ecdhe-psk")
                    && *s == CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256
                    && offer.psk
                    && ext.offers_p256())
                || (cfg!(feature = "ecdhe-ecdsa")
                    && (*s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8
                        || (cfg!(feature = "gcm")
                            && *s == CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256))
                    && (server_rpk || server_x509)
                    && ext.offers_p256()
                    && offer
                        .key
                        .is_some_and(|k| ext.offers_scheme(trust::scheme_of(k.algorithm())))
                    && (!offer.require_client_key || client_rpk || client_x509))
                // Static ECDH: raw public keys only, the server's key a P-256 one (its ECDH
                // key), and only when this server was told to take it.
                || (static_ecdh
                    && *s == CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8
                    && server_rpk
                    && ext.offers_p256()
                    && offer
                        .key
                        .is_some_and(|k| k.algorithm() == SignatureAlgorithm::EcdsaP256)
                    && (!offer.require_client_key || client_rpk || client_x509))
                // ECDHE-RSA: an RSA chain, P-256 and rsa_pkcs1_sha256 offered.
                || (rsa_x509
                    && *s == CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
                    && ext.offers_p256()
                    && ext.offers_scheme(crate::wire::SignatureScheme::RSA_PKCS1_SHA256)
                    && rsa_client_ok)
                // RSA key transport: only when this server was told to take it.
                || (rsa_x509
                    && rsa_transport
                    && *s == CipherSuite::TLS_RSA_WITH_AES_128_CCM_8
                    && rsa_client_ok)
        })
        .or(resume.as_ref().map(|(sess, _)| sess.suite))
        .ok_or(Error::NoCommonCipherSuite)?;
    let suite = resume.as_ref().map_or(suite, |(sess, _)| sess.suite);
    cx.rl.aead = aead_of(suite);
    let mut base = ServerBase {
        suite,
        client_random: *ch.random,
        server_random: [0; 32],
        session_id: None,
        now: offer.now,
    };
    rng.fill(&mut base.server_random)?;
    cx.rl.replay[0].accept(rec.header.sequence);
    cx.rl.write_seq[0] = rec.header.sequence + 1;
    let next_recv_msg = next_seq(f.message_seq)?;
    cx.io.next_send_msg = f.message_seq;
    cx.io.transcript.add(&f)?;
    cx.io.flight.clear();
    // connection_id (RFC 9146 §3): the client's ID goes into our records, ours into its.
    let mut cid_ext = None;
    if let Some(theirs) = ext.connection_id {
        let ours = offer.connection_id;
        if !ours.is_empty() && ours.len() <= crate::extensions::MAX_CID {
            cx.rl.set_cids(ours, theirs)?;
            cid_ext = Some(Extension::ConnectionId(ours));
        }
    }
    let kx = kx_of(suite);
    let points = Extension::EcPointFormats(UNCOMPRESSED);
    if let Some((sess, peer)) = resume {
        // Abbreviated handshake: ServerHello naming the session, ChangeCipherSpec, Finished;
        // the client's ChangeCipherSpec and Finished end it.
        base.session_id = Some(sess.id);
        let with_points = if kx == Kx::Psk { None } else { Some(points) };
        queue_server_hello(cx, &base, &[with_points, cid_ext])?;
        cx.install_keys(
            cx.rl.aead,
            &sess.master,
            &base.client_random,
            &base.server_random,
            Side::Server,
        );
        cx.queue_ccs_finished(&sess.master, Side::Server)?;
        cx.send_flight()?;
        let next = ExpectCcs {
            next: ExpectFinished {
                side: Side::Server,
                suite,
                master: sess.master,
                session_id: Some(sess.id),
                peer,
                resumed: true,
            },
        };
        return Ok((Hs::ExpectChangeCipherSpec(next), next_recv_msg));
    }
    if offer.issue_session_ids {
        let mut id = [0u8; 32];
        rng.fill(&mut id)?;
        base.session_id = Some(id);
    }
    #[cfg(feature = "rsa")]
    if let Some((chain, key)) = offer.rsa.filter(|_| kx.with_rsa()) {
        let next = rsa_flight(
            cx,
            &ext,
            base,
            cid_ext,
            offer.require_client_key,
            chain,
            key,
            rng,
        )?;
        cx.send_flight()?;
        return Ok((next, next_recv_msg));
    }
    let next = if kx == Kx::Psk {
        // Flight 4: ServerHello, ServerHelloDone (no identity hint: RFC 7925 §4.1 advises
        // against sending one).
        queue_server_hello(cx, &base, &[cid_ext])?;
        cx.io
            .queue_handshake(HandshakeType::SERVER_HELLO_DONE, &[])?;
        Hs::ExpectClientKeyExchange(ExpectClientKeyExchange {
            base,
            ecdh_secret: None,
            client_key: None,
            require_client_key: false,
            #[cfg(feature = "rsa-kx")]
            rsa_transport: None,
        })
    } else if kx == Kx::EcdhePsk {
        // ServerHello (ec_point_formats), ServerKeyExchange (empty hint, the ephemeral point,
        // no signature: RFC 5489 §2), ServerHelloDone.
        queue_server_hello(cx, &base, &[Some(points), cid_ext])?;
        let (eph, params) = ephemeral_params(cx, rng)?;
        let mut ske = [0u8; 2 + 69];
        ske[2..].copy_from_slice(&params);
        cx.io
            .queue_handshake(HandshakeType::SERVER_KEY_EXCHANGE, &ske)?;
        cx.io
            .queue_handshake(HandshakeType::SERVER_HELLO_DONE, &[])?;
        Hs::ExpectClientKeyExchange(ExpectClientKeyExchange {
            base,
            ecdh_secret: Some(eph),
            client_key: None,
            require_client_key: false,
            #[cfg(feature = "rsa-kx")]
            rsa_transport: None,
        })
    } else {
        let key = offer.key.ok_or(Error::NoCommonCipherSuite)?;
        let client_auth = offer.require_client_key;
        let client_x509 = client_auth && !client_rpk;
        #[cfg(feature = "x509")]
        let chain = match offer.chain.filter(|_| server_x509) {
            Some(chain) => Some(OwnChain::new(chain)?),
            None => None,
        };
        #[cfg(not(feature = "x509"))]
        let chain: Option<OwnChain> = None;
        // server_certificate_type, ec_point_formats [uncompressed], and with mutual
        // authentication client_certificate_type (RFC 7250 §4.2: one type each, and only in
        // answer to the client's extension).
        let server_type = ext.server_certificate_type.map(|_| {
            Extension::ServerCertificateType(CertificateTypes::Chosen(if server_x509 {
                CertificateType::X509
            } else {
                CertificateType::RAW_PUBLIC_KEY
            }))
        });
        let client_type = ext
            .client_certificate_type
            .filter(|_| client_auth)
            .map(|_| {
                Extension::ClientCertificateType(CertificateTypes::Chosen(if client_x509 {
                    CertificateType::X509
                } else {
                    CertificateType::RAW_PUBLIC_KEY
                }))
            });
        queue_server_hello(
            cx,
            &base,
            &[server_type, Some(points), client_type, cid_ext],
        )?;
        cx.queue_certificate(chain.as_ref(), key)?;
        let ecdh_secret = if kx.is_static_ecdh() {
            // Static ECDH: no ServerKeyExchange (RFC 4492 §5.4); the key the Certificate
            // names is the one the client agrees with.
            AgreementSecret::from_p256_signing_key(key)?
        } else {
            // ServerKeyExchange for ECDHE (RFC 8422 §5.4): named curve secp256r1, the
            // ephemeral point, and a signature over client_random || server_random || params.
            let (eph, params) = ephemeral_params(cx, rng)?;
            let mut signed = [0u8; 64 + 69];
            signed[..32].copy_from_slice(&base.client_random);
            signed[32..64].copy_from_slice(&base.server_random);
            signed[64..].copy_from_slice(&params);
            let mut body = [0u8; 69 + 4 + 72];
            let mut w = Writer::new(&mut body);
            w.bytes(&params)?;
            trust::write_signature(cx.crypto, key, &signed, &mut w)?;
            let n = w.len();
            cx.io
                .queue_handshake(HandshakeType::SERVER_KEY_EXCHANGE, &body[..n])?;
            eph
        };
        let next = if client_auth {
            // CertificateRequest: types [ecdsa_sign], schemes, no authorities (RFC 5246
            // §7.4.4; RFC 8422 §5.5).
            let mut cr = [0u8; 16];
            let mut w = Writer::new(&mut cr);
            w.vec8(&[ClientCertificateType::ECDSA_SIGN.0])?;
            w.u16((SCHEMES.len() * 2) as u16)?;
            for sc in SCHEMES {
                w.u16(sc.0)?;
            }
            w.u16(0)?;
            let n = w.len();
            cx.io
                .queue_handshake(HandshakeType::CERTIFICATE_REQUEST, &cr[..n])?;
            Hs::ExpectClientCertificate(ExpectCertificate {
                base,
                ecdh_secret: Some(ecdh_secret),
                x509: client_x509,
                #[cfg(feature = "rsa-kx")]
                rsa_transport: None,
            })
        } else {
            Hs::ExpectClientKeyExchange(ExpectClientKeyExchange {
                base,
                ecdh_secret: Some(ecdh_secret),
                client_key: None,
                require_client_key: false,
                #[cfg(feature = "rsa-kx")]
                rsa_transport: None,
            })
        };
        cx.io
            .queue_handshake(HandshakeType::SERVER_HELLO_DONE, &[])?;
        next
    };
    cx.send_flight()?;
    Ok((next, next_recv_msg))
}

/// The server's flight for the RSA suites (feature `rsa`): ServerHello, Certificate (the RSA
/// chain), for ECDHE-RSA a ServerKeyExchange signed rsa_pkcs1_sha256 (RFC 8422 §5.4), with
/// mutual authentication a CertificateRequest for an rsa_sign chain, ServerHelloDone.
#[cfg(feature = "rsa")]
#[allow(clippy::too_many_arguments)]
fn rsa_flight<C: CryptoProvider, T>(
    cx: &mut Cx<'_, C, T>,
    ext: &HelloExtensions<'_>,
    base: ServerBase,
    cid_ext: Option<Extension<'_>>,
    client_auth: bool,
    chain: &[&[u8]],
    key: &sigil_crypto::RsaSecretKey,
    rng: &mut dyn Rng,
) -> Result<Hs, Error> {
    let kx = kx_of(base.suite);
    let chain = OwnChain::new(chain)?;
    let server_type = ext
        .server_certificate_type
        .map(|_| Extension::ServerCertificateType(CertificateTypes::Chosen(CertificateType::X509)));
    let client_type = ext
        .client_certificate_type
        .filter(|_| client_auth)
        .map(|_| Extension::ClientCertificateType(CertificateTypes::Chosen(CertificateType::X509)));
    let points = (!kx.is_rsa_transport()).then_some(Extension::EcPointFormats(UNCOMPRESSED));
    queue_server_hello(cx, &base, &[server_type, points, client_type, cid_ext])?;
    cx.queue_chain(&chain)?;
    let ecdh_secret = if kx.is_rsa_transport() {
        None
    } else {
        let (eph, params) = ephemeral_params(cx, rng)?;
        let mut signed = [0u8; 64 + 69];
        signed[..32].copy_from_slice(&base.client_random);
        signed[32..64].copy_from_slice(&base.server_random);
        signed[64..].copy_from_slice(&params);
        let mut body = [0u8; 69 + 4 + sigil_crypto::MAX_RSA_MODULUS_LEN];
        let mut w = Writer::new(&mut body);
        w.bytes(&params)?;
        trust::write_rsa_signature(cx.crypto, key, &signed, rng, &mut w)?;
        let n = w.len();
        cx.io
            .queue_handshake(HandshakeType::SERVER_KEY_EXCHANGE, &body[..n])?;
        Some(eph)
    };
    #[cfg(feature = "rsa-kx")]
    let rsa_transport = match kx.is_rsa_transport() {
        true => Some(RsaTransport {
            key: key.clone(),
            rng: SeededRng::from_rng(rng)?,
        }),
        false => None,
    };
    let next = if client_auth {
        // CertificateRequest: types [rsa_sign], schemes [rsa_pkcs1_sha256], no authorities
        // (RFC 5246 §7.4.4).
        let mut cr = [0u8; 8];
        let mut w = Writer::new(&mut cr);
        w.vec8(&[ClientCertificateType::RSA_SIGN.0])?;
        w.vec16(
            &crate::wire::SignatureScheme::RSA_PKCS1_SHA256
                .0
                .to_be_bytes(),
        )?;
        w.u16(0)?;
        let n = w.len();
        cx.io
            .queue_handshake(HandshakeType::CERTIFICATE_REQUEST, &cr[..n])?;
        Hs::ExpectClientCertificate(ExpectCertificate {
            base,
            ecdh_secret,
            x509: true,
            #[cfg(feature = "rsa-kx")]
            rsa_transport,
        })
    } else {
        Hs::ExpectClientKeyExchange(ExpectClientKeyExchange {
            base,
            ecdh_secret,
            client_key: None,
            require_client_key: false,
            #[cfg(feature = "rsa-kx")]
            rsa_transport,
        })
    };
    cx.io
        .queue_handshake(HandshakeType::SERVER_HELLO_DONE, &[])?;
    Ok(next)
}

/// ServerHello with extended_master_secret, renegotiation_info and `more`.
fn queue_server_hello<C: CryptoProvider, T>(
    cx: &mut Cx<'_, C, T>,
    base: &ServerBase,
    more: &[Option<Extension<'_>>],
) -> Result<(), Error> {
    let mut ext = [0u8; 64 + 4 + 1 + crate::extensions::MAX_CID];
    let mut w = Writer::new(&mut ext);
    Extension::ExtendedMasterSecret.encode(&mut w)?;
    Extension::RenegotiationInfo(&[]).encode(&mut w)?;
    for e in more.iter().flatten() {
        e.encode(&mut w)?;
    }
    let en = w.len();
    let mut body = [0u8; 160 + 4 + 1 + crate::extensions::MAX_CID];
    let mut w = Writer::new(&mut body);
    ServerHello {
        version: ProtocolVersion::DTLS_1_2,
        random: &base.server_random,
        session_id: base.session_id.as_ref().map_or(&[][..], |id| &id[..]),
        cipher_suite: base.suite,
        compression_method: 0,
        extensions: Extensions::parse(&ext[..en])?,
    }
    .write(&mut w)?;
    let n = w.len();
    cx.io
        .queue_handshake(HandshakeType::SERVER_HELLO, &body[..n])
}

/// A fresh ephemeral P-256 secret (kept for the ClientKeyExchange) and its ServerECDHParams:
/// named_curve secp256r1 and the uncompressed point (RFC 8422 §5.4).
fn ephemeral_params<C: CryptoProvider, T>(
    cx: &Cx<'_, C, T>,
    rng: &mut dyn Rng,
) -> Result<(AgreementSecret, [u8; 4 + 65]), Error> {
    let eph = cx
        .crypto
        .generate_agreement(AgreementAlgorithm::P256, rng)?;
    let point = cx.crypto.agreement_public_key(&eph)?;
    let mut params = [0u8; 4 + 65];
    params[0] = 3; // named_curve
    params[1..3].copy_from_slice(&NamedGroup::SECP256R1.0.to_be_bytes());
    params[3] = 65;
    params[4..].copy_from_slice(point.as_bytes());
    Ok((eph, params))
}

/// Mutual authentication: expects the client's Certificate.
pub struct ExpectCertificate {
    base: ServerBase,
    /// This side's ECDH secret: ephemeral, or with static ECDH its own key's scalar (none
    /// with RSA key transport).
    ecdh_secret: Option<AgreementSecret>,
    x509: bool,
    #[cfg(feature = "rsa-kx")]
    rsa_transport: Option<RsaTransport>,
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
        // An empty Certificate where one is required fails (RFC 5246 §7.4.6).
        if m.body.len() <= 3 {
            return Err(Error::MissingClientKey);
        }
        let key = trust::peer_certificate(cx.trust, m.body, self.x509, self.base.now)?;
        if key.is_rsa() != kx_of(self.base.suite).with_rsa() {
            return Err(Error::KeyNotForSuite);
        }
        cx.io.transcript.add(m)?;
        Ok(Hs::ExpectClientKeyExchange(ExpectClientKeyExchange {
            base: self.base,
            ecdh_secret: self.ecdh_secret,
            client_key: Some(key),
            require_client_key: true,
            #[cfg(feature = "rsa-kx")]
            rsa_transport: self.rsa_transport,
        })
        .into())
    }
}

/// Expects the ClientKeyExchange: the PSK identity (looked up in the trust store), the
/// client's ephemeral point, or both.
pub struct ExpectClientKeyExchange {
    base: ServerBase,
    /// This side's ECDH secret: ephemeral, or with static ECDH its own key's scalar.
    ecdh_secret: Option<AgreementSecret>,
    /// The client's trusted key, whose possession its CertificateVerify must prove.
    client_key: Option<TrustedKey>,
    require_client_key: bool,
    #[cfg(feature = "rsa-kx")]
    rsa_transport: Option<RsaTransport>,
}

impl ExpectClientKeyExchange {
    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        self,
        m: &Fragment<'_>,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        if m.msg_type != HandshakeType::CLIENT_KEY_EXCHANGE {
            return Err(Error::UnexpectedHandshake(m.msg_type.0));
        }
        let mut r = Reader::new(m.body);
        let kx = kx_of(self.base.suite);
        let agree = |point: &[u8]| {
            let secret = self
                .ecdh_secret
                .as_ref()
                .ok_or(Error::UnexpectedHandshake(16))?;
            cx.crypto
                .agree(secret, point)
                .map_err(|_| Error::IllegalParameter("ClientKeyExchange point"))
        };
        let (psk, peer, ecdh) = if kx == Kx::Psk || kx == Kx::EcdhePsk {
            let identity = r.vec16(0, 128, "ClientKeyExchange identity")?;
            let point = if kx == Kx::EcdhePsk {
                Some(r.vec8(1, 255, "ClientKeyExchange point")?)
            } else {
                None
            };
            r.finish("ClientKeyExchange")?;
            let (psk, proof) = trust::lookup_psk(cx.trust, identity)?;
            let peer = Peer::psk(cx.crypto, &psk, proof);
            let z = match point {
                None => None,
                Some(point) => Some(agree(point)?),
            };
            (Some(psk), Some(peer), z)
        } else if kx.is_rsa_transport() {
            (None, None, None)
        } else {
            let point = r.vec8(1, 255, "ClientKeyExchange point")?;
            r.finish("ClientKeyExchange")?;
            (None, None, Some(agree(point)?))
        };
        #[cfg(feature = "rsa-kx")]
        let premaster = match self.rsa_transport {
            Some(mut t) if kx.is_rsa_transport() => {
                // EncryptedPreMasterSecret (RFC 5246 §7.4.7.1). A bad padding or length
                // yields a random premaster secret, not an error: the client's Finished
                // then fails like any other wrong key, and nothing tells the two apart.
                let ct = r.vec16(1, 0xffff, "EncryptedPreMasterSecret")?;
                r.finish("ClientKeyExchange")?;
                let version = ProtocolVersion::DTLS_1_2.0.to_be_bytes();
                let pm = cx
                    .crypto
                    .rsa_tls_premaster(&t.key, ct, version, &mut t.rng)
                    .map_err(|e| match e {
                        sigil_crypto::CryptoError::KeyLength => {
                            Error::Decode("EncryptedPreMasterSecret length")
                        }
                        e => Error::Crypto(e),
                    })?;
                Some(pm)
            }
            _ => None,
        };
        cx.io.transcript.add(m)?;
        #[cfg(feature = "rsa-kx")]
        let master = match premaster {
            Some(pm) => cx.master_secret_rsa(&pm)?,
            None => cx.master_secret(kx, psk.as_ref(), ecdh.as_ref())?,
        };
        #[cfg(not(feature = "rsa-kx"))]
        let master = cx.master_secret(kx, psk.as_ref(), ecdh.as_ref())?;
        cx.install_keys(
            cx.rl.aead,
            &master,
            &self.base.client_random,
            &self.base.server_random,
            Side::Server,
        );
        // The timer keeps running until the client's whole flight (up to Finished) is in.
        if let Some(client_key) = self.client_key {
            return Ok(Hs::ExpectCertificateVerify(ExpectCertificateVerify {
                base: self.base,
                master,
                client_key,
            })
            .into());
        }
        let peer = match peer {
            Some(p) => p,
            None => Peer::Anonymous(
                trust::client_not_asked(self.require_client_key).ok_or(Error::MissingClientKey)?,
            ),
        };
        Ok(expect_ccs(self.base, master, peer).into())
    }
}

fn expect_ccs(base: ServerBase, master: [u8; 48], peer: Peer) -> Hs {
    Hs::ExpectChangeCipherSpec(ExpectCcs {
        next: ExpectFinished {
            side: Side::Server,
            suite: base.suite,
            master,
            session_id: base.session_id,
            peer,
            resumed: false,
        },
    })
}

/// Mutual authentication: expects the client's CertificateVerify, its signature over every
/// handshake message before it (RFC 5246 §7.4.8).
pub struct ExpectCertificateVerify {
    base: ServerBase,
    master: [u8; 48],
    client_key: TrustedKey,
}

impl ExpectCertificateVerify {
    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        self,
        m: &Fragment<'_>,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        if m.msg_type != HandshakeType::CERTIFICATE_VERIFY || !cfg!(feature = "ecdhe-ecdsa") {
            return Err(Error::UnexpectedHandshake(m.msg_type.0));
        }
        let mut r = Reader::new(m.body);
        let proof = trust::verify_signed(
            cx.crypto,
            &self.client_key,
            cx.io.transcript.bytes(),
            &mut r,
        )?;
        r.finish("CertificateVerify")?;
        cx.io.transcript.add(m)?;
        let peer = Peer::key(&self.client_key, proof);
        Ok(expect_ccs(self.base, self.master, peer).into())
    }
}
