//! The CoAP message format (RFC 7252 §3).
//!
//! [`Message::parse`] validates the whole datagram once (header, token, every option header,
//! payload marker), so the accessors on a parsed message cannot fail or panic afterwards.

use core::fmt;

/// Errors from parsing or building a CoAP message. Each names what was wrong with the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// Fewer than the 4 header bytes.
    TooShort,
    /// Version field is not 1 (RFC 7252 §3: messages with unknown version are silently ignored).
    UnknownVersion(u8),
    /// Token length 9-15 is reserved (§3).
    ReservedTokenLength(u8),
    /// The datagram ends inside the token, an option header or an option value.
    Truncated,
    /// Option delta or length nibble 15 outside the payload marker (§3.1).
    ReservedOptionNibble,
    /// Option numbers past 65535.
    OptionNumberOverflow,
    /// A payload marker followed by a zero-length payload (§3: a format error).
    EmptyPayloadAfterMarker,
    /// An Empty message (code 0.00) with a token, options or payload (§4.1).
    NonEmptyEmptyMessage,
    /// The output buffer is too small for the message being built.
    BufferTooSmall,
    /// Options must be added in non-decreasing number order.
    OptionOrder,
    /// A token longer than 8 bytes was given to the builder.
    TokenTooLong,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort => f.write_str("datagram shorter than a CoAP header"),
            Self::UnknownVersion(v) => write!(f, "unknown CoAP version {v}"),
            Self::ReservedTokenLength(l) => write!(f, "reserved token length {l}"),
            Self::Truncated => f.write_str("datagram ends inside the token or an option"),
            Self::ReservedOptionNibble => f.write_str("reserved option delta or length 15"),
            Self::OptionNumberOverflow => f.write_str("option number above 65535"),
            Self::EmptyPayloadAfterMarker => f.write_str("payload marker without payload"),
            Self::NonEmptyEmptyMessage => {
                f.write_str("Empty message with token, options or payload")
            }
            Self::BufferTooSmall => f.write_str("output buffer too small"),
            Self::OptionOrder => f.write_str("options not in ascending order"),
            Self::TokenTooLong => f.write_str("token longer than 8 bytes"),
        }
    }
}

/// Message type (RFC 7252 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageType {
    Confirmable,
    NonConfirmable,
    Acknowledgement,
    Reset,
}

impl MessageType {
    fn from_bits(b: u8) -> Self {
        match b & 3 {
            0 => Self::Confirmable,
            1 => Self::NonConfirmable,
            2 => Self::Acknowledgement,
            _ => Self::Reset,
        }
    }
    fn bits(self) -> u8 {
        match self {
            Self::Confirmable => 0,
            Self::NonConfirmable => 1,
            Self::Acknowledgement => 2,
            Self::Reset => 3,
        }
    }
}

/// A method or response code, `class.detail` (RFC 7252 §12.1). Open: any value is representable.
/// The default is 0.00 (Empty).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Code(pub u8);

impl Code {
    pub const EMPTY: Code = Code(0);
    pub const GET: Code = Code(1);
    pub const POST: Code = Code(2);
    pub const PUT: Code = Code(3);
    pub const DELETE: Code = Code(4);
    pub const CREATED: Code = Code::new(2, 1);
    pub const DELETED: Code = Code::new(2, 2);
    pub const VALID: Code = Code::new(2, 3);
    pub const CHANGED: Code = Code::new(2, 4);
    pub const CONTENT: Code = Code::new(2, 5);
    pub const CONTINUE: Code = Code::new(2, 31);
    pub const BAD_REQUEST: Code = Code::new(4, 0);
    pub const UNAUTHORIZED: Code = Code::new(4, 1);
    pub const BAD_OPTION: Code = Code::new(4, 2);
    pub const FORBIDDEN: Code = Code::new(4, 3);
    pub const NOT_FOUND: Code = Code::new(4, 4);
    pub const METHOD_NOT_ALLOWED: Code = Code::new(4, 5);
    pub const NOT_ACCEPTABLE: Code = Code::new(4, 6);
    pub const REQUEST_ENTITY_INCOMPLETE: Code = Code::new(4, 8);
    pub const CONFLICT: Code = Code::new(4, 9);
    pub const PRECONDITION_FAILED: Code = Code::new(4, 12);
    pub const REQUEST_ENTITY_TOO_LARGE: Code = Code::new(4, 13);
    pub const UNSUPPORTED_CONTENT_FORMAT: Code = Code::new(4, 15);
    pub const INTERNAL_SERVER_ERROR: Code = Code::new(5, 0);
    pub const SERVICE_UNAVAILABLE: Code = Code::new(5, 3);

    pub const fn new(class: u8, detail: u8) -> Code {
        Code((class << 5) | (detail & 0x1f))
    }
    pub const fn class(self) -> u8 {
        self.0 >> 5
    }
    pub const fn detail(self) -> u8 {
        self.0 & 0x1f
    }
    pub const fn is_request(self) -> bool {
        self.class() == 0 && self.0 != 0
    }
    pub const fn is_response(self) -> bool {
        self.class() >= 2
    }
    pub const fn is_success(self) -> bool {
        self.class() == 2
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.class(), self.detail())
    }
}

impl fmt::Debug for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Code({self})")
    }
}

/// Option numbers used by Sigil (IANA "CoAP Option Numbers"; RFC 7252 §5.10, RFC 7641,
/// RFC 7959).
pub mod option {
    pub const IF_MATCH: u16 = 1;
    pub const URI_HOST: u16 = 3;
    pub const ETAG: u16 = 4;
    pub const IF_NONE_MATCH: u16 = 5;
    /// RFC 7641.
    pub const OBSERVE: u16 = 6;
    pub const URI_PORT: u16 = 7;
    pub const LOCATION_PATH: u16 = 8;
    pub const URI_PATH: u16 = 11;
    pub const CONTENT_FORMAT: u16 = 12;
    pub const MAX_AGE: u16 = 14;
    pub const URI_QUERY: u16 = 15;
    pub const ACCEPT: u16 = 17;
    pub const LOCATION_QUERY: u16 = 20;
    /// RFC 7959.
    pub const BLOCK2: u16 = 23;
    /// RFC 7959.
    pub const BLOCK1: u16 = 27;
    /// RFC 7959.
    pub const SIZE2: u16 = 28;
    pub const PROXY_URI: u16 = 35;
    pub const PROXY_SCHEME: u16 = 39;
    pub const SIZE1: u16 = 60;
    /// RFC 9175 §2.2: elective, not safe to forward, opaque of 1 to 40 bytes. A server asks
    /// for it with 4.01 Unauthorized to see that a client receives at its address (§2.4).
    pub const ECHO: u16 = 252;

    /// Critical options have an odd number (RFC 7252 §5.4.6).
    pub const fn is_critical(number: u16) -> bool {
        number & 1 == 1
    }

    /// The options this implementation understands; an unknown critical option in a request
    /// must be answered with 4.02 Bad Option (RFC 7252 §5.4.1).
    pub const fn is_known(number: u16) -> bool {
        matches!(
            number,
            IF_MATCH
                | URI_HOST
                | ETAG
                | IF_NONE_MATCH
                | OBSERVE
                | URI_PORT
                | LOCATION_PATH
                | URI_PATH
                | CONTENT_FORMAT
                | MAX_AGE
                | URI_QUERY
                | ACCEPT
                | LOCATION_QUERY
                | BLOCK2
                | BLOCK1
                | SIZE2
                | SIZE1
                | ECHO
        )
    }
}

/// Content-Format numbers (IANA "CoAP Content-Formats"). Open: unknown numbers are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContentFormat(pub u16);

impl ContentFormat {
    pub const TEXT_PLAIN: Self = Self(0);
    /// `application/link-format`, RFC 6690.
    pub const LINK_FORMAT: Self = Self(40);
    pub const JSON: Self = Self(50);
    pub const CBOR: Self = Self(60);
    /// `application/cose; cose-type="cose-sign1"`, RFC 9052.
    pub const COSE_SIGN1: Self = Self(18);
    /// `application/cose; cose-type="cose-mac0"`, RFC 9052.
    pub const COSE_MAC0: Self = Self(17);
    /// `application/cose-key`, RFC 9052.
    pub const COSE_KEY: Self = Self(101);
    /// `application/senml+json`, RFC 8428.
    pub const SENML_JSON: Self = Self(110);
    /// `application/senml+cbor`, RFC 8428.
    pub const SENML_CBOR: Self = Self(112);
    /// `application/jose` (RFC 7515 compact serialization). No CoAP Content-Format number is
    /// registered for it; Sigil uses this one from the experimental range 65000-65535
    /// (RFC 7252 §12.3) and documents it in docs/wire-formats.md.
    pub const JOSE_COMPACT: Self = Self(65100);
}

/// Encodes an unsigned option value in the minimum number of bytes (RFC 7252 §3.2).
pub fn encode_uint(value: u32) -> ([u8; 4], usize) {
    let bytes = value.to_be_bytes();
    let skip = bytes.iter().take_while(|b| **b == 0).count();
    let mut out = [0u8; 4];
    let len = 4 - skip;
    out[..len].copy_from_slice(&bytes[skip..]);
    (out, len)
}

/// Decodes an unsigned option value of up to 4 bytes; longer values are rejected.
pub fn decode_uint(value: &[u8]) -> Option<u32> {
    if value.len() > 4 {
        return None;
    }
    Some(value.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)))
}

/// A parsed CoAP message borrowing the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub mtype: MessageType,
    pub code: Code,
    pub message_id: u16,
    pub token: &'a [u8],
    options: &'a [u8],
    pub payload: &'a [u8],
}

/// One option: its number and raw value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoapOption<'a> {
    pub number: u16,
    pub value: &'a [u8],
}

/// Reads one option header at `buf[pos..]`: returns (delta, length, header bytes consumed), or
/// `Ok(None)` at the payload marker.
fn read_option_header(buf: &[u8]) -> Result<Option<(u32, usize, usize)>, Error> {
    let first = *buf.first().ok_or(Error::Truncated)?;
    if first == 0xff {
        return Ok(None);
    }
    let mut used = 1;
    let mut ext = |nibble: u8| -> Result<u32, Error> {
        match nibble {
            0..=12 => Ok(u32::from(nibble)),
            13 => {
                let b = *buf.get(used).ok_or(Error::Truncated)?;
                used += 1;
                Ok(u32::from(b) + 13)
            }
            14 => {
                let hi = *buf.get(used).ok_or(Error::Truncated)?;
                let lo = *buf.get(used + 1).ok_or(Error::Truncated)?;
                used += 2;
                Ok(u32::from(u16::from_be_bytes([hi, lo])) + 269)
            }
            _ => Err(Error::ReservedOptionNibble),
        }
    };
    let delta = ext(first >> 4)?;
    let len = ext(first & 0x0f)? as usize;
    Ok(Some((delta, len, used)))
}

impl<'a> Message<'a> {
    /// Parses and validates a whole datagram.
    pub fn parse(buf: &'a [u8]) -> Result<Self, Error> {
        if buf.len() < 4 {
            return Err(Error::TooShort);
        }
        let version = buf[0] >> 6;
        if version != 1 {
            return Err(Error::UnknownVersion(version));
        }
        let mtype = MessageType::from_bits(buf[0] >> 4);
        let tkl = buf[0] & 0x0f;
        if tkl > 8 {
            return Err(Error::ReservedTokenLength(tkl));
        }
        let code = Code(buf[1]);
        let message_id = u16::from_be_bytes([buf[2], buf[3]]);
        let token_end = 4 + tkl as usize;
        let token = buf.get(4..token_end).ok_or(Error::Truncated)?;
        let mut pos = token_end;
        let mut number: u32 = 0;
        let mut payload: &[u8] = &[];
        while pos < buf.len() {
            match read_option_header(&buf[pos..])? {
                None => {
                    payload = &buf[pos + 1..];
                    if payload.is_empty() {
                        return Err(Error::EmptyPayloadAfterMarker);
                    }
                    break;
                }
                Some((delta, len, used)) => {
                    number += delta;
                    if number > u32::from(u16::MAX) {
                        return Err(Error::OptionNumberOverflow);
                    }
                    let end = pos
                        .checked_add(used)
                        .and_then(|p| p.checked_add(len))
                        .ok_or(Error::Truncated)?;
                    if end > buf.len() {
                        return Err(Error::Truncated);
                    }
                    pos = end;
                }
            }
        }
        let options_end = if payload.is_empty() {
            pos
        } else {
            buf.len() - payload.len() - 1
        };
        let options = &buf[token_end..options_end];
        if code == Code::EMPTY && (tkl != 0 || !options.is_empty() || !payload.is_empty()) {
            return Err(Error::NonEmptyEmptyMessage);
        }
        Ok(Message {
            mtype,
            code,
            message_id,
            token,
            options,
            payload,
        })
    }

    /// All options in order. Infallible: the region was validated by [`Message::parse`].
    pub fn options(&self) -> OptionIter<'a> {
        OptionIter {
            rest: self.options,
            number: 0,
        }
    }

    /// Values of every instance of option `number`.
    pub fn option_values(&self, number: u16) -> impl Iterator<Item = &'a [u8]> {
        self.options()
            .filter(move |o| o.number == number)
            .map(|o| o.value)
    }

    /// The first value of option `number`.
    pub fn option(&self, number: u16) -> Option<&'a [u8]> {
        self.option_values(number).next()
    }

    /// The first value of a uint option, if present and at most 4 bytes.
    pub fn uint_option(&self, number: u16) -> Option<u32> {
        self.option(number).and_then(decode_uint)
    }

    pub fn content_format(&self) -> Option<ContentFormat> {
        self.uint_option(option::CONTENT_FORMAT)
            .map(|v| ContentFormat(v as u16))
    }

    pub fn accept(&self) -> Option<ContentFormat> {
        self.uint_option(option::ACCEPT)
            .map(|v| ContentFormat(v as u16))
    }

    pub fn observe(&self) -> Option<u32> {
        self.uint_option(option::OBSERVE)
    }

    /// Uri-Path segments as UTF-8; a segment that is not UTF-8 yields `Err`.
    pub fn uri_path(&self) -> impl Iterator<Item = Result<&'a str, core::str::Utf8Error>> {
        self.option_values(option::URI_PATH)
            .map(core::str::from_utf8)
    }

    pub fn uri_query(&self) -> impl Iterator<Item = Result<&'a str, core::str::Utf8Error>> {
        self.option_values(option::URI_QUERY)
            .map(core::str::from_utf8)
    }

    pub fn location_path(&self) -> impl Iterator<Item = Result<&'a str, core::str::Utf8Error>> {
        self.option_values(option::LOCATION_PATH)
            .map(core::str::from_utf8)
    }

    /// The value of query parameter `name` (`name=value`), if present and UTF-8.
    pub fn query_param(&self, name: &str) -> Option<&'a str> {
        self.uri_query().flatten().find_map(|q| {
            let (k, v) = q.split_once('=').unwrap_or((q, ""));
            (k == name).then_some(v)
        })
    }

    /// The first unknown critical option, which a server must reject with 4.02 (§5.4.1).
    pub fn unknown_critical_option(&self) -> Option<u16> {
        self.options()
            .map(|o| o.number)
            .find(|n| option::is_critical(*n) && !option::is_known(*n))
    }

    pub fn block1(&self) -> Option<Result<crate::BlockOption, crate::block::BlockError>> {
        self.option(option::BLOCK1).map(crate::BlockOption::decode)
    }

    pub fn block2(&self) -> Option<Result<crate::BlockOption, crate::block::BlockError>> {
        self.option(option::BLOCK2).map(crate::BlockOption::decode)
    }
}

/// Iterator over a validated option region.
#[derive(Clone, Debug)]
pub struct OptionIter<'a> {
    rest: &'a [u8],
    number: u32,
}

impl<'a> Iterator for OptionIter<'a> {
    type Item = CoapOption<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        // The region was validated at parse time; a failure here cannot happen, and if it
        // did the iterator simply ends rather than panicking.
        let (delta, len, used) = read_option_header(self.rest).ok()??;
        self.number += delta;
        let value = self.rest.get(used..used + len)?;
        self.rest = &self.rest[used + len..];
        Some(CoapOption {
            number: u16::try_from(self.number).ok()?,
            value,
        })
    }
}

/// Writes a CoAP message into a caller-owned buffer. Options must be added in non-decreasing
/// number order (the builder does not sort, so it needs no scratch space).
pub struct MessageBuilder<'b> {
    buf: &'b mut [u8],
    len: usize,
    last_option: u16,
}

impl<'b> MessageBuilder<'b> {
    pub fn new(
        buf: &'b mut [u8],
        mtype: MessageType,
        code: Code,
        message_id: u16,
        token: &[u8],
    ) -> Result<Self, Error> {
        if token.len() > 8 {
            return Err(Error::TokenTooLong);
        }
        let len = 4 + token.len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall);
        }
        buf[0] = 0x40 | (mtype.bits() << 4) | token.len() as u8;
        buf[1] = code.0;
        buf[2..4].copy_from_slice(&message_id.to_be_bytes());
        buf[4..len].copy_from_slice(token);
        Ok(Self {
            buf,
            len,
            last_option: 0,
        })
    }

    fn nibble(v: usize) -> (u8, [u8; 2], usize) {
        match v {
            0..=12 => (v as u8, [0, 0], 0),
            13..=268 => (13, [(v - 13) as u8, 0], 1),
            _ => {
                let e = ((v - 269) as u16).to_be_bytes();
                (14, e, 2)
            }
        }
    }

    /// Appends an option.
    pub fn option(&mut self, number: u16, value: &[u8]) -> Result<&mut Self, Error> {
        if number < self.last_option {
            return Err(Error::OptionOrder);
        }
        if value.len() > 65535 + 269 {
            return Err(Error::BufferTooSmall);
        }
        let (dn, dext, dlen) = Self::nibble(usize::from(number - self.last_option));
        let (ln, lext, llen) = Self::nibble(value.len());
        let need = 1 + dlen + llen + value.len();
        let out = self
            .buf
            .get_mut(self.len..self.len + need)
            .ok_or(Error::BufferTooSmall)?;
        out[0] = (dn << 4) | ln;
        out[1..1 + dlen].copy_from_slice(&dext[..dlen]);
        out[1 + dlen..1 + dlen + llen].copy_from_slice(&lext[..llen]);
        out[1 + dlen + llen..].copy_from_slice(value);
        self.len += need;
        self.last_option = number;
        Ok(self)
    }

    /// Appends a uint option in its shortest form.
    pub fn uint_option(&mut self, number: u16, value: u32) -> Result<&mut Self, Error> {
        let (b, n) = encode_uint(value);
        self.option(number, &b[..n])
    }

    /// Appends one Uri-Path option per `/`-separated segment of `path` (leading `/` ignored).
    pub fn uri_path(&mut self, path: &str) -> Result<&mut Self, Error> {
        for seg in path
            .trim_start_matches('/')
            .split('/')
            .filter(|s| !s.is_empty())
        {
            self.option(option::URI_PATH, seg.as_bytes())?;
        }
        Ok(self)
    }

    /// Appends the payload (with its marker) and returns the message length.
    pub fn finish_with_payload(self, payload: &[u8]) -> Result<usize, Error> {
        if payload.is_empty() {
            return Ok(self.len);
        }
        let end = self.len + 1 + payload.len();
        let out = self
            .buf
            .get_mut(self.len..end)
            .ok_or(Error::BufferTooSmall)?;
        out[0] = 0xff;
        out[1..].copy_from_slice(payload);
        Ok(end)
    }

    /// Room left for a payload after the marker.
    pub fn payload_room(&self) -> usize {
        self.buf.len().saturating_sub(self.len + 1)
    }

    /// Finishes a message without payload and returns its length.
    pub fn finish(self) -> usize {
        self.len
    }
}

/// Builds an Empty ACK or RST for `message_id` (RFC 7252 §4.2, §4.3): always 4 bytes.
pub fn empty(mtype: MessageType, message_id: u16) -> [u8; 4] {
    let mut out = [0u8; 4];
    out[0] = 0x40 | (mtype.bits() << 4);
    out[2..4].copy_from_slice(&message_id.to_be_bytes());
    out
}

impl core::error::Error for Error {}
