//! Hello extensions as typed values (RFC 5246 §7.4.1.4), decoded and encoded in this one
//! place. An extension Sigil does not know stays representable ([`Extension::Unknown`]); the
//! cookie and the transcript always cover the bytes exactly as they arrived.

use crate::handshake::Extensions;
use crate::wire::{CertificateType, EcPointFormat, ExtensionType, NamedGroup, SignatureScheme};
use crate::{Error, Reader, Writer};

/// Which hello an extension belongs to: the certificate-type extensions carry a list in a
/// ClientHello and one value in a ServerHello (RFC 7250 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hello {
    Client,
    Server,
}

/// A list of two-byte code points as it arrived (`supported_groups`, `signature_algorithms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct U16List<'a>(&'a [u8]);

impl<'a> U16List<'a> {
    pub fn iter(&self) -> impl Iterator<Item = u16> + 'a {
        self.0
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
    }
}

/// The certificate types of `client_certificate_type` / `server_certificate_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertificateTypes<'a> {
    /// ClientHello: the types the client can use or accept, in preference order.
    Offered(&'a [u8]),
    /// ServerHello: the one type the server picked.
    Chosen(CertificateType),
}

impl CertificateTypes<'_> {
    /// Whether `t` is offered (ClientHello) or chosen (ServerHello).
    pub fn allows(&self, t: CertificateType) -> bool {
        match self {
            Self::Offered(list) => list.contains(&t.0),
            Self::Chosen(c) => *c == t,
        }
    }
}

/// One ClientHello or ServerHello extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extension<'a> {
    /// `supported_groups` (RFC 8422 §5.1.1).
    SupportedGroups(U16List<'a>),
    /// `ec_point_formats` (RFC 8422 §5.1.2).
    EcPointFormats(&'a [u8]),
    /// `signature_algorithms` (RFC 5246 §7.4.1.4.1).
    SignatureAlgorithms(U16List<'a>),
    /// `client_certificate_type` (RFC 7250 §3).
    ClientCertificateType(CertificateTypes<'a>),
    /// `server_certificate_type` (RFC 7250 §3).
    ServerCertificateType(CertificateTypes<'a>),
    /// `extended_master_secret`, always empty (RFC 7627 §5.1).
    ExtendedMasterSecret,
    /// `connection_id`: the ID the sender wants in the records it receives (RFC 9146 §3).
    ConnectionId(&'a [u8]),
    /// `renegotiation_info`: the renegotiated_connection (RFC 5746 §3.2).
    RenegotiationInfo(&'a [u8]),
    /// Any other extension, kept as it arrived.
    Unknown(ExtensionType, &'a [u8]),
}

/// Longest connection ID accepted (RFC 9146 allows 255; Sigil's server uses 8).
pub const MAX_CID: usize = 16;

impl<'a> Extension<'a> {
    /// Decodes the body of an extension of type `t` found in `hello`.
    pub fn decode(t: ExtensionType, data: &'a [u8], hello: Hello) -> Result<Self, Error> {
        let mut r = Reader::new(data);
        let e = match t {
            ExtensionType::SUPPORTED_GROUPS => {
                let l = r.vec16(2, 0xfffe, "supported_groups")?;
                if l.len() % 2 != 0 {
                    return Err(Error::Decode("supported_groups"));
                }
                Self::SupportedGroups(U16List(l))
            }
            ExtensionType::EC_POINT_FORMATS => {
                Self::EcPointFormats(r.vec8(1, 255, "ec_point_formats")?)
            }
            ExtensionType::SIGNATURE_ALGORITHMS => {
                let l = r.vec16(2, 0xfffe, "signature_algorithms")?;
                if l.len() % 2 != 0 {
                    return Err(Error::Decode("signature_algorithms"));
                }
                Self::SignatureAlgorithms(U16List(l))
            }
            ExtensionType::CLIENT_CERTIFICATE_TYPE | ExtensionType::SERVER_CERTIFICATE_TYPE => {
                let types = match hello {
                    Hello::Client => {
                        CertificateTypes::Offered(r.vec8(1, 255, "certificate type list")?)
                    }
                    Hello::Server => {
                        CertificateTypes::Chosen(CertificateType(r.u8("certificate type")?))
                    }
                };
                if t == ExtensionType::CLIENT_CERTIFICATE_TYPE {
                    Self::ClientCertificateType(types)
                } else {
                    Self::ServerCertificateType(types)
                }
            }
            ExtensionType::EXTENDED_MASTER_SECRET => Self::ExtendedMasterSecret,
            ExtensionType::CONNECTION_ID => {
                Self::ConnectionId(r.vec8(0, MAX_CID, "connection_id")?)
            }
            ExtensionType::RENEGOTIATION_INFO => {
                Self::RenegotiationInfo(r.vec8(0, 255, "renegotiation_info")?)
            }
            _ => return Ok(Self::Unknown(t, data)),
        };
        r.finish(match t {
            ExtensionType::EXTENDED_MASTER_SECRET => "extended_master_secret",
            _ => "extension data",
        })?;
        Ok(e)
    }

    pub fn extension_type(&self) -> ExtensionType {
        match self {
            Self::SupportedGroups(_) => ExtensionType::SUPPORTED_GROUPS,
            Self::EcPointFormats(_) => ExtensionType::EC_POINT_FORMATS,
            Self::SignatureAlgorithms(_) => ExtensionType::SIGNATURE_ALGORITHMS,
            Self::ClientCertificateType(_) => ExtensionType::CLIENT_CERTIFICATE_TYPE,
            Self::ServerCertificateType(_) => ExtensionType::SERVER_CERTIFICATE_TYPE,
            Self::ExtendedMasterSecret => ExtensionType::EXTENDED_MASTER_SECRET,
            Self::ConnectionId(_) => ExtensionType::CONNECTION_ID,
            Self::RenegotiationInfo(_) => ExtensionType::RENEGOTIATION_INFO,
            Self::Unknown(t, _) => *t,
        }
    }

    /// Writes type, length and body.
    pub fn encode(&self, w: &mut Writer<'_>) -> Result<(), Error> {
        w.u16(self.extension_type().0)?;
        let at = w.reserve_u16()?;
        match self {
            Self::SupportedGroups(l) | Self::SignatureAlgorithms(l) => w.vec16(l.0)?,
            Self::EcPointFormats(f) => w.vec8(f)?,
            Self::ClientCertificateType(t) | Self::ServerCertificateType(t) => match t {
                CertificateTypes::Offered(list) => w.vec8(list)?,
                CertificateTypes::Chosen(c) => w.u8(c.0)?,
            },
            Self::ExtendedMasterSecret => {}
            Self::ConnectionId(cid) => w.vec8(cid)?,
            Self::RenegotiationInfo(rc) => w.vec8(rc)?,
            Self::Unknown(_, d) => w.bytes(d)?,
        }
        w.fill_u16(at)
    }
}

/// Writes `list` as the body of a hello's extensions field (without its length prefix).
pub fn encode_all(list: &[Extension<'_>], w: &mut Writer<'_>) -> Result<(), Error> {
    list.iter().try_for_each(|e| e.encode(w))
}

/// The one point format Sigil uses (RFC 8422 §5.1.2).
pub const UNCOMPRESSED: &[u8] = &[EcPointFormat::UNCOMPRESSED.0];
/// secp256r1, the one group Sigil offers (RFC 7925 §4.3.1).
pub const P256_ONLY: U16List<'static> = U16List(&NamedGroup::SECP256R1.0.to_be_bytes());
/// The signature schemes Sigil offers and accepts, in preference order.
pub const SCHEMES: [SignatureScheme; 2] = [
    SignatureScheme::ECDSA_SECP256R1_SHA256,
    SignatureScheme::ED25519,
];
const SCHEME_BYTES: [u8; 4] = {
    let a = SCHEMES[0].0.to_be_bytes();
    let b = SCHEMES[1].0.to_be_bytes();
    [a[0], a[1], b[0], b[1]]
};
/// [`SCHEMES`] as a `signature_algorithms` list.
pub const OUR_SCHEMES: U16List<'static> = U16List(&SCHEME_BYTES);
#[cfg(feature = "rsa")]
const RSA_SCHEME_BYTES: [u8; 2] = SignatureScheme::RSA_PKCS1_SHA256.0.to_be_bytes();
/// rsa_pkcs1_sha256 alone, as a client with RSA certificates offers it (feature `rsa`).
#[cfg(feature = "rsa")]
pub const RSA_SCHEMES: U16List<'static> = U16List(&RSA_SCHEME_BYTES);
/// The RawPublicKey certificate type alone, as a ClientHello offers it.
pub const RPK_ONLY: CertificateTypes<'static> =
    CertificateTypes::Offered(&[CertificateType::RAW_PUBLIC_KEY.0]);

/// What a hello's extensions say, decoded once (parse, don't validate): every known
/// extension at most once (duplicates are refused by [`Extensions::parse`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HelloExtensions<'a> {
    pub extended_master_secret: bool,
    pub renegotiation_info: Option<&'a [u8]>,
    pub supported_groups: Option<U16List<'a>>,
    pub ec_point_formats: Option<&'a [u8]>,
    pub signature_algorithms: Option<U16List<'a>>,
    pub client_certificate_type: Option<CertificateTypes<'a>>,
    pub server_certificate_type: Option<CertificateTypes<'a>>,
    pub connection_id: Option<&'a [u8]>,
}

impl<'a> HelloExtensions<'a> {
    pub fn decode(ext: Extensions<'a>, hello: Hello) -> Result<Self, Error> {
        let mut out = Self::default();
        for (t, d) in ext.iter() {
            match Extension::decode(t, d, hello)? {
                Extension::SupportedGroups(l) => out.supported_groups = Some(l),
                Extension::EcPointFormats(f) => out.ec_point_formats = Some(f),
                Extension::SignatureAlgorithms(l) => out.signature_algorithms = Some(l),
                Extension::ClientCertificateType(c) => out.client_certificate_type = Some(c),
                Extension::ServerCertificateType(c) => out.server_certificate_type = Some(c),
                Extension::ExtendedMasterSecret => out.extended_master_secret = true,
                Extension::ConnectionId(c) => out.connection_id = Some(c),
                Extension::RenegotiationInfo(r) => out.renegotiation_info = Some(r),
                Extension::Unknown(..) => {}
            }
        }
        Ok(out)
    }

    /// RFC 5746: the peer must signal secure renegotiation (the extension with an empty
    /// renegotiated_connection, or the SCSV in a ClientHello); any non-empty value would be a
    /// renegotiation, which Sigil refuses.
    pub fn check_renegotiation_info(&self, scsv: bool) -> Result<(), Error> {
        match self.renegotiation_info {
            Some([]) => Ok(()),
            Some(_) => Err(Error::Renegotiation),
            None if scsv => Ok(()),
            None => Err(Error::Renegotiation),
        }
    }

    /// Whether ECDHE on secp256r1 is allowed (absent supported_groups means any, RFC 8422 §4).
    pub fn offers_p256(&self) -> bool {
        self.supported_groups
            .is_none_or(|g| g.iter().any(|c| c == NamedGroup::SECP256R1.0))
    }

    /// Whether signature_algorithms allows `scheme` (absent: the SHA-1 defaults, which Sigil
    /// does not use, so only ECDSA with SHA-256 is assumed, RFC 5246 §7.4.1.4.1).
    pub fn offers_scheme(&self, scheme: SignatureScheme) -> bool {
        match self.signature_algorithms {
            None => scheme == SignatureScheme::ECDSA_SECP256R1_SHA256,
            Some(l) => l.iter().any(|c| c == scheme.0),
        }
    }
}
