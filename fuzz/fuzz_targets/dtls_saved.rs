//! Saved DTLS associations read back from storage. The input is the body of a record; the
//! target appends the HMAC under a fixed storage key so every input reaches the field parser
//! (the first byte selects whether the MAC is kept valid or altered). Nothing may panic; a
//! record that decodes encodes to the same bytes and restores to a connection that refuses to
//! seal before a reservation is persisted and, with a read mark, takes nothing up to it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_crypto::{CryptoProvider, RustCrypto};
use sigil_dtls::saved::MAX_ENCODED_LEN;
use sigil_dtls::{Error, SavedAssociation, SavedError, Traffic};

const KEY: &[u8] = b"fuzz storage key 0123456789abcdef";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let mut bytes = body.to_vec();
    let mut tag = RustCrypto.hmac_sha256(KEY, &[b"sigil-dtls saved association", body]);
    if mode & 1 == 1 {
        tag[0] ^= 1;
    }
    bytes.extend_from_slice(&tag);
    let Ok(saved) = SavedAssociation::decode(&RustCrypto, KEY, &bytes) else {
        return;
    };
    assert_eq!(mode & 1, 0, "an altered MAC was accepted");
    let mut out = [0u8; MAX_ENCODED_LEN];
    let n = saved.encode(&RustCrypto, KEY, &mut out).unwrap();
    assert_eq!(&out[..n], &bytes[..], "decode then encode differs");
    assert_eq!(
        SavedAssociation::decode(&RustCrypto, b"another storage key", &bytes).map(|_| ()),
        Err(SavedError::Mac)
    );
    let mark = saved.read_mark();
    let mut t = Traffic::restore(RustCrypto, saved);
    assert_eq!(t.send(b"x"), Err(Error::ReservationExhausted));
    // With a read mark, every record up to it counts as seen.
    if let Some(m) = mark {
        assert_eq!(t.core().highest_read(), Some(m));
        assert_eq!(t.core().read_mark(), Some(m));
        assert!(!t.core().read_mark_passed());
    }
    let _ = t.handle_datagram(sigil_time::Instant::from_millis(0), body);
});
