use crate::wire::AlertDescription;
use core::fmt;

/// Everything that can go wrong in the DTLS layer. Each variant names what the peer (or the
/// caller) did; [`Error::alert`] is the one place that maps them to alerts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// A field is truncated, overlong, or has trailing bytes (names the field).
    Decode(&'static str),
    /// The record's version is not DTLS 1.0 or 1.2.
    BadRecordVersion(u16),
    /// The record is longer than 2^14 + 2048 bytes (RFC 6347 §4.1, RFC 5246 §6.2.3).
    RecordOverflow,
    /// The record fails authentication.
    BadRecordMac,
    /// The record's sequence number was seen before or is left of the window (§4.1.2.6).
    Replayed,
    /// A record of an epoch this side has no keys for.
    UnknownEpoch(u16),
    /// A handshake message is larger than this side's reassembly buffer.
    MessageTooLarge { length: u32, capacity: usize },
    /// A fragment whose offset and length lie outside its message (§4.2.2).
    FragmentOutOfRange,
    /// A zero-length fragment of a non-empty message (CVE-2022-29190's class).
    ZeroLengthFragment,
    /// A fragment whose type, length or message_seq differ from the message being reassembled.
    FragmentMismatch,
    /// Overlapping fragments that disagree on the bytes they share.
    FragmentConflict,
    /// More disjoint fragments than the reassembler tracks.
    TooFragmented,
    /// The cipher-suite list has an odd length (CVE-2021-42143's class).
    OddCipherSuiteList,
    /// The same extension appears twice (RFC 5246 §7.4.1.4).
    DuplicateExtension(u16),
    /// The compression methods do not offer `null` (RFC 5246 §7.4.1.2).
    NoNullCompression,
    /// The peer offered or chose a protocol version other than DTLS 1.2.
    UnsupportedVersion(u16),
    /// No cipher suite in common.
    NoCommonCipherSuite,
    /// Out of sequence numbers in this epoch (2^48): the connection must be renegotiated anew.
    SequenceExhausted,
    /// An output buffer supplied by the caller is too small.
    BufferTooSmall,
    /// The crypto provider refused an operation.
    Crypto(sigil_crypto::CryptoError),
    /// The peer's Finished does not match the handshake this side saw.
    BadFinished,
    /// The peer did not negotiate the extended master secret (RFC 7627), which Sigil requires.
    MissingExtendedMasterSecret,
    /// The peer asked to renegotiate, or did not signal secure renegotiation (RFC 5746).
    Renegotiation,
    /// A record or message this state does not expect (names it).
    UnexpectedMessage(&'static str),
    /// A handshake message of this type is not expected now.
    UnexpectedHandshake(u8),
    /// A field has a value this side must refuse (names it).
    IllegalParameter(&'static str),
    /// The server knows no key for the client's PSK identity.
    UnknownPskIdentity,
    /// The peer sent this fatal alert (or close_notify).
    PeerAlert(u8),
    /// The flight was retransmitted the configured number of times without an answer.
    HandshakeTimeout,
    /// Application data before the handshake completed.
    NotEstablished,
    /// The peer's key is of a kind Sigil does not accept (not P-256 or Ed25519 in canonical
    /// SubjectPublicKeyInfo form).
    UnsupportedKey,
    /// The peer's raw public key is not on the trusted list (its identity is not provisioned).
    UntrustedKey,
    /// Static ECDH: the server's key is not a P-256 key, so it cannot be the key-agreement
    /// key the suite needs (RFC 4492 §2.1).
    StaticKeyNotP256,
    /// The peer's certificate key does not fit the negotiated suite: an RSA suite needs an
    /// RSA key, the ECDSA suites a P-256 or Ed25519 one.
    KeyNotForSuite,
    /// A handshake signature (ServerKeyExchange, CertificateVerify) does not verify.
    BadSignature,
    /// The server asked for a client key this client does not have, or the client sent none
    /// where one is required.
    MissingClientKey,
    /// A certificate is malformed or breaks the profile (names what).
    BadCertificate(&'static str),
    /// A certificate of a kind Sigil does not accept (version, algorithm, critical extension).
    UnsupportedCertificate,
    /// A certificate on the path is not yet or no longer valid at the caller's time.
    CertificateExpired,
    /// The path does not lead to a configured trust anchor.
    UnknownCa,
    /// A ChangeCipherSpec where the handshake does not expect one: never acted on (the
    /// CVE-2017-7243 class), and dropped rather than fatal, since over a lossy link it may
    /// simply have overtaken the handshake messages before it (the peer retransmits).
    UnexpectedChangeCipherSpec,
    /// A record anyone could have sent where only the peer's protected records count: a
    /// plaintext (epoch-0) record other than a retransmitted handshake message once the peer
    /// protects its records, or a record too long to be authenticated here (names what).
    /// Dropped, never fatal, so a forged datagram cannot end the connection.
    Unauthenticated(&'static str),
    /// Protected application data before the peer's Finished verified (a record that
    /// overtook the Finished): dropped, never delivered (RFC 6347 §4.1 lets a side discard
    /// records it cannot use yet).
    EarlyApplicationData,
    /// The next record would use a sequence number at or beyond the reservation last
    /// persisted ([`crate::saved`]): persist a new one first ([`crate::Traffic::save`], then
    /// [`crate::Traffic::persisted`]). Nothing was sent, the connection stays usable.
    ReservationExhausted,
}

impl Error {
    /// The fatal alert this error warrants (RFC 5246 §7.2.2), or `None` when the record is
    /// to be dropped silently (RFC 6347 §4.1.2.7: invalid records are discarded).
    pub fn alert(&self) -> Option<AlertDescription> {
        Some(match self {
            Self::BadRecordMac
            | Self::Replayed
            | Self::UnknownEpoch(_)
            | Self::BadRecordVersion(_) => return None,
            Self::Decode(_)
            | Self::FragmentOutOfRange
            | Self::ZeroLengthFragment
            | Self::OddCipherSuiteList => AlertDescription::DECODE_ERROR,
            Self::RecordOverflow => AlertDescription::RECORD_OVERFLOW,
            Self::MessageTooLarge { .. } | Self::TooFragmented => AlertDescription::INTERNAL_ERROR,
            Self::FragmentMismatch | Self::FragmentConflict | Self::DuplicateExtension(_) => {
                AlertDescription::ILLEGAL_PARAMETER
            }
            Self::NoNullCompression => AlertDescription::ILLEGAL_PARAMETER,
            Self::UnsupportedVersion(_) => AlertDescription::PROTOCOL_VERSION,
            Self::NoCommonCipherSuite => AlertDescription::HANDSHAKE_FAILURE,
            Self::SequenceExhausted | Self::BufferTooSmall | Self::Crypto(_) => {
                AlertDescription::INTERNAL_ERROR
            }
            Self::BadFinished => AlertDescription::DECRYPT_ERROR,
            Self::MissingExtendedMasterSecret | Self::Renegotiation => {
                AlertDescription::HANDSHAKE_FAILURE
            }
            Self::UnexpectedMessage(_) | Self::UnexpectedHandshake(_) => {
                AlertDescription::UNEXPECTED_MESSAGE
            }
            Self::IllegalParameter(_) => AlertDescription::ILLEGAL_PARAMETER,
            Self::UnknownPskIdentity => AlertDescription::UNKNOWN_PSK_IDENTITY,
            Self::PeerAlert(_)
            | Self::HandshakeTimeout
            | Self::NotEstablished
            | Self::ReservationExhausted => return None,
            Self::UnsupportedKey => AlertDescription::UNSUPPORTED_CERTIFICATE,
            Self::UntrustedKey => AlertDescription::CERTIFICATE_UNKNOWN,
            Self::StaticKeyNotP256 => AlertDescription::UNSUPPORTED_CERTIFICATE,
            Self::KeyNotForSuite => AlertDescription::UNSUPPORTED_CERTIFICATE,
            Self::BadSignature => AlertDescription::DECRYPT_ERROR,
            Self::MissingClientKey => AlertDescription::HANDSHAKE_FAILURE,
            Self::BadCertificate(_) => AlertDescription::BAD_CERTIFICATE,
            Self::UnsupportedCertificate => AlertDescription::UNSUPPORTED_CERTIFICATE,
            Self::CertificateExpired => AlertDescription::CERTIFICATE_EXPIRED,
            Self::UnknownCa => AlertDescription::UNKNOWN_CA,
            Self::UnexpectedChangeCipherSpec
            | Self::Unauthenticated(_)
            | Self::EarlyApplicationData => return None,
        })
    }
}

impl From<sigil_crypto::CryptoError> for Error {
    fn from(e: sigil_crypto::CryptoError) -> Self {
        Error::Crypto(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(what) => write!(f, "malformed {what}"),
            Self::BadRecordVersion(v) => write!(f, "record version {v:#06x} is not DTLS"),
            Self::RecordOverflow => f.write_str("record longer than 2^14 + 2048 bytes"),
            Self::BadRecordMac => f.write_str("record fails authentication"),
            Self::Replayed => f.write_str("record sequence number replayed or too old"),
            Self::UnknownEpoch(e) => write!(f, "record of unknown epoch {e}"),
            Self::MessageTooLarge { length, capacity } => {
                write!(
                    f,
                    "handshake message of {length} bytes exceeds the {capacity}-byte buffer"
                )
            }
            Self::FragmentOutOfRange => f.write_str("fragment lies outside its message"),
            Self::ZeroLengthFragment => f.write_str("zero-length fragment of a non-empty message"),
            Self::FragmentMismatch => {
                f.write_str("fragment does not belong to the message in reassembly")
            }
            Self::FragmentConflict => f.write_str("overlapping fragments disagree"),
            Self::TooFragmented => f.write_str("too many disjoint fragments"),
            Self::OddCipherSuiteList => f.write_str("cipher-suite list of odd length"),
            Self::DuplicateExtension(t) => write!(f, "extension {t} appears twice"),
            Self::NoNullCompression => f.write_str("null compression not offered"),
            Self::UnsupportedVersion(v) => write!(f, "protocol version {v:#06x} is not DTLS 1.2"),
            Self::NoCommonCipherSuite => f.write_str("no cipher suite in common"),
            Self::SequenceExhausted => f.write_str("record sequence numbers exhausted"),
            Self::BufferTooSmall => f.write_str("output buffer too small"),
            Self::Crypto(e) => write!(f, "crypto: {e}"),
            Self::BadFinished => f.write_str("peer's Finished does not verify"),
            Self::MissingExtendedMasterSecret => {
                f.write_str("extended master secret not negotiated")
            }
            Self::Renegotiation => {
                f.write_str("renegotiation requested or not signalled as secure")
            }
            Self::UnexpectedMessage(what) => write!(f, "unexpected {what}"),
            Self::UnexpectedHandshake(t) => write!(f, "unexpected handshake message type {t}"),
            Self::IllegalParameter(what) => write!(f, "illegal {what}"),
            Self::UnknownPskIdentity => f.write_str("unknown PSK identity"),
            Self::PeerAlert(d) => match AlertDescription(*d).name() {
                Some(name) => write!(f, "peer sent alert {d} ({name})"),
                None => write!(f, "peer sent alert {d}"),
            },
            Self::HandshakeTimeout => f.write_str("handshake timed out"),
            Self::NotEstablished => f.write_str("connection not established"),
            Self::UnsupportedKey => {
                f.write_str("peer key is not a P-256 or Ed25519 SubjectPublicKeyInfo")
            }
            Self::UntrustedKey => f.write_str("peer key's identity is not trusted"),
            Self::KeyNotForSuite => {
                f.write_str("peer's certificate key does not fit the negotiated cipher suite")
            }
            Self::StaticKeyNotP256 => {
                f.write_str("static ECDH needs the server's key to be a P-256 key")
            }
            Self::BadSignature => f.write_str("handshake signature does not verify"),
            Self::MissingClientKey => {
                f.write_str("client authentication required but no client key")
            }
            Self::BadCertificate(what) => write!(f, "bad certificate: {what}"),
            Self::UnsupportedCertificate => f.write_str("unsupported certificate"),
            Self::CertificateExpired => f.write_str("certificate not valid at this time"),
            Self::UnknownCa => f.write_str("certificate path does not reach a trust anchor"),
            Self::UnexpectedChangeCipherSpec => {
                f.write_str("ChangeCipherSpec out of order (dropped)")
            }
            Self::Unauthenticated(what) => write!(f, "unauthenticated {what} (dropped)"),
            Self::EarlyApplicationData => {
                f.write_str("application data before the peer's Finished (dropped)")
            }
            Self::ReservationExhausted => {
                f.write_str("record sequence reservation used up: persist a new one first")
            }
        }
    }
}

impl core::error::Error for Error {}
