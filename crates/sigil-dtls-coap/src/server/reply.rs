//! The endpoint's answers: writing a reply with the request's token, and the answer kept for
//! a retransmission of the same request (RFC 7252 §4.5).

use crate::{id_text, MAX_DATAGRAM, MAX_ID_LEN, PATH};
use sigil_coap::message::option;
use sigil_coap::{BlockOption, Code, Message, MessageBuilder, MessageType};

pub(super) struct Cached {
    pub(super) mid: Option<u16>,
    /// The request's token and length: a retransmission repeats them (a different request
    /// under the same message ID from a forged address gets no cached answer).
    pub(super) token: [u8; 8],
    pub(super) token_len: usize,
    pub(super) request_len: usize,
    pub(super) bytes: [u8; MAX_DATAGRAM],
    pub(super) len: usize,
}

impl Cached {
    pub(super) const EMPTY: Self = Self {
        mid: None,
        token: [0; 8],
        token_len: 0,
        request_len: 0,
        bytes: [0; MAX_DATAGRAM],
        len: 0,
    };

    /// Whether `req` (of `len` bytes) repeats the request this answer is for.
    pub(super) fn answers(&self, req: &Message<'_>, len: usize) -> bool {
        self.mid == Some(req.message_id)
            && self.token[..self.token_len] == *req.token
            && self.request_len == len
    }
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

/// Writes the reply and keeps it for a retransmission of the same request (`request_len`
/// bytes).
pub(super) fn cache(
    c: &mut Cached,
    req: &Message<'_>,
    request_len: usize,
    reply: &Reply<'_>,
    out: &mut [u8],
) -> Option<usize> {
    let n = write_reply(req, reply, &mut c.bytes)?;
    c.len = n;
    c.mid = Some(req.message_id);
    c.token_len = req.token.len().min(c.token.len());
    c.token[..c.token_len].copy_from_slice(&req.token[..c.token_len]);
    c.request_len = request_len;
    out.get_mut(..n)?.copy_from_slice(&c.bytes[..n]);
    Some(n)
}
