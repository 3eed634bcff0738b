//! The two messages (docs/wire-formats.md, "CryptoDiet node messages"). Parsing checks every
//! length before any accessor runs, so no accessor can panic; both views borrow the datagram.
//!
//! - hello: `0x01 | flags(1) | epoch(4) | ecdh_pub(65) | sig_pub(65) | sig(64)`, 200 bytes;
//!   `sig` is ECDSA P-256 over the 136 bytes before it. Flag bit 0 (`ACK`): the sender holds
//!   the receiver's hello of its current epoch, so it need not be answered. Other bits are 0.
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
/// Bytes covered by a hello's signature.
pub const HELLO_SIGNED_LEN: usize = 1 + 1 + 4 + 2 * PUBLIC_KEY_LEN;
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
        if b[0] != HELLO || b[1] & !FLAG_ACK != 0 || b[6] != 0x04 || b[6 + PUBLIC_KEY_LEN] != 0x04 {
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

    pub fn ecdh_public(&self) -> &'a [u8; PUBLIC_KEY_LEN] {
        self.0[6..6 + PUBLIC_KEY_LEN]
            .try_into()
            .expect("length checked in parse")
    }

    pub fn signing_public(&self) -> &'a [u8; PUBLIC_KEY_LEN] {
        self.0[6 + PUBLIC_KEY_LEN..HELLO_SIGNED_LEN]
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

/// Writes the signed part of a hello; the caller appends the signature.
pub(crate) fn emit_hello_body(
    flags: u8,
    epoch: u32,
    ecdh_pub: &[u8; PUBLIC_KEY_LEN],
    sig_pub: &[u8; PUBLIC_KEY_LEN],
    out: &mut [u8; HELLO_LEN],
) {
    out[0] = HELLO;
    out[1] = flags;
    out[2..6].copy_from_slice(&epoch.to_be_bytes());
    out[6..6 + PUBLIC_KEY_LEN].copy_from_slice(ecdh_pub);
    out[6 + PUBLIC_KEY_LEN..HELLO_SIGNED_LEN].copy_from_slice(sig_pub);
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
