#![no_main]
//! Access tokens: open any bytes as a signed, encrypted or MACed CWT against fixed AC keys (which
//! must refuse everything the fuzzer makes without a panic), and parse any bytes as a claims
//! set, walking its scope and writing it back.
use libfuzzer_sys::fuzz_target;
use sigil_ace::token::Claims;
use sigil_ace::{
    open, AcMacKey, AcSharedKey, AcSigningKey, AcTrust, Permissions, MAC_KEY_LEN, MAX_TOKEN_LEN,
};
use sigil_crypto::{PublicKey, RustCrypto, SignatureAlgorithm};

const KEY: [u8; 32] = [
    0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07, 0x3a,
    0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07, 0x51, 0x1a,
];
const SHARED: [u8; 16] = [0x42; 16];
const MAC_KEY: [u8; MAC_KEY_LEN] = [0x24; MAC_KEY_LEN];

fuzz_target!(|data: &[u8]| {
    let trust = AcTrust {
        signing: Some(AcSigningKey {
            kid: None,
            key: PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &KEY).unwrap(),
        }),
        shared: Some(AcSharedKey {
            kid: None,
            key: &SHARED,
        }),
        mac: Some(AcMacKey {
            kid: None,
            key: &MAC_KEY,
        }),
    };
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    assert!(open(data, &trust, &RustCrypto, &mut scratch).is_err());

    if let Ok(c) = Claims::parse(data) {
        if let Some(scope) = c.scope {
            for e in scope.iter() {
                let _ = scope.allows(e.object, Permissions::READ);
            }
        }
        // What was read can be written back and reads the same.
        let mut out = [0u8; 2 * MAX_TOKEN_LEN];
        if let Ok(n) = c.encode(&mut out) {
            let again = Claims::parse(&out[..n]).expect("re-encoded claims parse");
            assert_eq!(again.aud, c.aud);
            assert_eq!(again.exp, c.exp);
            assert_eq!(again.cnf, c.cnf);
            assert_eq!(
                again.scope.map(|s| s.len()),
                c.scope.map(|s| s.len())
            );
        }
    }
});
