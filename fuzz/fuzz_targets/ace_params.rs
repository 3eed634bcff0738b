#![no_main]
//! The `/token` messages (RFC 9200 §5.8): parse any bytes as a token request, a token response
//! and an error answer; whatever parses is written back and must parse again to the same values.
use libfuzzer_sys::fuzz_target;
use sigil_ace::{AceError, TokenRequest, TokenResponse};

fuzz_target!(|data: &[u8]| {
    let mut out = [0u8; 2048];
    if let Ok(r) = TokenRequest::parse(data) {
        let scope: Vec<_> = r.scope.iter().flat_map(|s| s.iter()).collect();
        if let Ok(n) = r.encode(&mut out) {
            let back = TokenRequest::parse(&out[..n]).expect("own request parses");
            assert_eq!(back.audience, r.audience);
            assert_eq!(back.req_cnf, r.req_cnf);
            let again: Vec<_> = back.scope.iter().flat_map(|s| s.iter()).collect();
            assert_eq!(again, scope);
        }
    }
    if let Ok(r) = TokenResponse::parse(data) {
        if let Ok(n) = r.encode(&mut out) {
            let back = TokenResponse::parse(&out[..n]).expect("own response parses");
            assert_eq!(back.access_token, r.access_token);
            assert_eq!(back.cnf, r.cnf);
            assert_eq!(back.rs_cnf, r.rs_cnf);
        }
    }
    if let Ok(e) = AceError::parse(data) {
        if let Ok(n) = e.encode(&mut out) {
            assert_eq!(AceError::parse(&out[..n]).expect("own error parses"), e);
        }
    }
});
