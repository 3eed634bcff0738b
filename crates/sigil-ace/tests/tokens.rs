//! Access tokens end to end: the three forms round trip, every refusal carries its reason,
//! scopes grant exactly what they name, and the RFC 8392 Appendix A tokens verify.

use sigil_ace::cnf::Confirmation;
use sigil_ace::token::{Claims, TokenForm};
use sigil_ace::{
    encode_encrypted, encode_maced, encode_signed, hmac_256_64_tag, open, validate, AcMacKey,
    AcSharedKey, AcSigningKey, AcTrust, Claim, Malformed, Permissions, Scope, ScopeEntry,
    TokenError, MAC_KEY_LEN, MAX_TOKEN_LEN, RD_OBJECT,
};
use sigil_crypto::{
    CryptoError, CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey, SignatureAlgorithm,
};
use sigil_time::UnixTime;

/// A deterministic RNG for tests: SHA-256 of a counter.
struct TestRng(u64);

impl Rng for TestRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        for chunk in buf.chunks_mut(32) {
            self.0 += 1;
            let block = RustCrypto.sha256(&[&self.0.to_be_bytes()]);
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        Ok(())
    }
}

const NOW: UnixTime = UnixTime::from_secs(1_800_000_000);
const AUD: &str = "coaps://broker.sigil";
const TOPIC_A: &str = "temp-3f2a9c0b";
const TOPIC_B: &str = "temp-77e1d004";
const AC_KID: &[u8] = b"ac1";
const SHARED: [u8; 16] = *b"0123456789abcdef";
const MAC_KEY: [u8; MAC_KEY_LEN] = *b"0123456789abcdef0123456789abcdef";
const PSK: [u8; 16] = [0x5a; 16];

const READ_A: [ScopeEntry<'static>; 1] = [ScopeEntry {
    object: TOPIC_A,
    permissions: Permissions::READ,
}];

fn claims<'a>(scope: &'a [ScopeEntry<'a>], cnf: Option<Confirmation<'a>>) -> Claims<'a> {
    Claims {
        iss: None,
        sub: None,
        aud: Some(AUD),
        exp: Some(UnixTime::from_secs(NOW.as_secs() + 3600)),
        nbf: None,
        iat: Some(NOW),
        cti: Some(&[0x01, 0x02, 0x03, 0x04]),
        scope: Some(Scope::new(scope)),
        cnf,
    }
}

fn keypair(alg: SignatureAlgorithm, seed: u64) -> (SecretKey, PublicKey) {
    let sk = RustCrypto.generate(alg, &mut TestRng(seed)).unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    (sk, pk)
}

fn signing_trust(pk: PublicKey) -> AcTrust<'static> {
    AcTrust {
        signing: Some(AcSigningKey {
            kid: Some(AC_KID),
            key: pk,
        }),
        ..AcTrust::default()
    }
}

fn shared_trust() -> AcTrust<'static> {
    AcTrust {
        shared: Some(AcSharedKey {
            kid: Some(AC_KID),
            key: &SHARED,
        }),
        ..AcTrust::default()
    }
}

fn mac_trust(key: &'static [u8; MAC_KEY_LEN]) -> AcTrust<'static> {
    AcTrust {
        mac: Some(AcMacKey {
            kid: Some(AC_KID),
            key,
        }),
        ..AcTrust::default()
    }
}

fn signed(c: &Claims<'_>, sk: &SecretKey) -> Vec<u8> {
    let mut out = [0u8; MAX_TOKEN_LEN];
    let n = encode_signed(c, Some(AC_KID), sk, &RustCrypto, &mut out).unwrap();
    out[..n].to_vec()
}

fn encrypted(c: &Claims<'_>) -> Vec<u8> {
    let mut out = [0u8; MAX_TOKEN_LEN];
    let n = encode_encrypted(
        c,
        Some(AC_KID),
        &SHARED,
        &RustCrypto,
        &mut TestRng(9),
        &mut out,
    )
    .unwrap();
    out[..n].to_vec()
}

fn maced(c: &Claims<'_>) -> Vec<u8> {
    let mut out = [0u8; MAX_TOKEN_LEN];
    let n = encode_maced(c, Some(AC_KID), &MAC_KEY, &RustCrypto, &mut out).unwrap();
    out[..n].to_vec()
}

fn check(token: &[u8], trust: &AcTrust<'_>, now: UnixTime) -> Result<(), TokenError> {
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    validate(token, now, AUD, trust, &RustCrypto, &mut scratch).map(|_| ())
}

#[test]
fn signed_tokens_round_trip_with_both_algorithms_and_public_pop_keys() {
    for alg in SignatureAlgorithm::ALL {
        let (ac_sk, ac_pk) = keypair(alg, 1);
        let (_, client_pk) = keypair(alg, 2);
        let cnf = Confirmation::PublicKey {
            kid: Some(b"c1"),
            key: client_pk,
        };
        let token = signed(&claims(&READ_A, Some(cnf)), &ac_sk);
        let mut scratch = [0u8; MAX_TOKEN_LEN];
        let t = validate(
            &token,
            NOW,
            AUD,
            &signing_trust(ac_pk),
            &RustCrypto,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(t.form, TokenForm::Signed(alg));
        assert_eq!(t.aud, AUD);
        assert_eq!(t.exp.as_secs(), NOW.as_secs() + 3600);
        assert_eq!(t.claims.iat, Some(NOW));
        assert_eq!(t.claims.cti, Some(&[1u8, 2, 3, 4][..]));
        assert_eq!(t.pop_key(), Some(&cnf));
        assert!(t.allows(TOPIC_A, Permissions::READ));
    }
}

#[test]
fn signed_token_with_only_a_kid_round_trips() {
    let (ac_sk, ac_pk) = keypair(SignatureAlgorithm::Ed25519, 1);
    let token = signed(
        &claims(&READ_A, Some(Confirmation::KeyId(b"psk-7"))),
        &ac_sk,
    );
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let t = validate(
        &token,
        NOW,
        AUD,
        &signing_trust(ac_pk),
        &RustCrypto,
        &mut scratch,
    )
    .unwrap();
    assert_eq!(t.pop_key(), Some(&Confirmation::KeyId(b"psk-7")));
}

#[test]
fn encrypted_token_round_trips_with_its_symmetric_pop_key() {
    let cnf = Confirmation::Symmetric {
        kid: b"c1",
        key: &PSK,
    };
    let token = encrypted(&claims(&READ_A, Some(cnf)));
    // The key is not visible in the token.
    assert!(!token.windows(PSK.len()).any(|w| w == PSK));
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let t = validate(&token, NOW, AUD, &shared_trust(), &RustCrypto, &mut scratch).unwrap();
    assert_eq!(t.form, TokenForm::Encrypted);
    assert_eq!(
        t.pop_key(),
        Some(&Confirmation::Symmetric {
            kid: b"c1",
            key: &PSK
        })
    );
}

#[test]
fn maced_tokens_round_trip_with_public_pop_keys_and_kids() {
    let (_, client_pk) = keypair(SignatureAlgorithm::EcdsaP256, 2);
    for cnf in [
        Confirmation::PublicKey {
            kid: Some(b"c1"),
            key: client_pk,
        },
        Confirmation::KeyId(b"psk-7"),
    ] {
        let token = maced(&claims(&READ_A, Some(cnf)));
        // Tagged COSE_Mac0, protected {1: 4}, kid `ac1`.
        assert_eq!(&token[..5], &[0xd1, 0x84, 0x43, 0xa1, 0x01]);
        assert_eq!(token[5], 0x04);
        let mut scratch = [0u8; MAX_TOKEN_LEN];
        let t = validate(
            &token,
            NOW,
            AUD,
            &mac_trust(&MAC_KEY),
            &RustCrypto,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(t.form, TokenForm::Maced);
        assert_eq!(t.aud, AUD);
        assert_eq!(t.exp.as_secs(), NOW.as_secs() + 3600);
        assert_eq!(t.claims.cti, Some(&[1u8, 2, 3, 4][..]));
        assert_eq!(t.pop_key(), Some(&cnf));
        assert!(t.allows(TOPIC_A, Permissions::READ));
        assert!(!t.allows(TOPIC_B, Permissions::READ));
    }
}

#[test]
fn maced_tokens_are_refused_when_altered_or_under_another_key() {
    let token = maced(&claims(&READ_A, None));
    let trust = mac_trust(&MAC_KEY);
    assert_eq!(check(&token, &trust, NOW), Ok(()));
    // A byte of the payload (inside the topic name), and every byte of the 8-byte tag.
    let topic_at = token
        .windows(TOPIC_A.len())
        .position(|w| w == TOPIC_A.as_bytes())
        .unwrap();
    for i in [topic_at + 5]
        .into_iter()
        .chain(token.len() - 8..token.len())
    {
        let mut t = token.clone();
        t[i] ^= 0x01;
        assert_eq!(check(&t, &trust, NOW), Err(TokenError::BadTag), "byte {i}");
    }
    // A tag cut to 7 bytes, or grown to the full 32 of HMAC-SHA-256.
    let body = &token[..token.len() - 9];
    let mut short = body.to_vec();
    short.push(0x47);
    short.extend_from_slice(&token[token.len() - 8..token.len() - 1]);
    assert_eq!(check(&short, &trust, NOW), Err(TokenError::BadTag));
    let mut long = body.to_vec();
    long.extend_from_slice(&[0x58, 0x20]);
    long.extend_from_slice(&[0u8; 32]);
    assert_eq!(check(&long, &trust, NOW), Err(TokenError::BadTag));
    // The AC's kid with another key.
    static OTHER: [u8; MAC_KEY_LEN] = [7u8; MAC_KEY_LEN];
    assert_eq!(
        check(&token, &mac_trust(&OTHER), NOW),
        Err(TokenError::BadTag)
    );
    // Another kid, or a server that has no MAC key.
    let mut out = [0u8; MAX_TOKEN_LEN];
    let n = encode_maced(
        &claims(&READ_A, None),
        Some(b"mallory"),
        &MAC_KEY,
        &RustCrypto,
        &mut out,
    )
    .unwrap();
    assert_eq!(check(&out[..n], &trust, NOW), Err(TokenError::UnknownKey));
    assert_eq!(
        check(&token, &shared_trust(), NOW),
        Err(TokenError::UnknownKey)
    );
    let (_, ac_pk) = keypair(SignatureAlgorithm::Ed25519, 1);
    assert_eq!(
        check(&token, &signing_trust(ac_pk), NOW),
        Err(TokenError::UnknownKey)
    );
    // Nor does a MAC key open the other forms.
    let enc = encrypted(&claims(&READ_A, None));
    assert_eq!(check(&enc, &trust, NOW), Err(TokenError::UnknownKey));
    // Time and audience are checked as for the other forms.
    let exp = UnixTime::from_secs(NOW.as_secs() + 3600);
    assert_eq!(
        check(&token, &trust, exp),
        Err(TokenError::Expired { exp, now: exp })
    );
}

#[test]
fn a_maced_token_names_an_algorithm_other_than_hmac_256_64() {
    let mut token = maced(&claims(&READ_A, None));
    // Protected header a1 01 04 (HMAC 256/64) -> alg 5 (HMAC 256/256).
    assert_eq!(&token[3..6], &[0xa1, 0x01, 0x04]);
    token[5] = 0x05;
    assert_eq!(
        check(&token, &mac_trust(&MAC_KEY), NOW),
        Err(TokenError::UnsupportedAlgorithm(5))
    );
    // A signature algorithm in a COSE_Mac0.
    token[5] = 0x26;
    assert_eq!(
        check(&token, &mac_trust(&MAC_KEY), NOW),
        Err(TokenError::UnsupportedAlgorithm(-7))
    );
}

#[test]
fn a_symmetric_pop_key_never_travels_in_a_maced_token() {
    let cnf = Confirmation::Symmetric {
        kid: b"c1",
        key: &PSK,
    };
    let c = claims(&READ_A, Some(cnf));
    let mut out = [0u8; MAX_TOKEN_LEN];
    assert_eq!(
        encode_maced(&c, None, &MAC_KEY, &RustCrypto, &mut out),
        Err(TokenError::ExposedPopKey)
    );
    // Nor is one accepted, even under a tag that verifies.
    let mut payload = [0u8; MAX_TOKEN_LEN];
    let plen = c.encode(&mut payload).unwrap();
    let payload = &payload[..plen];
    let protected = [0xa1, 0x01, 0x04];
    let tag = hmac_256_64_tag(&RustCrypto, &MAC_KEY, &protected, payload).unwrap();
    let mut token = vec![0xd1, 0x84, 0x43];
    token.extend_from_slice(&protected);
    token.push(0xa0);
    token.extend_from_slice(&[0x58, plen as u8]);
    token.extend_from_slice(payload);
    token.push(0x48);
    token.extend_from_slice(&tag);
    assert_eq!(
        check(&token, &mac_trust(&MAC_KEY), NOW),
        Err(TokenError::ExposedPopKey)
    );
}

#[test]
fn time_is_checked_against_exp_and_nbf() {
    let (ac_sk, ac_pk) = keypair(SignatureAlgorithm::Ed25519, 1);
    let trust = signing_trust(ac_pk);
    let mut c = claims(&READ_A, None);
    c.nbf = Some(NOW);
    let token = signed(&c, &ac_sk);
    let exp = UnixTime::from_secs(NOW.as_secs() + 3600);
    assert_eq!(check(&token, &trust, NOW), Ok(()));
    assert_eq!(
        check(&token, &trust, exp),
        Err(TokenError::Expired { exp, now: exp })
    );
    let early = UnixTime::from_secs(NOW.as_secs() - 1);
    assert_eq!(
        check(&token, &trust, early),
        Err(TokenError::NotYetValid {
            nbf: NOW,
            now: early
        })
    );
}

#[test]
fn a_token_for_another_audience_is_refused() {
    let (ac_sk, ac_pk) = keypair(SignatureAlgorithm::Ed25519, 1);
    let token = signed(&claims(&READ_A, None), &ac_sk);
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let r = validate(
        &token,
        NOW,
        "coaps://rd.sigil",
        &signing_trust(ac_pk),
        &RustCrypto,
        &mut scratch,
    );
    assert_eq!(r.err(), Some(TokenError::WrongAudience));
}

#[test]
fn tampering_is_caught_by_the_signature_and_the_tag() {
    for alg in SignatureAlgorithm::ALL {
        let (ac_sk, ac_pk) = keypair(alg, 1);
        let trust = signing_trust(ac_pk);
        let token = signed(&claims(&READ_A, None), &ac_sk);
        // Every byte of the signature, and a byte of the payload (inside the topic name).
        let topic_at = token
            .windows(TOPIC_A.len())
            .position(|w| w == TOPIC_A.as_bytes())
            .unwrap();
        for i in [topic_at + 5, token.len() - 1, token.len() - 64] {
            let mut t = token.clone();
            t[i] ^= 0x01;
            assert_eq!(
                check(&t, &trust, NOW),
                Err(TokenError::BadSignature),
                "{alg:?} byte {i}"
            );
        }
    }
    let token = encrypted(&claims(&READ_A, None));
    for i in [token.len() - 1, token.len() - 12, 20] {
        let mut t = token.clone();
        t[i] ^= 0x80;
        assert_eq!(
            check(&t, &shared_trust(), NOW),
            Err(TokenError::BadTag),
            "byte {i}"
        );
    }
}

#[test]
fn keys_that_are_not_the_acs_are_refused() {
    let (ac_sk, ac_pk) = keypair(SignatureAlgorithm::Ed25519, 1);
    let (other_sk, _) = keypair(SignatureAlgorithm::Ed25519, 3);
    let token = signed(&claims(&READ_A, None), &ac_sk);
    // A kid that is not the AC's.
    let mut out = [0u8; MAX_TOKEN_LEN];
    let n = encode_signed(
        &claims(&READ_A, None),
        Some(b"mallory"),
        &ac_sk,
        &RustCrypto,
        &mut out,
    )
    .unwrap();
    assert_eq!(
        check(&out[..n], &signing_trust(ac_pk), NOW),
        Err(TokenError::UnknownKey)
    );
    // Signed by another key under the AC's kid.
    let forged = signed(&claims(&READ_A, None), &other_sk);
    assert_eq!(
        check(&forged, &signing_trust(ac_pk), NOW),
        Err(TokenError::BadSignature)
    );
    // An algorithm the AC's key is not for.
    let (p256_sk, _) = keypair(SignatureAlgorithm::EcdsaP256, 4);
    let other_alg = signed(&claims(&READ_A, None), &p256_sk);
    assert_eq!(
        check(&other_alg, &signing_trust(ac_pk), NOW),
        Err(TokenError::UnknownKey)
    );
    // A form this server has no key for.
    assert_eq!(
        check(&token, &shared_trust(), NOW),
        Err(TokenError::UnknownKey)
    );
    let enc = encrypted(&claims(&READ_A, None));
    assert_eq!(
        check(&enc, &signing_trust(ac_pk), NOW),
        Err(TokenError::UnknownKey)
    );
    // Sealed under another shared key with the AC's kid.
    let other = AcTrust {
        shared: Some(AcSharedKey {
            kid: Some(AC_KID),
            key: &[7u8; 16],
        }),
        ..AcTrust::default()
    };
    assert_eq!(check(&enc, &other, NOW), Err(TokenError::BadTag));
}

#[test]
fn oversized_tokens_are_refused_before_parsing() {
    let big = vec![0u8; MAX_TOKEN_LEN + 1];
    assert_eq!(
        check(&big, &shared_trust(), NOW),
        Err(TokenError::Oversized {
            len: MAX_TOKEN_LEN + 1,
            max: MAX_TOKEN_LEN
        })
    );
    // A scope beyond the bound is refused when made.
    let many: Vec<ScopeEntry> = (0..17)
        .map(|_| ScopeEntry {
            object: TOPIC_A,
            permissions: Permissions::READ,
        })
        .collect();
    let mut out = [0u8; MAX_TOKEN_LEN];
    let r = encode_encrypted(
        &claims(&many, None),
        None,
        &SHARED,
        &RustCrypto,
        &mut TestRng(1),
        &mut out,
    );
    assert_eq!(
        r,
        Err(TokenError::Malformed(Malformed::Scope("too many entries")))
    );
}

#[test]
fn an_unsupported_algorithm_is_named() {
    let mut token = encrypted(&claims(&READ_A, None));
    // Protected header a1 01 0a (alg 10) -> alg 11 (AES-CCM-16-64-256).
    let at = token
        .windows(3)
        .position(|w| w == [0xa1, 0x01, 0x0a])
        .unwrap();
    token[at + 2] = 0x0b;
    assert_eq!(
        check(&token, &shared_trust(), NOW),
        Err(TokenError::UnsupportedAlgorithm(11))
    );
}

#[test]
fn missing_claims_are_named() {
    let (ac_sk, ac_pk) = keypair(SignatureAlgorithm::Ed25519, 1);
    let trust = signing_trust(ac_pk);
    let base = claims(&READ_A, None);
    let mut c = base;
    c.scope = None;
    assert_eq!(
        check(&signed(&c, &ac_sk), &trust, NOW),
        Err(TokenError::MissingClaim(Claim::Scope))
    );
    let mut c = base;
    c.exp = None;
    assert_eq!(
        check(&signed(&c, &ac_sk), &trust, NOW),
        Err(TokenError::MissingClaim(Claim::Exp))
    );
    let mut c = base;
    c.aud = None;
    assert_eq!(
        check(&signed(&c, &ac_sk), &trust, NOW),
        Err(TokenError::MissingClaim(Claim::Aud))
    );
}

#[test]
fn malformed_tokens_say_what_is_wrong() {
    let (ac_sk, ac_pk) = keypair(SignatureAlgorithm::Ed25519, 1);
    let trust = signing_trust(ac_pk);
    let token = signed(&claims(&READ_A, None), &ac_sk);
    // Truncated.
    assert!(matches!(
        check(&token[..token.len() - 3], &trust, NOW),
        Err(TokenError::Malformed(Malformed::Cbor(_)))
    ));
    // Not COSE: a bare claims map.
    assert_eq!(
        check(&[0xa0], &trust, NOW),
        Err(TokenError::Malformed(Malformed::NotCose))
    );
    // A COSE_Mac (tag 97, with recipients) is not a form this crate reads.
    assert_eq!(
        check(&[0xd8, 0x61, 0x85], &trust, NOW),
        Err(TokenError::Malformed(Malformed::NotCose))
    );
    // Trailing bytes after the token.
    let mut t = token.clone();
    t.push(0x00);
    assert!(matches!(
        check(&t, &trust, NOW),
        Err(TokenError::Malformed(Malformed::Cbor(_)))
    ));
    // A claim of the wrong type: exp as text.
    let bad_exp = [0xa1, 0x04, 0x61, 0x78];
    assert_eq!(
        Claims::parse(&bad_exp).err(),
        Some(TokenError::Malformed(Malformed::Claim(Claim::Exp)))
    );
    // The same claim twice.
    let twice = [0xa2, 0x04, 0x01, 0x04, 0x02];
    assert_eq!(
        Claims::parse(&twice).err(),
        Some(TokenError::Malformed(Malformed::DuplicateClaim(Claim::Exp)))
    );
    // A scope entry that is not a pair.
    let bad_scope = [0xa1, 0x09, 0x81, 0x81, 0x61, 0x61];
    assert!(matches!(
        Claims::parse(&bad_scope).err(),
        Some(TokenError::Malformed(Malformed::Scope(_)))
    ));
}

#[test]
fn a_symmetric_pop_key_never_travels_in_a_signed_token() {
    let (ac_sk, _) = keypair(SignatureAlgorithm::Ed25519, 1);
    let cnf = Confirmation::Symmetric {
        kid: b"c1",
        key: &PSK,
    };
    let mut out = [0u8; MAX_TOKEN_LEN];
    let r = encode_signed(
        &claims(&READ_A, Some(cnf)),
        None,
        &ac_sk,
        &RustCrypto,
        &mut out,
    );
    assert_eq!(r, Err(TokenError::ExposedPopKey));
}

#[test]
fn scopes_grant_exactly_the_named_objects_and_permissions() {
    let entries = [
        ScopeEntry {
            object: TOPIC_A,
            permissions: Permissions::READ,
        },
        ScopeEntry {
            object: RD_OBJECT,
            permissions: Permissions::READ,
        },
        ScopeEntry {
            object: "temp-device-own",
            permissions: Permissions::PUBLISH,
        },
    ];
    let token = encrypted(&claims(&entries, None));
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let t = validate(&token, NOW, AUD, &shared_trust(), &RustCrypto, &mut scratch).unwrap();
    // Parsed back, not just the issuer's slice.
    let back: Vec<_> = t.scope.iter().collect();
    assert_eq!(back, entries);
    assert!(t.allows(TOPIC_A, Permissions::READ));
    assert!(
        !t.allows(TOPIC_B, Permissions::READ),
        "topic A does not open topic B"
    );
    assert!(
        !t.allows(TOPIC_A, Permissions::PUBLISH),
        "read does not imply publish"
    );
    assert!(!t.allows(TOPIC_A, Permissions::READ_PUBLISH));
    assert!(t.allows(RD_OBJECT, Permissions::READ), "RD lookup");
    assert!(t.allows("temp-device-own", Permissions::PUBLISH));
    assert!(
        !t.allows("temp-device-own", Permissions::READ),
        "publish does not imply read"
    );
    assert!(
        !t.allows("temp-3f2a9c0", Permissions::READ),
        "no prefix match"
    );
    assert!(
        !t.allows(TOPIC_A, Permissions(0)),
        "an empty request is never granted"
    );
}

// RFC 8392 Appendix A: the keys (A.2.1, A.2.2, A.2.3) and tokens (A.3, A.4, A.5).
const A21_KEY: &str = "231f4c4d4d3051fdc2ec0a3851d5b383";
const A22_KEY: &str = "403697de87af64611c1d32a05dab0fe1fcb715a86ab435f1ec99192d79569388";
const A23_X: &str = "143329cce7868e416927599cf65a34f3ce2ffda55a7eca69ed8919a394d42f0f";
const A23_Y: &str = "60f7f1a780d8a783bfb7a2dd6b2796e8128dbbcef9d3d168db9529971a36e7b9";
const A3_SIGNED: &str = "d28443a10126a104524173796d6d657472696345434453413235365850a70175636f61703a2f2f61732e6578616d706c652e636f6d02656572696b77037818636f61703a2f2f6c696768742e6578616d706c652e636f6d041a5612aeb0051a5610d9f0061a5610d9f007420b7158405427c1ff28d23fbad1f29c4c7c6a555e601d6fa29f9179bc3d7438bacaca5acd08c8d4d4f96131680c429a01f85951ecee743a52b9b63632c57209120e1c9e30";
const A4_MACED: &str = "d83dd18443a10104a1044c53796d6d65747269633235365850a70175636f61703a2f2f61732e6578616d706c652e636f6d02656572696b77037818636f61703a2f2f6c696768742e6578616d706c652e636f6d041a5612aeb0051a5610d9f0061a5610d9f007420b7148093101ef6d789200";
const A5_ENCRYPTED: &str = "d08343a1010aa2044c53796d6d6574726963313238054d99a0d7846e762c49ffe8a63e0b5858b918a11fd81e438b7f973d9e2e119bcb22424ba0f38a80f27562f400ee1d0d6c0fdb559c02421fd384fc2ebe22d7071378b0ea7428fff157444d45f7e6afcda1aae5f6495830c58627087fc5b4974f319a8707a635dd643b";

fn assert_rfc8392_a1_claims(c: &Claims<'_>) {
    assert_eq!(c.iss, Some("coap://as.example.com"));
    assert_eq!(c.aud, Some("coap://light.example.com"));
    assert_eq!(c.exp, Some(UnixTime::from_secs(1444064944)));
    assert_eq!(c.nbf, Some(UnixTime::from_secs(1443944944)));
    assert_eq!(c.iat, Some(UnixTime::from_secs(1443944944)));
    assert_eq!(c.cti, Some(&[0x0b, 0x71][..]));
    assert!(c.scope.is_none() && c.cnf.is_none());
}

#[test]
fn rfc8392_a3_signed_cwt_verifies() {
    let point = hex::decode(format!("04{A23_X}{A23_Y}")).unwrap();
    let key = PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &point).unwrap();
    let trust = AcTrust {
        signing: Some(AcSigningKey {
            kid: Some(b"AsymmetricECDSA256"),
            key,
        }),
        ..AcTrust::default()
    };
    let token = hex::decode(A3_SIGNED).unwrap();
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let (form, c) = open(&token, &trust, &RustCrypto, &mut scratch).unwrap();
    assert_eq!(form, TokenForm::Signed(SignatureAlgorithm::EcdsaP256));
    assert_rfc8392_a1_claims(&c);
    // It has no scope, which every Sigil access token needs.
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let r = validate(
        &token,
        UnixTime::from_secs(1443944944),
        "coap://light.example.com",
        &trust,
        &RustCrypto,
        &mut scratch,
    );
    assert_eq!(r.err(), Some(TokenError::MissingClaim(Claim::Scope)));
    let mut t = token.clone();
    let last = t.len() - 1;
    t[last] ^= 1;
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    assert_eq!(
        open(&t, &trust, &RustCrypto, &mut scratch).err(),
        Some(TokenError::BadSignature)
    );
}

#[test]
fn rfc8392_a5_encrypted_cwt_decrypts() {
    let key: [u8; 16] = hex::decode(A21_KEY).unwrap().try_into().unwrap();
    let trust = AcTrust {
        shared: Some(AcSharedKey {
            kid: Some(b"Symmetric128"),
            key: &key,
        }),
        ..AcTrust::default()
    };
    let token = hex::decode(A5_ENCRYPTED).unwrap();
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let (form, c) = open(&token, &trust, &RustCrypto, &mut scratch).unwrap();
    assert_eq!(form, TokenForm::Encrypted);
    assert_rfc8392_a1_claims(&c);
    let wrong = AcTrust {
        shared: Some(AcSharedKey {
            kid: Some(b"Symmetric256"),
            key: &key,
        }),
        ..AcTrust::default()
    };
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    assert_eq!(
        open(&token, &wrong, &RustCrypto, &mut scratch).err(),
        Some(TokenError::UnknownKey)
    );
}

#[test]
fn rfc8392_a4_maced_cwt_verifies() {
    let key: [u8; MAC_KEY_LEN] = hex::decode(A22_KEY).unwrap().try_into().unwrap();
    let token = hex::decode(A4_MACED).unwrap();
    // 61(17([h'a10104', {4: 'Symmetric256'}, payload, tag])): the CWT tag, then COSE_Mac0.
    assert_eq!(&token[..3], &[0xd8, 0x3d, 0xd1]);
    let trust = AcTrust {
        mac: Some(AcMacKey {
            kid: Some(b"Symmetric256"),
            key: &key,
        }),
        ..AcTrust::default()
    };
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let (form, c) = open(&token, &trust, &RustCrypto, &mut scratch).unwrap();
    assert_eq!(form, TokenForm::Maced);
    assert_rfc8392_a1_claims(&c);
    // The tag this crate computes over the RFC's protected bucket and payload is the RFC's.
    let payload = &token[25..25 + 0x50];
    assert_eq!(&token[23..25], &[0x58, 0x50]);
    let tag = hmac_256_64_tag(&RustCrypto, &key, &[0xa1, 0x01, 0x04], payload).unwrap();
    assert_eq!(hex::encode(tag), "093101ef6d789200");
    // Without the CWT tag it is the same token.
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    assert_eq!(
        open(&token[2..], &trust, &RustCrypto, &mut scratch).map(|(f, _)| f),
        Ok(TokenForm::Maced)
    );
    let mut t = token.clone();
    let last = t.len() - 1;
    t[last] ^= 1;
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    assert_eq!(
        open(&t, &trust, &RustCrypto, &mut scratch).err(),
        Some(TokenError::BadTag)
    );
    let mut other = key;
    other[0] ^= 1;
    let wrong = AcTrust {
        mac: Some(AcMacKey {
            kid: Some(b"Symmetric256"),
            key: &other,
        }),
        ..AcTrust::default()
    };
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    assert_eq!(
        open(&token, &wrong, &RustCrypto, &mut scratch).err(),
        Some(TokenError::BadTag)
    );
}

/// The sizes docs/wire-formats.md reports ("Access tokens"), next to the research figures of
/// 81 B (encrypted, key id) and 190 B (signed, public key).
#[test]
fn token_sizes() {
    // The compact claims a Sigil AC issues: aud, exp, cti, scope (one topic), cnf.
    let claims = |scope, cnf| Claims {
        aud: Some("broker"),
        iat: None,
        ..claims(scope, cnf)
    };
    // (a) encrypted, symmetric PoP key with a kid.
    let cnf = Confirmation::Symmetric {
        kid: b"c1",
        key: &PSK,
    };
    let a = encrypted(&claims(&READ_A, Some(cnf)));
    // (a') encrypted, only a kid (the research token's content).
    let a_kid = encrypted(&claims(&READ_A, Some(Confirmation::KeyId(b"c1"))));
    // (b) signed (ES256 and EdDSA), P-256 public PoP key.
    let (_, client_pk) = keypair(SignatureAlgorithm::EcdsaP256, 2);
    let cnf = Confirmation::PublicKey {
        kid: None,
        key: client_pk,
    };
    let (es_sk, _) = keypair(SignatureAlgorithm::EcdsaP256, 1);
    let (ed_sk, _) = keypair(SignatureAlgorithm::Ed25519, 1);
    let b_es = signed(&claims(&READ_A, Some(cnf)), &es_sk);
    let b_ed = signed(&claims(&READ_A, Some(cnf)), &ed_sk);
    // (c) MACed, P-256 public PoP key; (c') MACed, kid only.
    let c = maced(&claims(&READ_A, Some(cnf)));
    let c_kid = maced(&claims(&READ_A, Some(Confirmation::KeyId(b"c1"))));
    println!("encrypted, symmetric PoP key + kid: {} B", a.len());
    println!("encrypted, kid only:                {} B", a_kid.len());
    println!("signed ES256, P-256 PoP key:        {} B", b_es.len());
    println!("signed EdDSA, P-256 PoP key:        {} B", b_ed.len());
    println!("MACed, P-256 PoP key:               {} B", c.len());
    println!("MACed, kid only:                    {} B", c_kid.len());
    // Every form has a fixed layout for these claims: the docs quote these numbers.
    assert_eq!(a.len(), 104);
    assert_eq!(a_kid.len(), 82);
    assert_eq!(b_es.len(), 197);
    assert_eq!(b_ed.len(), 197);
    assert_eq!(c.len(), 140);
    assert_eq!(c_kid.len(), 68);
}

/// `sub` (RFC 8392 §3.1.2, label 2) names the client the token was issued to; it survives the
/// round trip and a second `sub` is refused like any duplicate claim.
#[test]
fn the_subject_claim_round_trips_and_appears_once() {
    let (sk, pk) = keypair(SignatureAlgorithm::Ed25519, 7);
    let with_sub = Claims {
        sub: Some("00112233445566778899aabbccddeeff"),
        ..claims(&READ_A, None)
    };
    let token = signed(&with_sub, &sk);
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    let t = validate(
        &token,
        NOW,
        AUD,
        &signing_trust(pk),
        &RustCrypto,
        &mut scratch,
    )
    .unwrap();
    assert_eq!(t.claims.sub, Some("00112233445566778899aabbccddeeff"));
    // {2: "a", 2: "b"}
    assert_eq!(
        Claims::parse(&[0xa2, 0x02, 0x61, b'a', 0x02, 0x61, b'b']).unwrap_err(),
        TokenError::Malformed(Malformed::DuplicateClaim(Claim::Sub))
    );
}
