//! The `/token` messages (RFC 9200 §5.8): request, response and error maps.

use sigil_ace::{
    AceError, AceErrorCode, Confirmation, Malformed, Permissions, Scope, ScopeEntry, TokenError,
    TokenRequest, TokenResponse,
};
use sigil_crypto::{CryptoProvider, RustCrypto, SignatureAlgorithm};

struct TestRng(u64);
impl sigil_crypto::Rng for TestRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
        for b in buf {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1);
            *b = (self.0 >> 33) as u8;
        }
        Ok(())
    }
}

const ENTRIES: [ScopeEntry<'static>; 2] = [
    ScopeEntry {
        object: "00112233445566778899aabbccddeeff",
        permissions: Permissions::READ,
    },
    ScopeEntry {
        object: "rd",
        permissions: Permissions::READ,
    },
];

#[test]
fn a_token_request_round_trips_with_its_scope_wrapped_in_a_byte_string() {
    let sk = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut TestRng(1))
        .unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    let req = TokenRequest {
        audience: Some("sigil"),
        scope: Some(Scope::new(&ENTRIES)),
        req_cnf: Some(Confirmation::PublicKey { kid: None, key: pk }),
        req_cnf_pop: None,
    };
    let mut buf = [0u8; 512];
    let n = req.encode(&mut buf).unwrap();
    // {4: {1: COSE_Key}, 5: "sigil", 9: h'82...'}
    assert_eq!(buf[0], 0xa3);
    let back = TokenRequest::parse(&buf[..n]).unwrap();
    assert_eq!(back.audience, Some("sigil"));
    let scope: Vec<_> = back.scope.unwrap().iter().collect();
    assert_eq!(scope, ENTRIES.to_vec());
    assert_eq!(
        back.req_cnf,
        Some(Confirmation::PublicKey { kid: None, key: pk })
    );
}

/// The proof of possession of `req_cnf` travels as `-65537: h'<signature>'` and comes back as
/// it went; it verifies over the input naming the client and the key, and over no other.
#[test]
fn a_req_cnf_proof_round_trips_and_binds_the_client_and_the_key() {
    let sk = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut TestRng(2))
        .unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    let client = "00112233445566778899aabbccddeeff";
    let mut input = [0u8; sigil_ace::REQ_CNF_POP_INPUT_MAX];
    let n = sigil_ace::req_cnf_pop_input(client, &pk, &mut input).unwrap();
    let sig = RustCrypto.sign(&sk, &input[..n]).unwrap();
    let req = TokenRequest {
        scope: Some(Scope::new(&ENTRIES)),
        req_cnf: Some(Confirmation::PublicKey { kid: None, key: pk }),
        req_cnf_pop: Some(&sig.0),
        ..Default::default()
    };
    let mut buf = [0u8; 512];
    let len = req.encode(&mut buf).unwrap();
    let back = TokenRequest::parse(&buf[..len]).unwrap();
    assert_eq!(back.req_cnf_pop, Some(&sig.0[..]));
    assert!(RustCrypto.verify(&pk, &input[..n], &sig.0).is_ok());
    // Another client's input: the same signature proves nothing for it.
    let mut other = [0u8; sigil_ace::REQ_CNF_POP_INPUT_MAX];
    let m =
        sigil_ace::req_cnf_pop_input("ffeeddccbbaa99887766554433221100", &pk, &mut other).unwrap();
    assert!(RustCrypto.verify(&pk, &other[..m], &sig.0).is_err());
    // Twice: refused.
    let mut twice = buf[..len].to_vec();
    twice[0] += 1;
    twice.extend_from_slice(&[0x3a, 0x00, 0x01, 0x00, 0x00, 0x41, 0x00]);
    assert_eq!(
        TokenRequest::parse(&twice).unwrap_err(),
        TokenError::Malformed(Malformed::Param("parameter appears twice"))
    );
}

#[test]
fn a_bare_aif_array_is_read_as_the_scope_too() {
    // {9: [["rd", 1]]}
    let bytes = [0xa1, 0x09, 0x81, 0x82, 0x62, b'r', b'd', 0x01];
    let r = TokenRequest::parse(&bytes).unwrap();
    assert!(r.scope.unwrap().allows("rd", Permissions::READ));
}

#[test]
fn malformed_requests_are_refused_with_their_reason() {
    // not a map
    assert_eq!(
        TokenRequest::parse(&[0x80]).unwrap_err(),
        TokenError::Malformed(Malformed::Param("not a map"))
    );
    // {5: "a", 5: "b"}
    assert_eq!(
        TokenRequest::parse(&[0xa2, 0x05, 0x61, b'a', 0x05, 0x61, b'b']).unwrap_err(),
        TokenError::Malformed(Malformed::Param("parameter appears twice"))
    );
    // {5: 7}: audience not text
    assert_eq!(
        TokenRequest::parse(&[0xa1, 0x05, 0x07]).unwrap_err(),
        TokenError::Malformed(Malformed::Param("audience"))
    );
    // {9: "read"}: a text scope is not AIF
    assert_eq!(
        TokenRequest::parse(&[0xa1, 0x09, 0x64, b'r', b'e', b'a', b'd']).unwrap_err(),
        TokenError::Malformed(Malformed::Param("scope is not AIF"))
    );
    // trailing bytes after the map
    assert!(TokenRequest::parse(&[0xa0, 0x00]).is_err());
    // oversized
    let big = vec![0u8; sigil_ace::params::MAX_PARAMS_LEN + 1];
    assert!(matches!(
        TokenRequest::parse(&big),
        Err(TokenError::Oversized { .. })
    ));
    // unknown parameters (integer, negative and text labels) are skipped
    let r = TokenRequest::parse(&[0xa3, 0x18, 0x63, 0x00, 0x20, 0x00, 0x61, b'x', 0x00]).unwrap();
    assert!(r.audience.is_none() && r.scope.is_none());
}

#[test]
fn a_token_response_round_trips_with_a_symmetric_key_and_the_profile() {
    let resp = TokenResponse {
        access_token: &[0xd0, 0x83, 0x40, 0xa0, 0x40],
        expires_in: Some(3600),
        cnf: Some(Confirmation::Symmetric {
            kid: b"k1",
            key: &[7u8; 16],
        }),
        rs_cnf: None,
        scope: Some(Scope::new(&ENTRIES[1..])),
        ace_profile: Some(sigil_ace::PROFILE_COAP_DTLS),
    };
    let mut buf = [0u8; 256];
    let n = resp.encode(&mut buf).unwrap();
    let back = TokenResponse::parse(&buf[..n]).unwrap();
    assert_eq!(back.access_token, resp.access_token);
    assert_eq!(back.expires_in, Some(3600));
    assert_eq!(back.cnf, resp.cnf);
    assert_eq!(back.ace_profile, Some(1));
    assert!(back.scope.unwrap().allows("rd", Permissions::READ));
    // access_token is required
    assert_eq!(
        TokenResponse::parse(&[0xa1, 0x02, 0x01]).unwrap_err(),
        TokenError::Malformed(Malformed::Param("access_token missing"))
    );
}

#[test]
fn an_error_answer_round_trips_and_names_its_code() {
    let e = AceError {
        code: AceErrorCode::InvalidScope,
        description: Some("no grant for 0011"),
    };
    let mut buf = [0u8; 64];
    let n = e.encode(&mut buf).unwrap();
    assert_eq!(&buf[..3], &[0xa2, 0x18, 0x1e]);
    let back = AceError::parse(&buf[..n]).unwrap();
    assert_eq!(back, e);
    assert_eq!(back.code.name(), "invalid_scope");
    assert_eq!(AceErrorCode::from_value(99), AceErrorCode::Other(99));
}
