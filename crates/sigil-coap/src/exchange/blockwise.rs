//! Block-wise transfer state (RFC 7959), both directions, for every endpoint:
//!
//! - [`Sender`]: a body going out in blocks, one per request (a client's Block1 upload,
//!   §2.3), following the peer's 2.31 Continue and its smaller block size if it asks for one
//!   (late negotiation, §2.5).
//! - [`Reassembly`]: a body coming in blocks (a server's Block1 transfer, a client's Block2
//!   download, §2.4): each block must start where the body received so far ends, every block
//!   but the last is whole, and the body stays within the caller's maximum. The bytes stay with
//!   the caller (a `Vec`, a fixed buffer, flash), written at the offset this returns.
//! - [`block2_of`]: the block of a body a request for Block2 gets (§2.4), including a
//!   server that serves smaller blocks than the client asked for.
//!
//! No allocation, no time: the caller keeps one state per transfer and decides how many
//! transfers it holds and for how long.

use crate::block::BlockOption;
use core::fmt;
use core::ops::Range;

/// Why a block was refused. Each says what the peer got wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockwiseError {
    /// The block does not start where the body received so far ends (§2.3, §2.4).
    OutOfSequence,
    /// A block before the last one is not of its block's size (§2.2: only the last may be
    /// shorter).
    ShortBlock,
    /// The body would grow past the largest this endpoint takes (§2.9.3: 4.13).
    TooLarge,
    /// A block that begins past the end of the body (§2.2: 4.02 or 4.00).
    PastEnd,
    /// A 2.31 Continue that does not acknowledge the block sent (wrong number, no Block1, or
    /// for the last block).
    UnexpectedContinue,
    /// A block number past 2^20 - 1 (§2.2).
    NumberTooLarge,
}

impl fmt::Display for BlockwiseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OutOfSequence => "block out of sequence",
            Self::ShortBlock => "a block before the last is shorter than its block size",
            Self::TooLarge => "body larger than this endpoint takes",
            Self::PastEnd => "block past the end of the body",
            Self::UnexpectedContinue => "2.31 Continue for a block not sent",
            Self::NumberTooLarge => "block number above 2^20 - 1",
        })
    }
}

impl core::error::Error for BlockwiseError {}

/// The block of a `len`-byte body that answers a request asking for `requested` (Block2,
/// RFC 7959 §2.4), in blocks of at most `2^(szx_max + 4)` bytes: its byte range, and the Block2
/// option to send with it, `None` when the whole body fits one block and the request asked for
/// the first (or for none). A client asking for larger blocks than `szx_max` gets the block
/// that starts at the offset it asked for, numbered in the smaller size.
pub fn block2_of(
    requested: Option<BlockOption>,
    szx_max: u8,
    len: usize,
) -> Result<(Range<usize>, Option<BlockOption>), BlockwiseError> {
    let szx_max = szx_max.min(6);
    let (offset, szx) = match requested {
        Some(b) => (b.offset(), b.szx.min(szx_max)),
        None => (0, szx_max),
    };
    let size = 1usize << (szx + 4);
    if offset > len || (offset == len && offset != 0) {
        return Err(BlockwiseError::PastEnd);
    }
    let end = (offset + size).min(len);
    let more = end < len;
    if offset == 0 && !more {
        return Ok((0..end, None));
    }
    let num = u32::try_from(offset / size).map_err(|_| BlockwiseError::NumberTooLarge)?;
    if num >= 1 << 20 {
        return Err(BlockwiseError::NumberTooLarge);
    }
    Ok((offset..end, Some(BlockOption::new(num, more, szx))))
}

/// A body of `len` bytes going out as Block1 blocks, one per request (RFC 7959 §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sender {
    len: usize,
    szx: u8,
    /// Offset of the block being sent.
    offset: usize,
}

impl Sender {
    /// A body of `len` bytes in blocks of `2^(szx + 4)` bytes (`szx` at most 6).
    pub fn new(len: usize, szx: u8) -> Self {
        Self {
            len,
            szx: szx.min(6),
            offset: 0,
        }
    }

    fn size(&self) -> usize {
        1 << (self.szx as usize + 4)
    }

    /// Whether the body goes in one request without a Block1 option.
    pub fn whole(&self) -> bool {
        self.len <= self.size()
    }

    /// The bytes of the body the current request carries.
    pub fn range(&self) -> Range<usize> {
        self.offset..(self.offset + self.size()).min(self.len)
    }

    /// The Block1 option of the current request; `None` when the body goes whole.
    pub fn block(&self) -> Option<BlockOption> {
        if self.whole() {
            return None;
        }
        let num = (self.offset / self.size()) as u32;
        Some(BlockOption::new(num, !self.is_last(), self.szx))
    }

    /// Whether the current request carries the end of the body: its answer is the answer to
    /// the whole request.
    pub fn is_last(&self) -> bool {
        self.offset + self.size() >= self.len
    }

    /// The peer answered the current block with 2.31 Continue, echoing `echoed` (its Block1
    /// option): the next block becomes current. A smaller block size in the echo is followed
    /// from the next block on (§2.5); a 2.31 for another block, or for the last one, is
    /// refused and the state is unchanged.
    pub fn continued(&mut self, echoed: Option<BlockOption>) -> Result<(), BlockwiseError> {
        let sent = self.block().ok_or(BlockwiseError::UnexpectedContinue)?;
        let echoed = echoed.ok_or(BlockwiseError::UnexpectedContinue)?;
        // The echo names the block sent: by its number (RFC 7959 Figure 6: `0/1/128`
        // answered `0/1/32`), or by its offset in the smaller size it asks for (block 2 of
        // 128 bytes as block 8 of 32). The smaller size holds from the next block on (§2.5).
        let names_sent = echoed.num == sent.num || echoed.offset() == sent.offset();
        if !sent.more || !names_sent || echoed.szx > self.szx {
            return Err(BlockwiseError::UnexpectedContinue);
        }
        let next = self.offset + self.size();
        if next >> (echoed.szx as usize + 4) >= 1 << 20 {
            return Err(BlockwiseError::NumberTooLarge);
        }
        self.szx = echoed.szx;
        self.offset = next;
        Ok(())
    }
}

/// Where a received block goes in the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Offset of the block in the body; 0 starts the body again (drop what was kept).
    pub offset: usize,
    /// More blocks follow.
    pub more: bool,
}

/// A body coming in blocks (a server's Block1 transfer, a client's Block2 download).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reassembly {
    max: usize,
    received: usize,
    /// Size exponent of the last block taken (the next Block2 request asks for it or less).
    szx: u8,
    done: bool,
}

impl Reassembly {
    /// A transfer of at most `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            received: 0,
            szx: 6,
            done: false,
        }
    }

    /// Bytes taken so far.
    pub fn received(&self) -> usize {
        self.received
    }

    /// Whether the last block has been taken.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Takes block `block` carrying `part_len` bytes: where to write them. A block 0 starts
    /// the body over (for a server, the client began the transfer again; RFC 7959 §2.3). On
    /// an error the state is unchanged: the caller decides whether the transfer ends.
    pub fn accept(
        &mut self,
        block: BlockOption,
        part_len: usize,
    ) -> Result<Accepted, BlockwiseError> {
        let offset = block.offset();
        let received = if block.num == 0 { 0 } else { self.received };
        if self.done && block.num != 0 || offset != received {
            return Err(BlockwiseError::OutOfSequence);
        }
        if block.more && part_len != block.size() {
            return Err(BlockwiseError::ShortBlock);
        }
        let total = received
            .checked_add(part_len)
            .filter(|t| *t <= self.max)
            .ok_or(BlockwiseError::TooLarge)?;
        self.received = total;
        self.szx = block.szx;
        self.done = !block.more;
        Ok(Accepted {
            offset,
            more: block.more,
        })
    }

    /// The Block2 option asking for the next block (a download), in blocks of at most
    /// `2^(szx_max + 4)` bytes; `None` once the last block has been taken.
    pub fn next_request(&self, szx_max: u8) -> Option<BlockOption> {
        if self.done {
            return None;
        }
        let szx = self.szx.min(szx_max.min(6));
        let num = (self.received >> (szx as usize + 4)) as u32;
        Some(BlockOption::new(num, false, szx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block2_of_a_body() {
        // Fits one block: no option.
        assert_eq!(block2_of(None, 6, 100), Ok((0..100, None)));
        assert_eq!(
            block2_of(Some(BlockOption::new(0, false, 6)), 6, 100),
            Ok((0..100, None))
        );
        // In blocks of 16.
        assert_eq!(
            block2_of(None, 0, 40),
            Ok((0..16, Some(BlockOption::new(0, true, 0))))
        );
        assert_eq!(
            block2_of(Some(BlockOption::new(2, false, 0)), 6, 40),
            Ok((32..40, Some(BlockOption::new(2, false, 0))))
        );
        // The client asked for 64-byte blocks, the server serves 16: block 1 of 64 is
        // block 4 of 16.
        assert_eq!(
            block2_of(Some(BlockOption::new(1, false, 2)), 0, 100),
            Ok((64..80, Some(BlockOption::new(4, true, 0))))
        );
        assert_eq!(
            block2_of(Some(BlockOption::new(3, false, 0)), 0, 40),
            Err(BlockwiseError::PastEnd)
        );
        // An empty body is one empty block.
        assert_eq!(block2_of(None, 0, 0), Ok((0..0, None)));
    }

    #[test]
    fn sending_in_blocks_follows_continue_and_a_smaller_size() {
        let mut s = Sender::new(100, 2); // 64-byte blocks
        assert!(!s.whole());
        assert_eq!(s.block(), Some(BlockOption::new(0, true, 2)));
        assert_eq!(s.range(), 0..64);
        // A 2.31 for another block changes nothing.
        assert_eq!(
            s.continued(Some(BlockOption::new(1, true, 2))),
            Err(BlockwiseError::UnexpectedContinue)
        );
        assert_eq!(s.continued(None), Err(BlockwiseError::UnexpectedContinue));
        // The server kept 64 bytes and asks for 32-byte blocks (§2.5).
        s.continued(Some(BlockOption::new(0, true, 1))).unwrap();
        assert_eq!(s.block(), Some(BlockOption::new(2, true, 1)));
        assert_eq!(s.range(), 64..96);
        s.continued(Some(BlockOption::new(2, true, 1))).unwrap();
        assert_eq!(s.block(), Some(BlockOption::new(3, false, 1)));
        assert_eq!(s.range(), 96..100);
        assert!(s.is_last());
        // The block sent named by its offset in a smaller size: block 1 of 64 as 4 of 16.
        let mut t = Sender::new(200, 2);
        t.continued(Some(BlockOption::new(0, true, 2))).unwrap();
        assert_eq!(t.block(), Some(BlockOption::new(1, true, 2)));
        t.continued(Some(BlockOption::new(4, true, 0))).unwrap();
        assert_eq!(t.block(), Some(BlockOption::new(8, true, 0)));
        assert_eq!(t.range(), 128..144);
        assert_eq!(
            t.continued(Some(BlockOption::new(7, true, 0))),
            Err(BlockwiseError::UnexpectedContinue)
        );
        // No Continue for the last block.
        assert_eq!(
            s.continued(Some(BlockOption::new(3, false, 1))),
            Err(BlockwiseError::UnexpectedContinue)
        );
        let w = Sender::new(16, 0);
        assert!(w.whole() && w.block().is_none() && w.is_last());
        assert_eq!(w.range(), 0..16);
    }

    #[test]
    fn reassembly_checks_each_block() {
        let mut r = Reassembly::new(40);
        assert_eq!(
            r.accept(BlockOption::new(1, true, 0), 16),
            Err(BlockwiseError::OutOfSequence)
        );
        assert_eq!(
            r.accept(BlockOption::new(0, true, 0), 15),
            Err(BlockwiseError::ShortBlock)
        );
        assert_eq!(
            r.accept(BlockOption::new(0, true, 0), 16),
            Ok(Accepted {
                offset: 0,
                more: true
            })
        );
        assert_eq!(r.next_request(6), Some(BlockOption::new(1, false, 0)));
        assert_eq!(
            r.accept(BlockOption::new(2, true, 0), 16),
            Err(BlockwiseError::OutOfSequence)
        );
        r.accept(BlockOption::new(1, true, 0), 16).unwrap();
        assert_eq!(
            r.accept(BlockOption::new(2, false, 0), 9),
            Err(BlockwiseError::TooLarge)
        );
        assert_eq!(r.received(), 32);
        assert_eq!(
            r.accept(BlockOption::new(2, false, 0), 8),
            Ok(Accepted {
                offset: 32,
                more: false
            })
        );
        assert!(r.is_done());
        assert_eq!(r.next_request(6), None);
        // Block 0 again starts over.
        r.accept(BlockOption::new(0, false, 0), 3).unwrap();
        assert_eq!(r.received(), 3);
    }

    #[test]
    fn a_download_may_ask_for_smaller_blocks() {
        let mut r = Reassembly::new(1000);
        r.accept(BlockOption::new(0, true, 2), 64).unwrap();
        // Asking for 16-byte blocks from offset 64: block 4.
        assert_eq!(r.next_request(0), Some(BlockOption::new(4, false, 0)));
        r.accept(BlockOption::new(4, true, 0), 16).unwrap();
        assert_eq!(r.received(), 80);
    }

    /// A small deterministic generator for the property tests (no dependency).
    struct Gen(u64);
    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Property: whatever the body, the sender's size and the smaller sizes a receiver asks
    /// for, the blocks sent reassemble to the body; every block but the last is whole.
    #[test]
    fn any_body_goes_through_in_blocks() {
        let mut g = Gen(0x9e37_79b9_7f4a_7c15);
        let mut body = [0u8; 3000];
        let mut got = [0u8; 3000];
        for _ in 0..2000 {
            let len = g.below(3000) as usize;
            for b in body[..len].iter_mut() {
                *b = g.next() as u8;
            }
            let mut s = Sender::new(len, g.below(7) as u8);
            let mut r = Reassembly::new(len);
            let mut rounds = 0;
            loop {
                rounds += 1;
                assert!(rounds < 400, "a transfer of {len} bytes never ends");
                let part = &body[s.range()];
                let Some(b) = s.block() else {
                    got[..len].copy_from_slice(part);
                    break;
                };
                let at = r.accept(b, part.len()).unwrap();
                got[at.offset..at.offset + part.len()].copy_from_slice(part);
                if s.is_last() {
                    assert!(!at.more && r.is_done());
                    break;
                }
                // Now and then the receiver asks for a smaller size (never below 16).
                let szx = if g.below(4) == 0 {
                    b.szx.saturating_sub(1)
                } else {
                    b.szx
                };
                s.continued(Some(BlockOption::new(b.num, true, szx)))
                    .unwrap();
            }
            assert_eq!(&got[..len], &body[..len]);
        }
    }

    /// Property: a download of any body through [`block2_of`] and
    /// [`Reassembly::next_request`] reassembles it, whatever sizes either side prefers.
    #[test]
    fn any_body_downloads_in_blocks() {
        let mut g = Gen(0x2545_f491_4f6c_dd1d);
        for _ in 0..2000 {
            let len = g.below(5000) as usize;
            let (server, client) = (g.below(7) as u8, g.below(7) as u8);
            let mut r = Reassembly::new(len);
            let mut ask = None;
            let mut taken = 0;
            for _ in 0..400 {
                let (range, b2) = block2_of(ask, server, len).unwrap();
                let Some(b2) = b2 else {
                    assert_eq!(range, 0..len);
                    taken = len;
                    break;
                };
                assert!(b2.szx <= server);
                let at = r.accept(b2, range.len()).unwrap();
                assert_eq!(at.offset, range.start);
                taken = r.received();
                match r.next_request(client) {
                    Some(next) => ask = Some(next),
                    None => break,
                }
            }
            assert_eq!(taken, len);
        }
    }

    /// Property: arbitrary blocks never panic, never take more than the maximum, and a
    /// refused block changes nothing.
    #[test]
    fn arbitrary_blocks_are_refused_cleanly() {
        let mut g = Gen(7);
        for _ in 0..200 {
            let max = g.below(4096) as usize;
            let mut r = Reassembly::new(max);
            let mut s = Sender::new(g.below(1 << 22) as usize, g.below(8) as u8);
            for _ in 0..200 {
                let b = BlockOption::new(
                    g.below(1 << 20) as u32 >> g.below(20),
                    g.below(2) == 0,
                    g.below(7) as u8,
                );
                let before = r;
                match r.accept(b, g.below(2048) as usize) {
                    Ok(_) => assert!(r.received() <= max),
                    Err(_) => assert_eq!(r, before),
                }
                let before = s;
                if s.continued(Some(b)).is_err() {
                    assert_eq!(s, before);
                }
                let _ = block2_of(Some(b), g.below(8) as u8, g.below(1 << 24) as usize);
            }
        }
    }
}
