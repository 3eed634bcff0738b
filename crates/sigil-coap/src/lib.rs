//! CoAP wire formats and endpoint rules for Sigil, sans-IO and `no_std`.
//!
//! - [`message`]: the message codec (RFC 7252 §3): any byte string parses to a [`Message`] or an
//!   [`Error`], never a panic; [`MessageBuilder`] writes into a caller-owned buffer.
//! - [`block`]: block-wise transfer options (RFC 7959).
//! - [`link`]: CoRE Link Format (RFC 6690), parser and serializer.
//! - [`exchange`]: the message core's state machines: requests, deduplication, block-wise
//!   transfer state, Observe (RFC 7641) for servers and clients.
//! - [`reliability`]: Confirmable retransmission timing and the protocol constants of RFC 7252
//!   §4.8, as pure functions of the time the caller passes in.
#![no_std]
#![forbid(unsafe_code)]

pub mod block;
pub mod exchange;
pub mod link;
pub mod message;
pub mod reliability;

pub use block::BlockOption;
pub use exchange::blockwise::{self, block2_of, BlockwiseError};
pub use message::{
    encode_uint, option, Code, ContentFormat, Error, Message, MessageBuilder, MessageType,
};
pub use reliability::{Retransmission, RetransmitDecision, TransmissionParameters};
