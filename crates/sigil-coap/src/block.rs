//! Block-wise transfer (RFC 7959).

use core::fmt;

/// A Block1 or Block2 option value: block number, more flag, size exponent (§2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockOption {
    pub num: u32,
    pub more: bool,
    /// Block size is `2^(szx + 4)`: 16 to 1024 bytes.
    pub szx: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// Option value longer than 3 bytes (§2.2).
    TooLong,
    /// SZX 7 is reserved (used only by BERT over reliable transports, RFC 8323).
    ReservedSzx,
    /// Block number above 2^20 - 1.
    NumberTooLarge,
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TooLong => "block option longer than 3 bytes",
            Self::ReservedSzx => "reserved block size exponent 7",
            Self::NumberTooLarge => "block number too large",
        })
    }
}

impl BlockOption {
    pub const fn new(num: u32, more: bool, szx: u8) -> Self {
        Self { num, more, szx }
    }

    /// Block size in bytes.
    pub const fn size(&self) -> usize {
        1 << (self.szx as usize + 4)
    }

    /// Byte offset of this block in the whole body.
    pub fn offset(&self) -> usize {
        self.num as usize * self.size()
    }

    /// The exponent for the largest block size not above `bytes` (at least 16).
    pub fn szx_for(bytes: usize) -> u8 {
        let mut szx = 0u8;
        while szx < 6 && (1usize << (szx + 5)) <= bytes {
            szx += 1;
        }
        szx
    }

    pub fn decode(value: &[u8]) -> Result<Self, BlockError> {
        if value.len() > 3 {
            return Err(BlockError::TooLong);
        }
        let v = value.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b));
        let szx = (v & 7) as u8;
        if szx == 7 {
            return Err(BlockError::ReservedSzx);
        }
        Ok(Self {
            num: v >> 4,
            more: v & 8 != 0,
            szx,
        })
    }

    /// Encodes the option value; returns the bytes and their length (0 to 3).
    pub fn encode(&self) -> Result<([u8; 4], usize), BlockError> {
        if self.num >= 1 << 20 {
            return Err(BlockError::NumberTooLarge);
        }
        let v = (self.num << 4) | (u32::from(self.more) << 3) | u32::from(self.szx & 7);
        Ok(crate::encode_uint(v))
    }

    /// The slice of `body` this block carries and whether more follow; `None` when the block
    /// starts past the end of the body (answered with 4.02 per §2.2... or 4.00 by servers).
    pub fn slice<'a>(&self, body: &'a [u8]) -> Option<(&'a [u8], bool)> {
        let start = self.offset();
        if start > body.len() || (start == body.len() && start != 0) {
            return None;
        }
        let end = (start + self.size()).min(body.len());
        Some((&body[start..end], end < body.len()))
    }
}

impl core::error::Error for BlockError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_limits() {
        for (num, more, szx) in [
            (0, false, 0),
            (1, true, 2),
            (1_048_575, false, 6),
            (16, true, 4),
        ] {
            let b = BlockOption::new(num, more, szx);
            let (buf, n) = b.encode().unwrap();
            assert_eq!(BlockOption::decode(&buf[..n]).unwrap(), b);
        }
        assert_eq!(BlockOption::decode(&[0, 0, 0, 0]), Err(BlockError::TooLong));
        assert_eq!(BlockOption::decode(&[0x0f]), Err(BlockError::ReservedSzx));
        assert_eq!(
            BlockOption::new(1 << 20, false, 0).encode(),
            Err(BlockError::NumberTooLarge)
        );
        assert_eq!(
            BlockOption::decode(&[]).unwrap(),
            BlockOption::new(0, false, 0)
        );
    }

    #[test]
    fn slicing_a_body() {
        let body = [7u8; 40];
        let b0 = BlockOption::new(0, false, 0);
        assert_eq!(b0.slice(&body).unwrap().0.len(), 16);
        assert!(b0.slice(&body).unwrap().1);
        let b2 = BlockOption::new(2, false, 0);
        assert_eq!(b2.slice(&body).unwrap(), (&body[32..], false));
        assert!(BlockOption::new(3, false, 0).slice(&body).is_none());
        assert_eq!(
            BlockOption::new(0, false, 0).slice(&[]).unwrap(),
            (&[][..], false)
        );
        assert_eq!(BlockOption::szx_for(64), 2);
        assert_eq!(BlockOption::szx_for(1000), 5);
        assert_eq!(BlockOption::szx_for(5000), 6);
    }
}
