//! DTLS and TLS registry values. Each is an open newtype over its wire value, so unknown values
//! stay representable; the constants name the ones Sigil knows, with their source.

macro_rules! registry {
    ($(#[$m:meta])* $name:ident($ty:ty) { $($(#[$cm:meta])* $c:ident = $v:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub $ty);
        impl $name {
            $($(#[$cm])* pub const $c: $name = $name($v);)*
        }
    };
}

registry! {
    /// TLS ContentType (IANA "TLS ContentType" registry; RFC 5246 §6.2.1, RFC 9146 §4).
    ContentType(u8) {
        CHANGE_CIPHER_SPEC = 20,
        ALERT = 21,
        HANDSHAKE = 22,
        APPLICATION_DATA = 23,
        /// `tls12_cid` (RFC 9146 §4): a record carrying a connection ID.
        TLS12_CID = 25,
    }
}

registry! {
    /// Protocol versions on the wire (RFC 6347 §4.1: DTLS 1.2 is {254, 253}).
    ProtocolVersion(u16) {
        DTLS_1_0 = 0xfeff,
        DTLS_1_2 = 0xfefd,
    }
}

registry! {
    /// HandshakeType (IANA "TLS HandshakeType"; RFC 5246 §7.4, RFC 6347 §4.3.2).
    HandshakeType(u8) {
        HELLO_REQUEST = 0,
        CLIENT_HELLO = 1,
        SERVER_HELLO = 2,
        HELLO_VERIFY_REQUEST = 3,
        CERTIFICATE = 11,
        SERVER_KEY_EXCHANGE = 12,
        CERTIFICATE_REQUEST = 13,
        SERVER_HELLO_DONE = 14,
        CERTIFICATE_VERIFY = 15,
        CLIENT_KEY_EXCHANGE = 16,
        FINISHED = 20,
    }
}

registry! {
    /// TLS cipher suites (IANA "TLS Cipher Suites").
    CipherSuite(u16) {
        /// RFC 6655 §4; mandatory for CoAP with pre-shared keys (RFC 7252 §9.1.3.1).
        TLS_PSK_WITH_AES_128_CCM_8 = 0xc0a8,
        /// RFC 7251 §2; mandatory for CoAP with raw public keys and certificates (RFC 7252 §9.1.3.2).
        TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 = 0xc0ae,
        /// RFC 5289 §3.2.
        TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 = 0xc02b,
        /// RFC 5289 §3.2 (feature `rsa`): ECDHE signed with an RSA key. IANA registers no
        /// ECDHE_RSA suite with CCM-8, so the RSA comparison uses this one.
        TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 = 0xc02f,
        /// RFC 6655 §3 (feature `rsa-kx`): RSA key transport, the client encrypting the
        /// premaster secret to the server's certificate key; no forward secrecy.
        TLS_RSA_WITH_AES_128_CCM_8 = 0xc0a0,
        /// RFC 8442 §3.
        TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256 = 0xd003,
        /// Static ECDH with the server's P-256 key, AES-128-CCM-8 (feature `static-ecdh`):
        /// the ECDH_ECDSA key exchange of RFC 4492 §2.1 with the record protection of
        /// RFC 7251. IANA registers no such suite (RFC 7251 defines only the ECDHE ones, and
        /// RFC 8422, which obsoletes RFC 4492, lists no static ECDH suite), so this is a value
        /// of the private-use range 0xFF00-0xFFFF (RFC 5246 §12, kept by RFC 8447),
        /// meaningful only between Sigil peers: 0xFFAE, after RFC 7251's 0xC0AE.
        PRIVATE_ECDH_ECDSA_WITH_AES_128_CCM_8 = 0xffae,
        /// RFC 5746 §3.3: signals secure renegotiation support in a ClientHello.
        TLS_EMPTY_RENEGOTIATION_INFO_SCSV = 0x00ff,
    }
}

registry! {
    /// AlertDescription (IANA "TLS Alerts"; RFC 5246 §7.2, RFC 4279 §2, RFC 5746).
    AlertDescription(u8) {
        CLOSE_NOTIFY = 0,
        UNEXPECTED_MESSAGE = 10,
        BAD_RECORD_MAC = 20,
        RECORD_OVERFLOW = 22,
        HANDSHAKE_FAILURE = 40,
        BAD_CERTIFICATE = 42,
        UNSUPPORTED_CERTIFICATE = 43,
        CERTIFICATE_EXPIRED = 45,
        CERTIFICATE_UNKNOWN = 46,
        ILLEGAL_PARAMETER = 47,
        UNKNOWN_CA = 48,
        DECODE_ERROR = 50,
        DECRYPT_ERROR = 51,
        PROTOCOL_VERSION = 70,
        INSUFFICIENT_SECURITY = 71,
        INTERNAL_ERROR = 80,
        NO_RENEGOTIATION = 100,
        UNSUPPORTED_EXTENSION = 110,
        UNKNOWN_PSK_IDENTITY = 115,
    }
}

impl AlertDescription {
    /// The registry name (RFC 5246 §7.2, RFC 4279 §2, RFC 5746), or `None` for a value Sigil
    /// does not know.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::CLOSE_NOTIFY => "close_notify",
            Self::UNEXPECTED_MESSAGE => "unexpected_message",
            Self::BAD_RECORD_MAC => "bad_record_mac",
            Self::RECORD_OVERFLOW => "record_overflow",
            Self::HANDSHAKE_FAILURE => "handshake_failure",
            Self::BAD_CERTIFICATE => "bad_certificate",
            Self::UNSUPPORTED_CERTIFICATE => "unsupported_certificate",
            Self::CERTIFICATE_EXPIRED => "certificate_expired",
            Self::CERTIFICATE_UNKNOWN => "certificate_unknown",
            Self::ILLEGAL_PARAMETER => "illegal_parameter",
            Self::UNKNOWN_CA => "unknown_ca",
            Self::DECODE_ERROR => "decode_error",
            Self::DECRYPT_ERROR => "decrypt_error",
            Self::PROTOCOL_VERSION => "protocol_version",
            Self::INSUFFICIENT_SECURITY => "insufficient_security",
            Self::INTERNAL_ERROR => "internal_error",
            Self::NO_RENEGOTIATION => "no_renegotiation",
            Self::UNSUPPORTED_EXTENSION => "unsupported_extension",
            Self::UNKNOWN_PSK_IDENTITY => "unknown_psk_identity",
            _ => return None,
        })
    }
}

registry! {
    /// AlertLevel (RFC 5246 §7.2).
    AlertLevel(u8) {
        WARNING = 1,
        FATAL = 2,
    }
}

registry! {
    /// ExtensionType (IANA "TLS ExtensionType Values").
    ExtensionType(u16) {
        /// RFC 8422 §5.1.1 (named `elliptic_curves` in RFC 4492).
        SUPPORTED_GROUPS = 10,
        /// RFC 8422 §5.1.2.
        EC_POINT_FORMATS = 11,
        /// RFC 5246 §7.4.1.4.1.
        SIGNATURE_ALGORITHMS = 13,
        /// RFC 7250 §3.
        CLIENT_CERTIFICATE_TYPE = 19,
        /// RFC 7250 §3.
        SERVER_CERTIFICATE_TYPE = 20,
        /// RFC 7627 §5.1.
        EXTENDED_MASTER_SECRET = 23,
        /// RFC 9146 §3.
        CONNECTION_ID = 54,
        /// RFC 5746 §3.2.
        RENEGOTIATION_INFO = 0xff01,
    }
}

registry! {
    /// NamedGroup (IANA "TLS Supported Groups"; RFC 8422 §5.1.1).
    NamedGroup(u16) {
        SECP256R1 = 23,
        X25519 = 29,
    }
}

registry! {
    /// SignatureScheme as TLS 1.2 encodes it: hash byte, signature byte (RFC 5246 §7.4.1.4.1;
    /// RFC 8422 §5.1.3 for Ed25519).
    SignatureScheme(u16) {
        ECDSA_SECP256R1_SHA256 = 0x0403,
        /// RSASSA-PKCS1-v1_5 with SHA-256 (`rsa_pkcs1_sha256`, RFC 5246 §7.4.1.4.1).
        RSA_PKCS1_SHA256 = 0x0401,
        ED25519 = 0x0807,
    }
}

registry! {
    /// CertificateType (IANA "TLS Certificate Types"; RFC 7250 §3, RFC 6091 §5).
    CertificateType(u8) {
        X509 = 0,
        RAW_PUBLIC_KEY = 2,
    }
}

registry! {
    /// ECPointFormat (IANA "TLS EC Point Formats"; RFC 8422 §5.1.2).
    EcPointFormat(u8) {
        UNCOMPRESSED = 0,
    }
}

registry! {
    /// ClientCertificateType of a CertificateRequest (IANA "TLS ClientCertificateType
    /// Identifiers"; RFC 8422 §5.5).
    ClientCertificateType(u8) {
        /// RFC 5246 §7.4.4.
        RSA_SIGN = 1,
        ECDSA_SIGN = 64,
    }
}
