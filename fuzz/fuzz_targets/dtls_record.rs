//! DTLS record layer: every record of a datagram is parsed, checked against a replay window,
//! and opened with fixed keys; none of it may panic, and a record that fails authentication
//! never moves the window.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_crypto::RustCrypto;
use sigil_dtls::protection::{self, Ccm8Keys};
use sigil_dtls::record::{Records, ReplayWindow};

fuzz_target!(|data: &[u8]| {
    let keys = Ccm8Keys { key: [7; 16], salt: [1, 2, 3, 4] };
    let mut window = ReplayWindow::new();
    for rec in Records::new(data) {
        let Ok(rec) = rec else { break };
        if window.check(rec.header.sequence).is_err() {
            continue;
        }
        let before = window;
        let mut frag = rec.fragment.to_vec();
        match protection::open(&RustCrypto, &keys, &rec.header, &mut frag) {
            Ok(_) => window.accept(rec.header.sequence),
            Err(e) => {
                assert_eq!(e.alert(), None);
                assert_eq!(window, before);
            }
        }
    }
});
