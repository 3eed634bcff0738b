//! The message core's state machines (RFC 7252 §4, RFC 7641), sans-IO and without
//! allocation: the caller passes time and randomness in and sends what comes out.
//!
//! - [`blockwise`]: block-wise transfer state (RFC 7959): a body sent in Block1 blocks, a
//!   body received in blocks (Block1 at a server, Block2 at a client), and the Block2 block a
//!   request gets.
//! - [`client`]: the requests a client has outstanding toward one peer (token and message ID
//!   matching, Confirmable retransmission, NSTART, separate responses, acknowledging
//!   Confirmable responses and rejecting what nobody waits for).
//! - [`dedup`]: a server endpoint's memory of received message IDs and the answers sent to
//!   them (§4.5), with a cap per peer and in total.
//! - [`observe`]: Observe (RFC 7641): the server's table of observers with its caps, the
//!   notification sequence numbers, Confirmable notifications and their retransmission, and the
//!   client's ordering rule for the notifications it receives (§3.4).
//! - [`Token`]: a token (RFC 7252 §5.3.1) held inline.

pub mod blockwise;
pub mod client;
pub mod dedup;
pub mod observe;

/// A CoAP token (0 to 8 bytes, RFC 7252 §5.3.1), held inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Token {
    len: u8,
    bytes: [u8; 8],
}

impl Token {
    /// `None` for more than 8 bytes.
    pub fn new(bytes: &[u8]) -> Option<Self> {
        let mut t = Self {
            len: u8::try_from(bytes.len()).ok().filter(|n| *n <= 8)?,
            bytes: [0; 8],
        };
        t.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(t)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl core::fmt::Debug for Token {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}
