//! The two messages (docs/wire-formats.md, "CryptoDiet node messages"). Parsing checks every
//! length before any accessor runs, so no accessor can panic; both views borrow the datagram.
//!
//! - hello: `0x01 | flags(1) | epoch(4) | nonce(8) | echo(8) | ecdh_pub(65) | sig_pub(65) |
//!   sig(64)`, 216 bytes; `sig` is ECDSA P-256 over the 152 bytes before it. `nonce` is the
//!   sender's challenge to the receiver's address, `echo` the receiver's latest nonce the
//!   sender holds (zeros for none): a hello echoing a fresh nonce proves its sender is live at
//!   the address the nonce went to. Flag bit 0 (`ACK`): the sender holds keys for the
//!   receiver's current run, so it need not be answered. Other bits are 0.
//! - data: `0x02 | seq(4) | ciphertext | tag(8) | sig(64)`, 77 bytes plus the plaintext; the
//!   first 5 bytes are the CCM associated data, `sig` is over everything before it.

use crate::ops::{PUBLIC_KEY_LEN, SIGNATURE_LEN, TAG_LEN};
use crate::Error;

/// Type byte of a hello.
pub const HELLO: u8 = 0x01;
/// Type byte of a data message.
pub const DATA: u8 = 0x02;
/// Hello flag: the sender already holds the receiver's hello.
pub const FLAG_ACK: u8 = 0x01;
/// A hello's challenge (and echo).
pub const NONCE_LEN: usize = 8;
/// Where the nonce, the echo and the two keys start in a hello.
const NONCE_AT: usize = 6;
const ECHO_AT: usize = NONCE_AT + NONCE_LEN;
const ECDH_AT: usize = ECHO_AT + NONCE_LEN;
const SIG_PUB_AT: usize = ECDH_AT + PUBLIC_KEY_LEN;
/// Bytes covered by a hello's signature.
pub const HELLO_SIGNED_LEN: usize = SIG_PUB_AT + PUBLIC_KEY_LEN;
/// A hello's length.
pub const HELLO_LEN: usize = HELLO_SIGNED_LEN + SIGNATURE_LEN;
/// The data header (type and sequence number), the CCM associated data.
pub const DATA_HEADER_LEN: usize = 1 + 4;
/// Bytes a data message adds to its plaintext.
pub const DATA_OVERHEAD: usize = DATA_HEADER_LEN + TAG_LEN + SIGNATURE_LEN;

/// A hello, checked for length, type and flags.
#[derive(Clone, Copy, Debug)]
pub struct Hello<'a>(&'a [u8; HELLO_LEN]);

impl<'a> Hello<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        let b: &[u8; HELLO_LEN] = bytes.try_into().map_err(|_| Error::Malformed)?;
        if b[0] != HELLO || b[1] & !FLAG_ACK != 0 || b[ECDH_AT] != 0x04 || b[SIG_PUB_AT] != 0x04 {
            return Err(Error::Malformed);
        }
        Ok(Self(b))
    }

    pub fn ack(&self) -> bool {
        self.0[1] & FLAG_ACK != 0
    }

    pub fn epoch(&self) -> u32 {
        u32::from_be_bytes([self.0[2], self.0[3], self.0[4], self.0[5]])
    }

    /// The sender's challenge.
    pub fn nonce(&self) -> [u8; NONCE_LEN] {
        self.0[NONCE_AT..ECHO_AT]
            .try_into()
            .expect("length checked in parse")
    }

    /// The receiver's nonce as the sender holds it (zeros for none).
    pub fn echo(&self) -> [u8; NONCE_LEN] {
        self.0[ECHO_AT..ECDH_AT]
            .try_into()
            .expect("length checked in parse")
    }

    pub fn ecdh_public(&self) -> &'a [u8; PUBLIC_KEY_LEN] {
        self.0[ECDH_AT..SIG_PUB_AT]
            .try_into()
            .expect("length checked in parse")
    }

    pub fn signing_public(&self) -> &'a [u8; PUBLIC_KEY_LEN] {
        self.0[SIG_PUB_AT..HELLO_SIGNED_LEN]
            .try_into()
            .expect("length checked in parse")
    }

    /// The bytes the signature covers.
    pub fn signed(&self) -> &'a [u8] {
        &self.0[..HELLO_SIGNED_LEN]
    }

    pub fn signature(&self) -> &'a [u8] {
        &self.0[HELLO_SIGNED_LEN..]
    }
}

/// The fields of a hello's signed part.
pub(crate) struct HelloBody<'k> {
    pub flags: u8,
    pub epoch: u32,
    pub nonce: [u8; NONCE_LEN],
    pub echo: [u8; NONCE_LEN],
    pub ecdh_pub: &'k [u8; PUBLIC_KEY_LEN],
    pub sig_pub: &'k [u8; PUBLIC_KEY_LEN],
}

/// Writes the signed part of a hello; the caller appends the signature.
pub(crate) fn emit_hello_body(h: &HelloBody<'_>, out: &mut [u8; HELLO_LEN]) {
    out[0] = HELLO;
    out[1] = h.flags;
    out[2..NONCE_AT].copy_from_slice(&h.epoch.to_be_bytes());
    out[NONCE_AT..ECHO_AT].copy_from_slice(&h.nonce);
    out[ECHO_AT..ECDH_AT].copy_from_slice(&h.echo);
    out[ECDH_AT..SIG_PUB_AT].copy_from_slice(h.ecdh_pub);
    out[SIG_PUB_AT..HELLO_SIGNED_LEN].copy_from_slice(h.sig_pub);
}

/// A data message, checked for type and minimum length.
#[derive(Clone, Copy, Debug)]
pub struct Data<'a>(&'a [u8]);

impl<'a> Data<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, Error> {
        if bytes.len() < DATA_OVERHEAD || bytes[0] != DATA {
            return Err(Error::Malformed);
        }
        Ok(Self(bytes))
    }

    pub fn seq(&self) -> u32 {
        u32::from_be_bytes([self.0[1], self.0[2], self.0[3], self.0[4]])
    }

    pub fn header(&self) -> &'a [u8] {
        &self.0[..DATA_HEADER_LEN]
    }

    pub fn ciphertext(&self) -> &'a [u8] {
        &self.0[DATA_HEADER_LEN..self.0.len() - TAG_LEN - SIGNATURE_LEN]
    }

    pub fn tag(&self) -> &'a [u8; TAG_LEN] {
        let end = self.0.len() - SIGNATURE_LEN;
        self.0[end - TAG_LEN..end]
            .try_into()
            .expect("length checked in parse")
    }

    /// The bytes the signature covers: header, ciphertext and tag.
    pub fn signed(&self) -> &'a [u8] {
        &self.0[..self.0.len() - SIGNATURE_LEN]
    }

    pub fn signature(&self) -> &'a [u8] {
        &self.0[self.0.len() - SIGNATURE_LEN..]
    }
}
