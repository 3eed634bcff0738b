//! Key exchange: how each suite authenticates and agrees on keys ([`Kx`]), this side's own
//! certificate chain, and the Certificate message and master secret a transition builds.

use super::Cx;
use crate::keys;
use crate::protection::Aead;
use crate::wire::HandshakeType;
use crate::{Error, Writer};
use sigil_crypto::CryptoProvider;

/// How a suite authenticates and agrees on keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kx {
    /// Pre-shared key only (RFC 4279).
    Psk,
    /// Ephemeral ECDH authenticated by a pre-shared key (RFC 5489, RFC 8442).
    EcdhePsk,
    /// Ephemeral ECDH signed with ECDSA/EdDSA keys (RFC 8422).
    EcdheEcdsa,
    /// Static ECDH: the client's ephemeral key with the server's P-256 key, which its
    /// Certificate carries (RFC 4492 §2.1 ECDH_ECDSA); no ServerKeyExchange.
    #[cfg(feature = "static-ecdh")]
    EcdhEcdsa,
    /// Ephemeral ECDH signed with RSA keys (RFC 8422 §2.2 ECDHE_RSA).
    #[cfg(feature = "rsa")]
    EcdheRsa,
    /// RSA key transport (RFC 5246 §7.4.7.1): no ServerKeyExchange, the client encrypts the
    /// premaster secret to the server's certificate key.
    #[cfg(feature = "rsa-kx")]
    Rsa,
}

impl Kx {
    /// The server authenticates with a raw public key or certificate (and may ask for the
    /// client's): the ECDHE-ECDSA, static ECDH and RSA exchanges.
    pub(crate) fn with_certificates(self) -> bool {
        match self {
            Kx::Psk | Kx::EcdhePsk => false,
            Kx::EcdheEcdsa => true,
            #[cfg(feature = "static-ecdh")]
            Kx::EcdhEcdsa => true,
            #[cfg(feature = "rsa")]
            Kx::EcdheRsa => true,
            #[cfg(feature = "rsa-kx")]
            Kx::Rsa => true,
        }
    }

    /// The server's certificate holds an RSA key: ECDHE-RSA and RSA key transport.
    pub(crate) fn with_rsa(self) -> bool {
        #[cfg(feature = "rsa")]
        if self == Kx::EcdheRsa {
            return true;
        }
        self.is_rsa_transport()
    }

    /// RSA key transport: the premaster secret is encrypted to the server's key.
    pub(crate) fn is_rsa_transport(self) -> bool {
        #[cfg(feature = "rsa-kx")]
        if self == Kx::Rsa {
            return true;
        }
        false
    }

    /// The server's certificate key is its key-agreement key: static ECDH.
    pub(crate) fn is_static_ecdh(self) -> bool {
        #[cfg(feature = "static-ecdh")]
        if self == Kx::EcdhEcdsa {
            return true;
        }
        false
    }
}

pub(crate) fn kx_of(s: crate::wire::CipherSuite) -> Kx {
    use crate::wire::CipherSuite;
    match s {
        CipherSuite::TLS_PSK_WITH_AES_128_CCM_8 => Kx::Psk,
        CipherSuite::TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 => Kx::EcdhePsk,
        #[cfg(feature = "static-ecdh")]
        CipherSuite::PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8 => Kx::EcdhEcdsa,
        #[cfg(feature = "rsa")]
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Kx::EcdheRsa,
        #[cfg(feature = "rsa-kx")]
        CipherSuite::TLS_RSA_WITH_AES_128_CCM_8 => Kx::Rsa,
        _ => Kx::EcdheEcdsa,
    }
}

pub(crate) fn aead_of(s: crate::wire::CipherSuite) -> Aead {
    if s == crate::wire::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        || s == crate::wire::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    {
        Aead::Gcm
    } else {
        Aead::Ccm8
    }
}

/// This side's own certificate chain (leaf first) as the `certificate_list` of a Certificate
/// message carries it.
#[derive(Clone)]
pub(crate) struct OwnChain {
    buf: [u8; crate::flight::MAX_CHAIN],
    len: usize,
}

impl OwnChain {
    pub const EMPTY: Self = Self {
        buf: [0; crate::flight::MAX_CHAIN],
        len: 0,
    };

    /// Keeps `chain` as `ASN.1Cert` entries.
    #[cfg(feature = "x509")]
    pub fn new(chain: &[&[u8]]) -> Result<Self, Error> {
        let mut c = Self::EMPTY;
        let mut w = Writer::new(&mut c.buf);
        for cert in chain {
            w.u24(cert.len() as u32)
                .map_err(|_| Error::BufferTooSmall)?;
            w.bytes(cert).map_err(|_| Error::BufferTooSmall)?;
        }
        c.len = w.len();
        Ok(c)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<C: CryptoProvider, T> Cx<'_, C, T> {
    /// Certificate with this side's X.509 chain, or its raw public key (RFC 7250 §3: one
    /// `ASN.1_subjectPublicKeyInfo<1..2^24-1>`).
    pub fn queue_certificate(
        &mut self,
        x509: Option<&OwnChain>,
        key: &sigil_crypto::SecretKey,
    ) -> Result<(), Error> {
        if let Some(chain) = x509 {
            let mut body = [0u8; 3 + crate::flight::MAX_CHAIN];
            let n = chain.len;
            body[..3].copy_from_slice(&(n as u32).to_be_bytes()[1..]);
            body[3..3 + n].copy_from_slice(&chain.buf[..n]);
            return self
                .io
                .queue_handshake(HandshakeType::CERTIFICATE, &body[..3 + n]);
        }
        let public = self.crypto.public_key(key)?;
        let mut body = [0u8; 3 + 91];
        let mut w = Writer::new(&mut body);
        w.u24(crate::spki::spki_len(&public) as u32)?;
        crate::spki::write_spki(&public, &mut w)?;
        let n = w.len();
        self.io
            .queue_handshake(HandshakeType::CERTIFICATE, &body[..n])
    }

    /// This side's X.509 chain as a Certificate message (RFC 5246 §7.4.2).
    #[cfg(feature = "rsa")]
    pub fn queue_chain(&mut self, chain: &OwnChain) -> Result<(), Error> {
        let mut body = [0u8; 3 + crate::flight::MAX_CHAIN];
        let n = chain.len;
        body[..3].copy_from_slice(&(n as u32).to_be_bytes()[1..]);
        body[3..3 + n].copy_from_slice(&chain.buf[..n]);
        self.io
            .queue_handshake(HandshakeType::CERTIFICATE, &body[..3 + n])
    }

    /// The extended master secret (RFC 7627 §4) from the RSA-transported premaster secret
    /// (RFC 5246 §7.4.7.1), over the transcript through ClientKeyExchange.
    #[cfg(feature = "rsa-kx")]
    pub fn master_secret_rsa(&self, premaster: &[u8; 48]) -> Result<[u8; 48], Error> {
        let session_hash = self.io.transcript.hash(self.crypto);
        Ok(keys::extended_master_secret(
            self.crypto,
            premaster,
            &session_hash,
        ))
    }

    /// The extended master secret (RFC 7627 §4) from the PSK or the ECDH shared secret, over
    /// the transcript through ClientKeyExchange.
    pub fn master_secret(
        &self,
        kx: Kx,
        psk: Option<&crate::trust::Psk>,
        ecdh: Option<&[u8; 32]>,
    ) -> Result<[u8; 48], Error> {
        let mut pre = [0u8; 4 + 2 * keys::MAX_PSK_LEN];
        let n = match (kx, ecdh, psk) {
            // RFC 8422 §5.10 (RFC 4492 §5.10 for static ECDH): the x-coordinate Z.
            (kx, Some(z), _) if kx.with_certificates() => {
                pre[..32].copy_from_slice(z);
                32
            }
            // RFC 5489 §2: other_secret<0..2^16-1> = Z, then psk<0..2^16-1>.
            (Kx::EcdhePsk, Some(z), Some(psk)) => {
                let mut w = Writer::new(&mut pre);
                w.vec16(z)?;
                w.vec16(psk.key())?;
                w.len()
            }
            (Kx::Psk, None, Some(psk)) => keys::psk_premaster(psk.key(), &mut pre)?,
            _ => return Err(Error::UnexpectedHandshake(16)),
        };
        let session_hash = self.io.transcript.hash(self.crypto);
        Ok(keys::extended_master_secret(
            self.crypto,
            &pre[..n],
            &session_hash,
        ))
    }
}
