//! DTLS record layer: every record of a datagram is parsed (with and without RFC 9146
//! connection IDs), checked against a replay window, and opened with fixed keys (CCM-8 or
//! GCM); none of it may panic, and a record that fails authentication never moves the window.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_crypto::RustCrypto;
use sigil_dtls::protection::{self, Aead, RecordKeys};
use sigil_dtls::record::{Records, ReplayWindow};
use sigil_dtls::wire::ContentType;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, data)) = data.split_first() else {
        return;
    };
    let aead = if mode & 1 == 0 { Aead::Ccm8 } else { Aead::Gcm };
    let cid_len = usize::from(mode >> 1) % 17;
    let keys = RecordKeys {
        aead,
        key: [7; 16],
        salt: [1, 2, 3, 4],
    };
    let mut window = ReplayWindow::new();
    for rec in Records::with_cid(data, cid_len) {
        let Ok(rec) = rec else { break };
        assert!(rec.cid.len() == cid_len || rec.cid.is_empty());
        if window.check(rec.header.sequence).is_err() {
            continue;
        }
        let before = window;
        let mut frag = rec.fragment.to_vec();
        let r = if rec.header.content_type == ContentType::TLS12_CID {
            protection::open_cid(&RustCrypto, &keys, &rec.header, rec.cid, &mut frag).map(|_| ())
        } else {
            protection::open(&RustCrypto, &keys, &rec.header, &mut frag).map(|_| ())
        };
        match r {
            Ok(()) => window.accept(rec.header.sequence),
            Err(e) => {
                assert!(
                    e.alert().is_none() || matches!(e, sigil_dtls::Error::UnexpectedMessage(_))
                );
                assert_eq!(window, before);
            }
        }
    }
});
