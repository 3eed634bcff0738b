//! IEEE 802.15.4 frames carrying 6LoWPAN: what a UDP datagram becomes on the radio, and back.
//!
//! One frame format, the one constrained IPv6 nodes use: a data frame with PAN ID compression
//! and 16-bit addresses (9-byte MAC header, 2-byte FCS, at most 127 bytes), optionally an RFC 4944
//! mesh header (mesh-under forwarding), RFC 4944 fragmentation (FRAG1/FRAGN), and RFC 6282
//! IPHC with UDP next-header compression. Addresses are link-local and derived from the 16-bit
//! MAC addresses (fe80::ff:fe00:XXXX, fully elided), the hop limit is 64 (elided), traffic
//! class and flow label are zero (elided); UDP ports go inline and the UDP checksum is carried
//! and checked. The compressed IPv6+UDP header is therefore 9 bytes, the figure the rest of
//! Sigil's budgets use.
//!
//! [`Reassembler`] is the receiving side: bounded in datagram size, in concurrent datagrams and
//! in time (RFC 4944 §5.3's 60-second timeout by default; when every slot is taken the oldest
//! incomplete datagram makes room), it discards a datagram whose
//! fragments overlap with different contents, and every refusal is a [`LowpanError`].

use std::collections::VecDeque;

/// Largest PHY payload (PSDU), FCS included.
pub const MAX_FRAME: usize = 127;
/// Frame control, sequence number, destination PAN, 16-bit destination and source.
pub const MAC_HEADER: usize = 9;
/// Frame check sequence (CRC-16/KERMIT as IEEE 802.15.4 defines it).
pub const FCS: usize = 2;
/// RFC 4944 mesh header with 16-bit originator and final destination.
pub const MESH_HEADER: usize = 5;
/// RFC 6282 IPHC (2) + UDP NHC (1) + ports (4) + checksum (2).
pub const COMPRESSED_HEADER: usize = 9;
/// IPv6 (40) + UDP (8): what the compressed header stands for.
pub const UNCOMPRESSED_HEADER: usize = 48;
pub const FRAG1_HEADER: usize = 4;
pub const FRAGN_HEADER: usize = 5;
/// Largest datagram a node reassembles (the IPv6 minimum MTU).
pub const MAX_DATAGRAM: usize = 1280;

/// A UDP datagram between two nodes, named by their 16-bit link addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    pub src: u16,
    pub dst: u16,
    pub src_port: u16,
    pub dst_port: u16,
    pub payload: Vec<u8>,
}

/// Why a frame or fragment was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LowpanError {
    /// Shorter than a MAC header and FCS, or longer than 127 bytes.
    BadLength,
    /// The frame check sequence does not match.
    BadFcs,
    /// Not a data frame with PAN ID compression and 16-bit addresses.
    UnsupportedFrame,
    /// A 6LoWPAN dispatch this node does not speak.
    UnsupportedDispatch,
    /// An IPHC form other than the one described in the module documentation.
    UnsupportedHeader,
    /// A fragment header that contradicts itself or the datagram it belongs to.
    BadFragment,
    /// The datagram is larger than [`MAX_DATAGRAM`].
    TooLarge,
    /// Fragments overlap with different contents (RFC 4944 §5.3: discard the datagram).
    Overlap,
    /// The UDP checksum does not match.
    BadChecksum,
}

impl LowpanError {
    pub const fn name(self) -> &'static str {
        match self {
            Self::BadLength => "bad_length",
            Self::BadFcs => "bad_fcs",
            Self::UnsupportedFrame => "unsupported_frame",
            Self::UnsupportedDispatch => "unsupported_dispatch",
            Self::UnsupportedHeader => "unsupported_header",
            Self::BadFragment => "bad_fragment",
            Self::TooLarge => "too_large",
            Self::Overlap => "overlap",
            Self::BadChecksum => "bad_checksum",
        }
    }
}

/// CRC-16/KERMIT (poly 0x1021 reflected, init 0), the 802.15.4 FCS.
pub fn fcs(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x8408
            } else {
                crc >> 1
            };
        }
    }
    crc
}

fn link_local(short: u16) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfe;
    a[1] = 0x80;
    a[11] = 0xff;
    a[12] = 0xfe;
    a[14..].copy_from_slice(&short.to_be_bytes());
    a
}

/// The UDP checksum over the IPv6 pseudo-header (RFC 8200 §8.1); never 0 on the wire.
fn udp_checksum(d: &Datagram) -> u16 {
    let len = (8 + d.payload.len()) as u32;
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for c in bytes.chunks(2) {
            let w = u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]);
            sum += u32::from(w);
        }
    };
    add(&link_local(d.src));
    add(&link_local(d.dst));
    add(&len.to_be_bytes());
    add(&[0, 0, 0, 17]);
    add(&d.src_port.to_be_bytes());
    add(&d.dst_port.to_be_bytes());
    add(&(len as u16).to_be_bytes());
    add(&d.payload);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

/// IPHC: TF=11, NH=1, HLIM=10 (64); CID=0, SAC=0, SAM=11, M=0, DAC=0, DAM=11.
const IPHC: [u8; 2] = [0b0111_1110, 0b0011_0011];
/// UDP NHC with both ports and the checksum inline.
const NHC_UDP: u8 = 0b1111_0000;

fn compressed_header(d: &Datagram) -> [u8; COMPRESSED_HEADER] {
    let mut h = [0u8; COMPRESSED_HEADER];
    h[..2].copy_from_slice(&IPHC);
    h[2] = NHC_UDP;
    h[3..5].copy_from_slice(&d.src_port.to_be_bytes());
    h[5..7].copy_from_slice(&d.dst_port.to_be_bytes());
    h[7..9].copy_from_slice(&udp_checksum(d).to_be_bytes());
    h
}

/// Ports and checksum from a compressed header.
fn parse_compressed(h: &[u8]) -> Result<(u16, u16, u16), LowpanError> {
    if h.len() < COMPRESSED_HEADER {
        return Err(LowpanError::UnsupportedHeader);
    }
    if h[..2] != IPHC || h[2] != NHC_UDP {
        return Err(LowpanError::UnsupportedHeader);
    }
    Ok((
        u16::from_be_bytes([h[3], h[4]]),
        u16::from_be_bytes([h[5], h[6]]),
        u16::from_be_bytes([h[7], h[8]]),
    ))
}

/// How a datagram travels: one hop (link addresses are the endpoints) or mesh-under across
/// several (a mesh header names originator and final destination; forwarders rewrite the MAC
/// addresses and decrement hops left).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Path {
    pub hops: u8,
}

impl Path {
    /// Bytes a frame has for the 6LoWPAN payload on this path.
    pub fn room(self) -> usize {
        MAX_FRAME - MAC_HEADER - FCS - if self.hops > 1 { MESH_HEADER } else { 0 }
    }
}

/// A frame as the radio carries it: MAC header, 6LoWPAN payload, FCS.
pub fn frame(seq: u8, mac_src: u16, mac_dst: u16, lowpan: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(MAC_HEADER + lowpan.len() + FCS);
    // Data frame, PAN ID compression, 16-bit destination and source addresses, 2006 version.
    f.extend_from_slice(&0x9841u16.to_le_bytes());
    f.push(seq);
    f.extend_from_slice(&0xabcdu16.to_le_bytes());
    f.extend_from_slice(&mac_dst.to_le_bytes());
    f.extend_from_slice(&mac_src.to_le_bytes());
    f.extend_from_slice(lowpan);
    let c = fcs(&f);
    f.extend_from_slice(&c.to_le_bytes());
    f
}

/// A frame's parts after the FCS and MAC header are checked.
#[derive(Debug, PartialEq, Eq)]
pub struct FrameView<'a> {
    pub seq: u8,
    pub mac_src: u16,
    pub mac_dst: u16,
    /// (originator, final destination, hops left) when a mesh header is present.
    pub mesh: Option<(u16, u16, u8)>,
    /// The 6LoWPAN payload after any mesh header.
    pub lowpan: &'a [u8],
}

pub fn parse_frame(f: &[u8]) -> Result<FrameView<'_>, LowpanError> {
    if f.len() < MAC_HEADER + FCS + 1 || f.len() > MAX_FRAME {
        return Err(LowpanError::BadLength);
    }
    let (body, crc) = f.split_at(f.len() - FCS);
    if fcs(body) != u16::from_le_bytes([crc[0], crc[1]]) {
        return Err(LowpanError::BadFcs);
    }
    if u16::from_le_bytes([body[0], body[1]]) != 0x9841 {
        return Err(LowpanError::UnsupportedFrame);
    }
    let mut lowpan = &body[MAC_HEADER..];
    let mut mesh = None;
    if lowpan[0] & 0xc0 == 0x80 {
        // Mesh header: 10 V F HopsLeft(4); both addresses 16-bit here.
        if lowpan[0] & 0x30 != 0x30 || lowpan.len() < MESH_HEADER + 1 {
            return Err(LowpanError::UnsupportedDispatch);
        }
        mesh = Some((
            u16::from_be_bytes([lowpan[1], lowpan[2]]),
            u16::from_be_bytes([lowpan[3], lowpan[4]]),
            lowpan[0] & 0x0f,
        ));
        lowpan = &lowpan[MESH_HEADER..];
    }
    Ok(FrameView {
        seq: body[2],
        mac_dst: u16::from_le_bytes([body[5], body[6]]),
        mac_src: u16::from_le_bytes([body[7], body[8]]),
        mesh,
        lowpan,
    })
}

fn mesh_header(d: &Datagram, path: Path) -> Vec<u8> {
    if path.hops <= 1 {
        return vec![];
    }
    let mut m = vec![0xb0 | (path.hops.min(15))];
    m.extend_from_slice(&d.src.to_be_bytes());
    m.extend_from_slice(&d.dst.to_be_bytes());
    m
}

/// The 6LoWPAN payloads (mesh header included) of a datagram: one if it fits a frame, else
/// FRAG1 + FRAGNs under `tag`. Errors if the datagram is larger than [`MAX_DATAGRAM`].
pub fn fragment(d: &Datagram, path: Path, tag: u16) -> Result<Vec<Vec<u8>>, LowpanError> {
    let size = UNCOMPRESSED_HEADER + d.payload.len();
    if size > MAX_DATAGRAM {
        return Err(LowpanError::TooLarge);
    }
    let room = path.room();
    let mesh = mesh_header(d, path);
    let header = compressed_header(d);
    if COMPRESSED_HEADER + d.payload.len() <= room {
        let mut p = mesh;
        p.extend_from_slice(&header);
        p.extend_from_slice(&d.payload);
        return Ok(vec![p]);
    }
    let mut out = vec![];
    // FRAG1: the compressed header and as much payload as keeps the next offset a multiple
    // of 8 in uncompressed bytes.
    let first_room = room - FRAG1_HEADER - COMPRESSED_HEADER;
    let first = (UNCOMPRESSED_HEADER + first_room) / 8 * 8 - UNCOMPRESSED_HEADER;
    let mut p = mesh.clone();
    p.push(0xc0 | ((size >> 8) as u8 & 0x07));
    p.push(size as u8);
    p.extend_from_slice(&tag.to_be_bytes());
    p.extend_from_slice(&header);
    p.extend_from_slice(&d.payload[..first]);
    out.push(p);
    let mut offset = first;
    let chunk = (room - FRAGN_HEADER) / 8 * 8;
    while offset < d.payload.len() {
        let take = chunk.min(d.payload.len() - offset);
        let mut p = mesh.clone();
        p.push(0xe0 | ((size >> 8) as u8 & 0x07));
        p.push(size as u8);
        p.extend_from_slice(&tag.to_be_bytes());
        p.push(((UNCOMPRESSED_HEADER + offset) / 8) as u8);
        p.extend_from_slice(&d.payload[offset..offset + take]);
        out.push(p);
        offset += take;
    }
    Ok(out)
}

/// Frames a datagram needs on `path` (without building them).
pub fn frames_for(payload_len: usize, path: Path) -> usize {
    let room = path.room();
    if COMPRESSED_HEADER + payload_len <= room {
        return 1;
    }
    let first_room = room - FRAG1_HEADER - COMPRESSED_HEADER;
    let first = (UNCOMPRESSED_HEADER + first_room) / 8 * 8 - UNCOMPRESSED_HEADER;
    let chunk = (room - FRAGN_HEADER) / 8 * 8;
    1 + (payload_len - first).div_ceil(chunk)
}

struct Partial {
    origin: u16,
    tag: u16,
    size: usize,
    started_ms: u64,
    /// Uncompressed datagram bytes; the first 48 stand for the compressed header.
    buf: Vec<u8>,
    /// One flag per 8-byte unit received (the last unit may be short).
    have: Vec<bool>,
    ports: Option<(u16, u16, u16)>,
}

/// Counts of what a [`Reassembler`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReassemblyStats {
    pub datagrams: u64,
    pub timed_out: u64,
    /// Incomplete datagrams dropped to make room for a new one.
    pub evicted: u64,
    pub refused: std::collections::BTreeMap<&'static str, u64>,
}

/// Rebuilds datagrams from 6LoWPAN payloads (after the MAC layer), one node's worth.
pub struct Reassembler {
    partial: VecDeque<Partial>,
    max_partial: usize,
    timeout_ms: u64,
    pub stats: ReassemblyStats,
}

impl Default for Reassembler {
    fn default() -> Self {
        Self::new(4, 60_000)
    }
}

impl Reassembler {
    /// At most `max_partial` datagrams in reassembly at once, each for at most `timeout_ms`.
    pub fn new(max_partial: usize, timeout_ms: u64) -> Self {
        Self {
            partial: VecDeque::new(),
            max_partial,
            timeout_ms,
            stats: ReassemblyStats::default(),
        }
    }

    /// Datagrams in reassembly now.
    pub fn pending(&self) -> usize {
        self.partial.len()
    }

    fn refuse<T>(&mut self, e: LowpanError) -> Result<T, LowpanError> {
        *self.stats.refused.entry(e.name()).or_default() += 1;
        Err(e)
    }

    /// Takes one 6LoWPAN payload (mesh header already removed) from link source `src`
    /// addressed to `dst`; returns a datagram when one is complete.
    pub fn push(
        &mut self,
        now_ms: u64,
        src: u16,
        dst: u16,
        p: &[u8],
    ) -> Result<Option<Datagram>, LowpanError> {
        let timeout = self.timeout_ms;
        let before = self.partial.len();
        self.partial
            .retain(|x| now_ms.saturating_sub(x.started_ms) < timeout);
        self.stats.timed_out += (before - self.partial.len()) as u64;
        let Some(&dispatch) = p.first() else {
            return self.refuse(LowpanError::UnsupportedDispatch);
        };
        if dispatch & 0xe0 == 0x60 {
            let (src_port, dst_port, checksum) = match parse_compressed(p) {
                Ok(h) => h,
                Err(e) => return self.refuse(e),
            };
            let d = Datagram {
                src,
                dst,
                src_port,
                dst_port,
                payload: p[COMPRESSED_HEADER..].to_vec(),
            };
            return self.finish(d, checksum).map(Some);
        }
        let first = match dispatch & 0xf8 {
            0xc0 => true,
            0xe0 => false,
            _ => return self.refuse(LowpanError::UnsupportedDispatch),
        };
        let hlen = if first { FRAG1_HEADER } else { FRAGN_HEADER };
        if p.len() <= hlen {
            return self.refuse(LowpanError::BadFragment);
        }
        let size = (usize::from(dispatch & 0x07) << 8) | usize::from(p[1]);
        let tag = u16::from_be_bytes([p[2], p[3]]);
        if size > MAX_DATAGRAM {
            return self.refuse(LowpanError::TooLarge);
        }
        if size <= UNCOMPRESSED_HEADER {
            return self.refuse(LowpanError::BadFragment);
        }
        let (offset, ports, data) = if first {
            let h = match parse_compressed(&p[hlen..]) {
                Ok(h) => h,
                Err(e) => return self.refuse(e),
            };
            (UNCOMPRESSED_HEADER, Some(h), &p[hlen + COMPRESSED_HEADER..])
        } else {
            (usize::from(p[4]) * 8, None, &p[hlen..])
        };
        // Every fragment but the last covers whole 8-byte units.
        if offset < UNCOMPRESSED_HEADER
            || offset + data.len() > size
            || (offset + data.len() < size && data.len() % 8 != 0 && !first)
            || (first && (offset + data.len()) % 8 != 0 && offset + data.len() < size)
        {
            return self.refuse(LowpanError::BadFragment);
        }
        let idx = match self
            .partial
            .iter()
            .position(|x| x.origin == src && x.tag == tag)
        {
            Some(i) if self.partial[i].size != size => {
                self.partial.remove(i);
                return self.refuse(LowpanError::BadFragment);
            }
            Some(i) => i,
            None => {
                if self.partial.len() >= self.max_partial {
                    // Full: the oldest incomplete datagram is the least likely to finish.
                    self.partial.pop_front();
                    self.stats.evicted += 1;
                }
                self.partial.push_back(Partial {
                    origin: src,
                    tag,
                    size,
                    started_ms: now_ms,
                    buf: vec![0; size],
                    have: vec![false; size.div_ceil(8)],
                    ports: None,
                });
                self.partial.len() - 1
            }
        };
        let x = &mut self.partial[idx];
        if ports.is_some() {
            if x.ports.is_some() && x.ports != ports {
                self.partial.remove(idx);
                return self.refuse(LowpanError::Overlap);
            }
            x.ports = ports;
        }
        let units = offset / 8..(offset + data.len()).div_ceil(8);
        if units.clone().any(|u| x.have[u]) && x.buf[offset..offset + data.len()] != *data {
            self.partial.remove(idx);
            return self.refuse(LowpanError::Overlap);
        }
        x.buf[offset..offset + data.len()].copy_from_slice(data);
        for u in units {
            x.have[u] = true;
        }
        let header_units = UNCOMPRESSED_HEADER / 8;
        if x.ports.is_none() || !x.have[header_units..].iter().all(|&h| h) {
            return Ok(None);
        }
        let x = self.partial.remove(idx).expect("index from position");
        let (src_port, dst_port, checksum) = x.ports.expect("checked above");
        let d = Datagram {
            src,
            dst,
            src_port,
            dst_port,
            payload: x.buf[UNCOMPRESSED_HEADER..].to_vec(),
        };
        self.finish(d, checksum).map(Some)
    }

    fn finish(&mut self, d: Datagram, checksum: u16) -> Result<Datagram, LowpanError> {
        if udp_checksum(&d) != checksum {
            return self.refuse(LowpanError::BadChecksum);
        }
        self.stats.datagrams += 1;
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dgram(n: usize) -> Datagram {
        Datagram {
            src: 0x0001,
            dst: 0x0002,
            src_port: 5684,
            dst_port: 5684,
            payload: (0..n).map(|i| (i * 7) as u8).collect(),
        }
    }

    #[test]
    fn fcs_matches_the_crc16_kermit_check_value() {
        assert_eq!(fcs(b"123456789"), 0x2189);
    }

    #[test]
    fn small_datagrams_take_one_frame_with_a_nine_byte_header() {
        let d = dgram(40);
        let p = fragment(&d, Path { hops: 1 }, 0).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].len(), 40 + COMPRESSED_HEADER);
        let f = frame(1, 1, 2, &p[0]);
        assert_eq!(f.len(), MAC_HEADER + FCS + 49);
        // 127 - 11 - 9 = 107 bytes of UDP payload fit one frame.
        assert_eq!(frames_for(107, Path { hops: 1 }), 1);
        assert_eq!(frames_for(108, Path { hops: 1 }), 2);
        assert_eq!(frames_for(102, Path { hops: 3 }), 1);
        assert_eq!(frames_for(103, Path { hops: 3 }), 2);
    }

    #[test]
    fn fragments_round_trip_in_any_order_and_fit_the_frame() {
        for hops in [1u8, 4] {
            for n in [108usize, 200, 500, 1000, 1232] {
                let d = dgram(n);
                let path = Path { hops };
                let mut parts = fragment(&d, path, 77).unwrap();
                assert_eq!(parts.len(), frames_for(n, path), "n={n}");
                for p in &parts {
                    let f = frame(0, 1, 2, p);
                    assert!(f.len() <= MAX_FRAME, "n={n}: frame of {}", f.len());
                    let v = parse_frame(&f).unwrap();
                    assert_eq!(v.mesh.is_some(), hops > 1);
                }
                parts.reverse();
                let mut r = Reassembler::default();
                let mesh = if hops > 1 { MESH_HEADER } else { 0 };
                let mut got = None;
                for p in &parts {
                    if let Some(x) = r.push(0, 1, 2, &p[mesh..]).unwrap() {
                        got = Some(x);
                    }
                }
                assert_eq!(got.as_ref(), Some(&d), "n={n} hops={hops}");
                assert_eq!(r.pending(), 0);
            }
        }
    }

    #[test]
    fn a_missing_fragment_leaves_the_datagram_pending_until_it_times_out() {
        let d = dgram(300);
        let parts = fragment(&d, Path { hops: 1 }, 5).unwrap();
        let mut r = Reassembler::new(4, 60_000);
        for p in &parts[..parts.len() - 1] {
            assert_eq!(r.push(0, 1, 2, p).unwrap(), None);
        }
        assert_eq!(r.pending(), 1);
        // Another fragment long after: the stale datagram is dropped first.
        let other = fragment(&dgram(10), Path { hops: 1 }, 6).unwrap();
        r.push(60_000, 1, 2, &other[0]).unwrap();
        assert_eq!(r.pending(), 0);
        assert_eq!(r.stats.timed_out, 1);
    }

    #[test]
    fn overlapping_fragments_with_different_bytes_discard_the_datagram() {
        let d = dgram(300);
        let parts = fragment(&d, Path { hops: 1 }, 9).unwrap();
        let mut r = Reassembler::default();
        r.push(0, 1, 2, &parts[1]).unwrap();
        let mut evil = parts[1].clone();
        *evil.last_mut().unwrap() ^= 1;
        assert_eq!(r.push(0, 1, 2, &evil), Err(LowpanError::Overlap));
        assert_eq!(r.pending(), 0);
        // An identical duplicate is fine.
        r.push(0, 1, 2, &parts[1]).unwrap();
        r.push(0, 1, 2, &parts[1]).unwrap();
        assert_eq!(r.pending(), 1);
    }

    #[test]
    fn reassembly_slots_are_bounded_by_evicting_the_oldest_and_checksums_checked() {
        let mut r = Reassembler::new(2, 60_000);
        for tag in 0..2u16 {
            let parts = fragment(&dgram(300), Path { hops: 1 }, tag).unwrap();
            r.push(0, 1, 2, &parts[0]).unwrap();
        }
        let parts = fragment(&dgram(300), Path { hops: 1 }, 3).unwrap();
        assert_eq!(r.push(0, 1, 2, &parts[0]), Ok(None));
        assert_eq!((r.pending(), r.stats.evicted), (2, 1));
        // The evicted datagram's (tag 0) later fragments start over and never complete alone.
        let rest = fragment(&dgram(300), Path { hops: 1 }, 0).unwrap();
        assert_eq!(r.push(0, 1, 2, &rest[1]), Ok(None));
        // Tag 3 completes.
        let mut done = None;
        for p in &parts[1..] {
            done = r.push(0, 1, 2, p).unwrap().or(done);
        }
        assert_eq!(done, Some(dgram(300)));
        let mut p = fragment(&dgram(20), Path { hops: 1 }, 0).unwrap().remove(0);
        p[12] ^= 0x40;
        assert_eq!(r.push(0, 1, 2, &p), Err(LowpanError::BadChecksum));
        assert_eq!(r.stats.refused["bad_checksum"], 1);
    }

    #[test]
    fn corrupted_frames_are_refused_by_the_fcs() {
        let p = fragment(&dgram(20), Path { hops: 1 }, 0).unwrap();
        let mut f = frame(3, 1, 2, &p[0]);
        f[15] ^= 1;
        assert_eq!(parse_frame(&f), Err(LowpanError::BadFcs));
        assert_eq!(parse_frame(&f[..5]), Err(LowpanError::BadLength));
    }
}
