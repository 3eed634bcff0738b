//! base64url without padding (RFC 4648 §5), the encoding of keys and other information in the
//! key announcement. No heap: encoding writes into a `core::fmt::Write`, decoding into a
//! caller's slice.

use core::fmt;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Writes `data` as base64url without padding.
pub(crate) fn encode<W: fmt::Write + ?Sized>(w: &mut W, data: &[u8]) -> fmt::Result {
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let idx = ((n >> (18 - 6 * i)) & 63) as usize;
            w.write_char(char::from(ALPHABET[idx]))?;
        }
    }
    Ok(())
}

fn value(c: u8) -> Option<u32> {
    Some(u32::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    }))
}

/// Decodes unpadded base64url into `out`, returning the bytes written. `None` for a character
/// outside the alphabet (padding included), an impossible length, non-zero trailing bits (so
/// every byte string has exactly one accepted text), or an `out` too small.
pub(crate) fn decode<'o>(text: &str, out: &'o mut [u8]) -> Option<&'o [u8]> {
    let s = text.as_bytes();
    if s.len() % 4 == 1 {
        return None;
    }
    let len = s.len() / 4 * 3 + (s.len() % 4).saturating_sub(1);
    let dst = out.get_mut(..len)?;
    let mut o = 0;
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let produced = chunk.len() - 1;
        // Bits below the last produced byte must be zero.
        if produced < 3 && (n & (0x00ff_ffff >> (8 * produced))) != 0 {
            return None;
        }
        for b in &bytes[..produced] {
            *dst.get_mut(o)? = *b;
            o += 1;
        }
    }
    Some(&dst[..o])
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Buf([u8; 64], usize);
    impl fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let d = self.0.get_mut(self.1..self.1 + s.len()).ok_or(fmt::Error)?;
            d.copy_from_slice(s.as_bytes());
            self.1 += s.len();
            Ok(())
        }
    }

    #[test]
    fn rfc4648_vectors_round_trip() {
        // RFC 4648 §10, without padding, in the URL-safe alphabet.
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut b = Buf([0; 64], 0);
            encode(&mut b, plain.as_bytes()).unwrap();
            assert_eq!(&b.0[..b.1], enc.as_bytes());
            let mut out = [0u8; 8];
            assert_eq!(decode(enc, &mut out).unwrap(), plain.as_bytes());
        }
        let mut out = [0u8; 4];
        assert_eq!(decode("-_8", &mut out).unwrap(), [0xfb, 0xff]);
    }

    #[test]
    fn refusals() {
        let mut out = [0u8; 8];
        assert!(decode("Zg==", &mut out).is_none(), "padding");
        assert!(decode("Zh", &mut out).is_none(), "trailing bits");
        assert!(decode("Z", &mut out).is_none(), "length");
        assert!(decode("Zm+v", &mut out).is_none(), "standard alphabet");
        assert!(decode("Zm9vYmFy", &mut [0u8; 5]).is_none(), "small output");
    }
}
