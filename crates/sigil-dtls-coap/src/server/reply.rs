//! The endpoint's answers: writing a reply with the request's token, and the answer kept for
//! a retransmission of the same request (RFC 7252 §4.5).

use crate::{id_text, MAX_DATAGRAM, MAX_ID_LEN, PATH};
use sigil_coap::exchange::dedup::{Dedup, Latest};
use sigil_coap::exchange::Token;
use sigil_coap::message::option;
use sigil_coap::{BlockOption, Code, Message, MessageBuilder, MessageType, TransmissionParameters};
use sigil_time::Instant;

/// What a retransmission repeats besides the message ID: the request's token and length (a
/// different request under the same message ID, forged from the peer's address, gets no
/// cached answer). A length over 65,535 bytes, which no UDP datagram has, counts as 65,535.
pub(super) type Key = (Token, u16);

/// A session's received-message deduplication, the message core's rules (RFC 7252 §4.5) over
/// the store of one: its latest request and the answer sent to it, for a retransmission. The
/// entry expires EXCHANGE_LIFETIME (247 s by default) after the request arrived, or when the
/// next request takes its place.
pub(super) type Answers = Dedup<Key, Latest<Key, MAX_DATAGRAM>>;

pub(super) fn answers() -> Answers {
    Dedup::with_store(&TransmissionParameters::default(), Latest::new())
}

/// The key of `req`, a request of `len` bytes.
pub(super) fn key(req: &Message<'_>, len: usize) -> Key {
    (
        Token::new(req.token).unwrap_or_default(),
        u16::try_from(len).unwrap_or(u16::MAX),
    )
}

/// A response to write: code, options from the request, payload.
pub(super) struct Reply<'p> {
    pub(super) code: Code,
    pub(super) location: Option<u32>,
    pub(super) block2: Option<BlockOption>,
    pub(super) block1: Option<BlockOption>,
    pub(super) payload: &'p [u8],
}

impl<'p> Reply<'p> {
    pub(super) const fn code(code: Code) -> Self {
        Self {
            code,
            location: None,
            block2: None,
            block1: None,
            payload: &[],
        }
    }
}

pub(super) fn write_reply(req: &Message<'_>, r: &Reply<'_>, out: &mut [u8]) -> Option<usize> {
    let mut m = MessageBuilder::new(
        out,
        MessageType::Acknowledgement,
        r.code,
        req.message_id,
        req.token,
    )
    .ok()?;
    if let Some(id) = r.location {
        let mut b = [0u8; MAX_ID_LEN];
        m.option(option::LOCATION_PATH, PATH.as_bytes()).ok()?;
        m.option(option::LOCATION_PATH, id_text(id, &mut b).as_bytes())
            .ok()?;
    }
    if let Some(b) = r.block2 {
        let (v, n) = b.encode().ok()?;
        m.option(option::BLOCK2, &v[..n]).ok()?;
    }
    if let Some(b) = r.block1 {
        let (v, n) = b.encode().ok()?;
        m.option(option::BLOCK1, &v[..n]).ok()?;
    }
    m.finish_with_payload(r.payload).ok()
}

/// Writes the reply to `req` (a new request of `request_len` bytes, received at `now`) and
/// keeps it for a retransmission of the same request.
pub(super) fn cache(
    d: &mut Answers,
    now: Instant,
    req: &Message<'_>,
    request_len: usize,
    reply: &Reply<'_>,
    out: &mut [u8],
) -> Option<usize> {
    let k = key(req, request_len);
    d.receive(k, req.message_id, now);
    let room = out.len().min(MAX_DATAGRAM);
    let n = write_reply(req, reply, &mut out[..room])?;
    d.answered(k, req.message_id, &out[..n]);
    Some(n)
}
