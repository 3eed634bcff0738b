//! The error codes: one C enum for the whole library.

use sigil_device::DeviceError;
use sigil_identity::IdentityError;
use sigil_objects::ReadingError;

/// What a call did. `SIGIL_OK` is zero; every error is positive.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sigil_status {
    /// Success.
    SIGIL_OK = 0,
    /// A required pointer argument was NULL. Nothing was done.
    SIGIL_ERR_NULL = 1,
    /// An output buffer is smaller than the documented minimum. Nothing was written.
    SIGIL_ERR_SHORT_BUFFER = 2,
    /// An input length is out of range: a key of the wrong length for its algorithm, an
    /// identity that is not 16 bytes, other information over `SIGIL_MAX_OTHER_INFO`, too
    /// many group keys, a state size smaller than the state struct, an empty input.
    SIGIL_ERR_BAD_LENGTH = 3,
    /// An argument's value is not one the function accepts: an unknown algorithm or format,
    /// text that is not UTF-8 or not hex, an unknown label form.
    SIGIL_ERR_BAD_ARGUMENT = 4,
    /// The device state was not booted by `sigil_device_boot` (or was ended by
    /// `sigil_device_end`); or the CryptoDiet node was not initialised by
    /// `sigil_diet_node_init` (or was ended by `sigil_diet_node_end`).
    SIGIL_ERR_NOT_BOOTED = 5,
    /// A storage callback failed, or returned a record of the wrong size. Nothing was sent.
    SIGIL_ERR_STORAGE = 6,
    /// The randomness callback failed.
    SIGIL_ERR_RNG = 7,
    /// The device holds no registration yet: keep feeding it time and datagrams.
    SIGIL_ERR_NOT_REGISTERED = 8,
    /// A Confirmable exchange is in flight (RFC 7252 §4.7, NSTART = 1), or a refused reading
    /// waits to be published again: try after the next event.
    SIGIL_ERR_BUSY = 9,
    /// The device used up its sequence numbers: it needs a new identity (factory reset).
    SIGIL_ERR_SEQUENCE_EXHAUSTED = 10,
    /// The reading or registration does not fit the device's fixed buffers.
    SIGIL_ERR_TOO_LARGE = 11,
    /// Encoding or signing failed.
    SIGIL_ERR_ENCODING = 12,
    /// The configuration is invalid (e.g. low-bits sequence numbers with JWS, a lifetime of 0,
    /// a duplicate key in a kit).
    SIGIL_ERR_CONFIG = 13,
    /// The key bytes do not encode a valid key of the algorithm.
    SIGIL_ERR_INVALID_KEY = 14,
    /// A signed reading does not parse (envelope, headers or payload).
    SIGIL_ERR_MALFORMED = 15,
    /// The reading's `kid` is not the identity given for its key (RFC 8387 §7 step 3).
    SIGIL_ERR_KID_MISMATCH = 16,
    /// The signature does not verify over the bytes received, or the reading's algorithm is
    /// not the key's.
    SIGIL_ERR_BAD_SIGNATURE = 17,
    /// The full sequence number given does not match the one the reading carries.
    SIGIL_ERR_SEQUENCE_MISMATCH = 18,
    /// This build of the library does not include the algorithm or format asked for.
    SIGIL_ERR_UNSUPPORTED = 19,
    /// The CryptoDiet neighbour has no keys yet (its hello has not arrived): keep feeding
    /// the node datagrams and time.
    SIGIL_ERR_NO_SESSION = 20,
    /// The CryptoDiet node's neighbour table is full (`SIGIL_DIET_MAX_NEIGHBOURS`).
    SIGIL_ERR_TABLE_FULL = 21,
    /// The DTLS client state was not connected by `sigil_dtls_connect` (or was ended by
    /// `sigil_dtls_end`).
    SIGIL_ERR_DTLS_NOT_CONNECTED = 32,
    /// The DTLS handshake has not completed (or the connection already ended): application
    /// data cannot be sent yet.
    SIGIL_ERR_DTLS_NOT_ESTABLISHED = 33,
    /// The DTLS connection failed or was closed: a fatal alert sent or received, close_notify,
    /// or the handshake timed out (`sigil_dtls_get_info` says which). Connect again.
    SIGIL_ERR_DTLS_FAILED = 34,
}

use sigil_status::*;

impl From<DeviceError> for sigil_status {
    fn from(e: DeviceError) -> Self {
        match e {
            DeviceError::NotRegistered => SIGIL_ERR_NOT_REGISTERED,
            DeviceError::Busy => SIGIL_ERR_BUSY,
            DeviceError::Storage => SIGIL_ERR_STORAGE,
            DeviceError::SequenceExhausted => SIGIL_ERR_SEQUENCE_EXHAUSTED,
            DeviceError::TooLarge => SIGIL_ERR_TOO_LARGE,
            DeviceError::Encoding => SIGIL_ERR_ENCODING,
            DeviceError::Config => SIGIL_ERR_CONFIG,
        }
    }
}

impl From<IdentityError> for sigil_status {
    fn from(e: IdentityError) -> Self {
        match e {
            IdentityError::GroupSize | IdentityError::OtherTooLong => SIGIL_ERR_BAD_LENGTH,
            IdentityError::DuplicateKey => SIGIL_ERR_CONFIG,
            IdentityError::NotHex => SIGIL_ERR_BAD_ARGUMENT,
        }
    }
}

impl From<sigil_crypto::CryptoError> for sigil_status {
    fn from(e: sigil_crypto::CryptoError) -> Self {
        use sigil_crypto::CryptoError as E;
        match e {
            E::KeyLength => SIGIL_ERR_BAD_LENGTH,
            E::InvalidKey | E::WeakSharedSecret => SIGIL_ERR_INVALID_KEY,
            E::SignatureLength | E::BadSignature | E::BadTag => SIGIL_ERR_BAD_SIGNATURE,
            E::Rng => SIGIL_ERR_RNG,
            E::Unsupported => SIGIL_ERR_UNSUPPORTED,
        }
    }
}

impl From<ReadingError> for sigil_status {
    fn from(e: ReadingError) -> Self {
        use ReadingError as E;
        match e {
            E::Cose(_) | E::Jws(_) | E::Senml(_) | E::BadKid | E::UnprotectedKid => {
                SIGIL_ERR_MALFORMED
            }
            E::MissingSequence | E::UnknownAlgorithm => SIGIL_ERR_MALFORMED,
            E::AlgorithmMismatch | E::BadSignature | E::BadTag => SIGIL_ERR_BAD_SIGNATURE,
            E::KidMismatch => SIGIL_ERR_KID_MISMATCH,
            E::SequenceMismatch => SIGIL_ERR_SEQUENCE_MISMATCH,
            E::LsbNotSupported => SIGIL_ERR_CONFIG,
            E::Crypto(c) => c.into(),
            E::BufferTooSmall => SIGIL_ERR_SHORT_BUFFER,
        }
    }
}
