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
        }
    }
}

impl core::error::Error for Error {}
