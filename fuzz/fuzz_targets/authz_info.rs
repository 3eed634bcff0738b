#![no_main]
//! `/authz-info` on a sensor serving its readings: any bytes posted as a token, and any bytes
//! as the claims of a token the AC really signed (so the checks after the signature run on
//! everything the fuzzer makes), into a small resource server whose tables must stay within
//! their budgets; each accepted token is then asked for a resource.
use libfuzzer_sys::fuzz_target;
use sigil_ace::rs::{HostKey, Method, ResourceServer, RsLimits};
use sigil_ace::MAX_TOKEN_LEN;
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_objects::cbor::Encoder;
use sigil_time::UnixTime;

const SENSOR: &str = "00112233445566778899aabbccddeeff";
const NOW: UnixTime = UnixTime::from_secs(1_800_000_000);

/// A COSE_Sign1 over `payload` under `key` (EdDSA), as the AC writes it.
fn sign1(key: &SecretKey, payload: &[u8], out: &mut [u8]) -> Option<usize> {
    let protected = [0xa1, 0x01, 0x27];
    let mut tbs = [0u8; MAX_TOKEN_LEN + 32];
    let n = sigil_objects::cose::sig_structure(&protected, &[], payload, &mut tbs).ok()?;
    let sig = RustCrypto.sign(key, &tbs[..n]).ok()?;
    let mut e = Encoder::new(out);
    e.tag(18).ok()?.array(4).ok()?.bytes(&protected).ok()?;
    e.map(0).ok()?.bytes(payload).ok()?.bytes(&sig.0).ok()?;
    Some(e.finish())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let ac = SecretKey::from_bytes(SignatureAlgorithm::Ed25519, &[7; 32]).unwrap();
    let ac_pub = RustCrypto.public_key(&ac).unwrap();
    let limits = RsLimits::for_entries(2, 4, 2);
    let mut rs: ResourceServer<'_, 2, 4> =
        ResourceServer::new(SENSOR, ac_pub, &["reading", "history"], limits);
    // Up to four tokens, split at 0xff bytes, from two hosts.
    for (i, part) in rest.split(|b| *b == 0xff).take(4).enumerate() {
        let host: HostKey = [(i % 2) as u8; 16];
        let mut token = [0u8; MAX_TOKEN_LEN + 128];
        let bytes = if mode & 1 == 1 {
            match sign1(&ac, part, &mut token) {
                Some(n) => &token[..n],
                None => part,
            }
        } else {
            part
        };
        let now = UnixTime::from_secs(NOW.as_secs() + i64::from(mode >> 4));
        match rs.authz_info(&RustCrypto, now, host, bytes) {
            Ok(a) => {
                assert!(a.exp > now);
                for r in ["reading", "history", "x"] {
                    let _ = rs.authorize(now, Some(&a.key), r, Method::Get);
                }
            }
            Err(e) => {
                let mut out = [0u8; 160];
                let _ = e.encode_payload(&mut out);
            }
        }
        let (tokens, ctis) = rs.charged();
        assert!(tokens <= limits.token_bytes && ctis <= limits.cti_bytes);
    }
});
