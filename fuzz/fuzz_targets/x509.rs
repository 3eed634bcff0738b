//! X.509 and PEM parsing: arbitrary bytes as a DER certificate, as a chain validated against
//! the test root, and as PEM text. Nothing may panic; nothing but the real PKI validates.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sigil_crypto::RustCrypto;
use sigil_dtls::x509;

/// Inside the test PKI's validity (2026-01-01).
const NOW: sigil_time::UnixTime = sigil_time::UnixTime::from_secs(1_767_225_600);
const ROOT: &[u8] = include_bytes!("../../crates/sigil-dtls/tests/data/x509/root.der");
const INTERMEDIATE: &[u8] =
    include_bytes!("../../crates/sigil-dtls/tests/data/x509/intermediate.der");

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = x509::parse(data) {
        assert!(c.tbs.len() < data.len());
    }
    // The input as the leaf of a chain through the real intermediate, and split in two.
    let _ = x509::verify_chain(&RustCrypto, &[data, INTERMEDIATE], &[ROOT], NOW);
    let mid = data.len() / 2;
    let _ = x509::verify_chain(
        &RustCrypto,
        &[&data[..mid], &data[mid..]],
        &[ROOT, data],
        NOW,
    );
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = sigil_client::pem::blocks(text, "CERTIFICATE");
        let _ = sigil_client::pem::p256_key(text);
    }
});
