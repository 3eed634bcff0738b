//! 802.15.4 frames and 6LoWPAN fragments: arbitrary bytes as a frame, and as a sequence of
//! 6LoWPAN payloads fed to one reassembler (with and without a valid FCS around them). Nothing
//! may panic, the reassembler stays within its slots, and what it rebuilds fits the datagram
//! limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_netsim::lowpan::{self, Reassembler, MAX_DATAGRAM};

fuzz_target!(|data: &[u8]| {
    let _ = lowpan::parse_frame(data);
    let mut r = Reassembler::new(4, 60_000);
    // Split the input into payloads at 0xff bytes; the byte after each split picks the time.
    let mut now = 0u64;
    for part in data.split(|&b| b == 0xff) {
        now += u64::from(part.first().copied().unwrap_or(0)) * 1000;
        if let Ok(Some(d)) = r.push(now, 1, 2, part) {
            assert!(d.payload.len() + lowpan::UNCOMPRESSED_HEADER <= MAX_DATAGRAM);
        }
        assert!(r.pending() <= 4);
        let f = lowpan::frame(0, 1, 2, part.get(..100).unwrap_or(part));
        if let Ok(v) = lowpan::parse_frame(&f) {
            let _ = r.push(now, v.mac_src, v.mac_dst, v.lowpan);
        }
    }
});
