//! A sensor as resource server: every refusal of `/authz-info` and of a request carries its
//! reason and response code, budgets hold, and a token grants exactly the resources it names.

use sigil_ace::rs::{
    HostKey, IntakeError, Method, Refusal, ResourceServer, RsLimits, CTI_ENTRY_BYTES,
    TOKEN_ENTRY_BYTES,
};
use sigil_ace::{
    encode_maced, encode_signed, AceError, AceErrorCode, Claim, Claims, Confirmation, Malformed,
    Permissions, Scope, ScopeEntry, TokenError, MAX_TOKEN_LEN,
};
use sigil_crypto::{
    CryptoError, CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey, SignatureAlgorithm,
};
use sigil_time::UnixTime;

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
const SENSOR: &str = "00112233445566778899aabbccddeeff";
const OTHER_SENSOR: &str = "ffeeddccbbaa99887766554433221100";
const RESOURCES: &[&str] = &["reading", "history"];
const HOST_A: HostKey = [1; 16];
const HOST_B: HostKey = [2; 16];

fn keypair(alg: SignatureAlgorithm, seed: u64) -> (SecretKey, PublicKey) {
    let sk = RustCrypto.generate(alg, &mut TestRng(seed)).unwrap();
    let pk = RustCrypto.public_key(&sk).unwrap();
    (sk, pk)
}

struct Setup {
    ac: SecretKey,
    ac_pub: PublicKey,
    client: PublicKey,
}

fn setup() -> Setup {
    let (ac, ac_pub) = keypair(SignatureAlgorithm::Ed25519, 1);
    let (_, client) = keypair(SignatureAlgorithm::EcdsaP256, 2);
    Setup { ac, ac_pub, client }
}

/// The token the AC issues for a sensor audience: signed, `aud`, `scope`, `exp`, `cti`,
/// `iss`, `cnf` with the client's public key.
struct Mint<'a> {
    aud: &'a str,
    scope: &'a [ScopeEntry<'a>],
    exp: UnixTime,
    cti: Option<&'a [u8]>,
    cnf: Option<Confirmation<'a>>,
}

fn mint(key: &SecretKey, m: &Mint<'_>) -> Vec<u8> {
    let claims = Claims {
        iss: Some("aabbccddeeff00112233445566778899"),
        sub: None,
        aud: Some(m.aud),
        exp: Some(m.exp),
        nbf: None,
        iat: Some(NOW),
        cti: m.cti,
        scope: Some(Scope::new(m.scope)),
        cnf: m.cnf,
    };
    let mut out = [0u8; MAX_TOKEN_LEN];
    let n = encode_signed(&claims, None, key, &RustCrypto, &mut out).unwrap();
    out[..n].to_vec()
}

const READ_SENSOR: [ScopeEntry<'static>; 1] = [ScopeEntry {
    object: SENSOR,
    permissions: Permissions::READ,
}];

fn good<'a>(s: &Setup, cti: &'a [u8], scope: &'a [ScopeEntry<'a>]) -> Mint<'a> {
    Mint {
        aud: SENSOR,
        scope,
        exp: UnixTime::from_secs(NOW.as_secs() + 600),
        cti: Some(cti),
        cnf: Some(Confirmation::PublicKey {
            kid: None,
            key: s.client,
        }),
    }
}

type Rs<'a> = ResourceServer<'a, 4, 8>;

/// A resource server whose verification budget these tests, posting many tokens in one
/// second, do not reach (`verifications_budget_per_second_*` test the budget).
fn rs(s: &Setup) -> Rs<'static> {
    ResourceServer::new(
        SENSOR,
        s.ac_pub,
        RESOURCES,
        unmetered(RsLimits::for_entries(4, 8, 2)),
    )
}

fn unmetered(limits: RsLimits) -> RsLimits {
    RsLimits {
        verifications_per_sec: u16::MAX,
        verifications_per_host_per_sec: u16::MAX,
        ..limits
    }
}

#[test]
fn valid_token_is_kept_and_grants_the_sensor_resources() {
    let s = setup();
    let mut rs = rs(&s);
    let token = mint(&s.ac, &good(&s, b"cti-0001", &READ_SENSOR));
    let a = rs.authz_info(&RustCrypto, NOW, HOST_A, &token).unwrap();
    assert_eq!(a.key, s.client);
    assert!(!a.replaced);
    assert_eq!(rs.tokens(), 1);
    for r in RESOURCES {
        assert_eq!(rs.authorize(NOW, Some(&s.client), r, Method::Get), Ok(()));
    }
    // READ grants GET only.
    assert_eq!(
        rs.authorize(NOW, Some(&s.client), "reading", Method::Put),
        Err(Refusal::Forbidden)
    );
    assert_eq!(
        rs.authorize(NOW, Some(&s.client), "config", Method::Get),
        Err(Refusal::NotFound)
    );
    assert_eq!(rs.counters.tokens_accepted, 1);
    assert_eq!(rs.counters.requests_allowed, 2);
}

#[test]
fn expired_token_is_refused_at_intake_with_its_time() {
    let s = setup();
    let mut rs = rs(&s);
    let mut m = good(&s, b"cti-exp", &READ_SENSOR);
    m.exp = NOW;
    let e = rs
        .authz_info(&RustCrypto, NOW, HOST_A, &mint(&s.ac, &m))
        .unwrap_err();
    assert_eq!(
        e,
        IntakeError::Token(TokenError::Expired { exp: NOW, now: NOW })
    );
    assert_eq!(e.response_code(), (4, 1));
    assert_eq!(rs.counters.tokens_invalid, 1);
    assert_eq!(rs.tokens(), 0);
}

#[test]
fn token_expiring_inside_a_session_is_refused_from_its_exp_on() {
    let s = setup();
    let mut rs = rs(&s);
    let m = good(&s, b"cti-live", &READ_SENSOR);
    let exp = m.exp;
    rs.authz_info(&RustCrypto, NOW, HOST_A, &mint(&s.ac, &m))
        .unwrap();
    let before = UnixTime::from_secs(exp.as_secs() - 1);
    assert_eq!(
        rs.authorize(before, Some(&s.client), "reading", Method::Get),
        Ok(())
    );
    let r = rs.authorize(exp, Some(&s.client), "reading", Method::Get);
    assert_eq!(r, Err(Refusal::Expired { exp }));
    assert_eq!(r.unwrap_err().response_code(), (4, 1));
    // Dropped: afterwards the key has no token at all.
    assert_eq!(rs.tokens(), 0);
    assert_eq!(
        rs.authorize(before, Some(&s.client), "reading", Method::Get),
        Err(Refusal::NoToken)
    );
}

#[test]
fn wrong_audience_is_refused() {
    let s = setup();
    let mut rs = rs(&s);
    let mut m = good(&s, b"cti-aud", &READ_SENSOR);
    m.aud = OTHER_SENSOR;
    let e = rs
        .authz_info(&RustCrypto, NOW, HOST_A, &mint(&s.ac, &m))
        .unwrap_err();
    assert_eq!(e, IntakeError::Token(TokenError::WrongAudience));
    // A valid token for another resource server: 4.03 (RFC 9200 §5.10.1.1).
    assert_eq!(e.response_code(), (4, 3));
}

#[test]
fn scope_for_another_sensor_is_accepted_but_grants_nothing_here() {
    let s = setup();
    let mut rs = rs(&s);
    let scope = [ScopeEntry {
        object: OTHER_SENSOR,
        permissions: Permissions::READ,
    }];
    rs.authz_info(
        &RustCrypto,
        NOW,
        HOST_A,
        &mint(&s.ac, &good(&s, b"c1", &scope)),
    )
    .unwrap();
    let r = rs.authorize(NOW, Some(&s.client), "reading", Method::Get);
    assert_eq!(r, Err(Refusal::Forbidden));
    assert_eq!(r.unwrap_err().response_code(), (4, 3));
    assert_eq!(rs.counters.requests_forbidden, 1);
}

#[test]
fn publish_only_scope_does_not_grant_read() {
    let s = setup();
    let mut rs = rs(&s);
    let scope = [ScopeEntry {
        object: SENSOR,
        permissions: Permissions::PUBLISH,
    }];
    rs.authz_info(
        &RustCrypto,
        NOW,
        HOST_A,
        &mint(&s.ac, &good(&s, b"c1", &scope)),
    )
    .unwrap();
    assert_eq!(
        rs.authorize(NOW, Some(&s.client), "reading", Method::Get),
        Err(Refusal::Forbidden)
    );
}

#[test]
fn a_client_allowed_one_resource_cannot_read_another() {
    let s = setup();
    let mut rs = rs(&s);
    let object = format!("{SENSOR}/reading");
    let scope = [ScopeEntry {
        object: &object,
        permissions: Permissions::READ,
    }];
    rs.authz_info(
        &RustCrypto,
        NOW,
        HOST_A,
        &mint(&s.ac, &good(&s, b"c1", &scope)),
    )
    .unwrap();
    assert_eq!(
        rs.authorize(NOW, Some(&s.client), "reading", Method::Get),
        Ok(())
    );
    assert_eq!(
        rs.authorize(NOW, Some(&s.client), "history", Method::Get),
        Err(Refusal::Forbidden)
    );
    // A prefix of the identity is not the identity.
    let near = format!("{SENSOR}x");
    let scope = [ScopeEntry {
        object: &near,
        permissions: Permissions::READ,
    }];
    rs.authz_info(
        &RustCrypto,
        NOW,
        HOST_A,
        &mint(&s.ac, &good(&s, b"c2", &scope)),
    )
    .unwrap();
    assert_eq!(
        rs.authorize(NOW, Some(&s.client), "reading", Method::Get),
        Err(Refusal::Forbidden)
    );
}

#[test]
fn token_signed_by_a_key_that_is_not_the_acs_is_refused() {
    let s = setup();
    let mut rs = rs(&s);
    // Same algorithm, another key: the signature does not verify under the AC's key.
    let (other, _) = keypair(SignatureAlgorithm::Ed25519, 9);
    let e = rs
        .authz_info(
            &RustCrypto,
            NOW,
            HOST_A,
            &mint(&other, &good(&s, b"c1", &READ_SENSOR)),
        )
        .unwrap_err();
    assert_eq!(e, IntakeError::Token(TokenError::BadSignature));
    // Another algorithm: a key the AC does not have.
    let (p256, _) = keypair(SignatureAlgorithm::EcdsaP256, 10);
    let e = rs
        .authz_info(
            &RustCrypto,
            NOW,
            HOST_A,
            &mint(&p256, &good(&s, b"c2", &READ_SENSOR)),
        )
        .unwrap_err();
    assert_eq!(e, IntakeError::Token(TokenError::UnknownKey));
    assert_eq!(e.response_code(), (4, 1));
    // A MACed token: this server trusts no shared key.
    let claims = Claims {
        aud: Some(SENSOR),
        exp: Some(UnixTime::from_secs(NOW.as_secs() + 60)),
        cti: Some(b"c3"),
        scope: Some(Scope::new(&READ_SENSOR)),
        ..Claims::new()
    };
    let mut out = [0u8; MAX_TOKEN_LEN];
    let n = encode_maced(&claims, None, &[7; 32], &RustCrypto, &mut out).unwrap();
    let e = rs
        .authz_info(&RustCrypto, NOW, HOST_A, &out[..n])
        .unwrap_err();
    assert_eq!(e, IntakeError::Token(TokenError::UnknownKey));
    assert_eq!(rs.counters.tokens_invalid, 3);
    assert_eq!(rs.tokens(), 0);
    assert_eq!(rs.remembered_ctis(), 0);
}

#[test]
fn tampered_signature_and_claims_are_refused() {
    let s = setup();
    let mut rs = rs(&s);
    let token = mint(&s.ac, &good(&s, b"c1", &READ_SENSOR));
    let mut sig = token.clone();
    *sig.last_mut().unwrap() ^= 1;
    assert_eq!(
        rs.authz_info(&RustCrypto, NOW, HOST_A, &sig),
        Err(IntakeError::Token(TokenError::BadSignature))
    );
    // One byte of the claims (inside the payload) changed.
    let mut claims = token.clone();
    let at = token.len() - 64 - 10;
    claims[at] ^= 0x01;
    assert_eq!(
        rs.authz_info(&RustCrypto, NOW, HOST_A, &claims),
        Err(IntakeError::Token(TokenError::BadSignature))
    );
    // The genuine token still goes through: refusals left no trace.
    rs.authz_info(&RustCrypto, NOW, HOST_A, &token).unwrap();
}

#[test]
fn replayed_token_is_refused_even_after_its_key_got_a_new_one() {
    let s = setup();
    let mut rs = rs(&s);
    let first = mint(&s.ac, &good(&s, b"cti-A", &READ_SENSOR));
    rs.authz_info(&RustCrypto, NOW, HOST_A, &first).unwrap();
    let e = rs.authz_info(&RustCrypto, NOW, HOST_B, &first).unwrap_err();
    assert_eq!(e, IntakeError::Replayed);
    assert_eq!(e.response_code(), (4, 1));
    // A new token for the same key replaces the first.
    let second = mint(&s.ac, &good(&s, b"cti-B", &READ_SENSOR));
    assert!(
        rs.authz_info(&RustCrypto, NOW, HOST_A, &second)
            .unwrap()
            .replaced
    );
    assert_eq!(rs.tokens(), 1);
    assert_eq!(
        rs.authz_info(&RustCrypto, NOW, HOST_A, &first),
        Err(IntakeError::Replayed)
    );
    assert_eq!(rs.counters.tokens_replayed, 2);
    assert_eq!(rs.counters.tokens_replaced, 1);
}

#[test]
fn oversized_token_is_refused_before_any_work() {
    let s = setup();
    let mut rs = rs(&s);
    let big = vec![0xd2; MAX_TOKEN_LEN + 1];
    let e = rs.authz_info(&RustCrypto, NOW, HOST_A, &big).unwrap_err();
    assert_eq!(
        e,
        IntakeError::Token(TokenError::Oversized {
            len: MAX_TOKEN_LEN + 1,
            max: MAX_TOKEN_LEN
        })
    );
    assert_eq!(e.response_code(), (4, 13));
    assert_eq!(rs.counters.tokens_malformed, 1);
}

#[test]
fn malformed_and_incomplete_tokens_are_bad_requests() {
    let s = setup();
    let mut rs = rs(&s);
    let e = rs
        .authz_info(&RustCrypto, NOW, HOST_A, b"\xa0")
        .unwrap_err();
    assert_eq!(
        e,
        IntakeError::Token(TokenError::Malformed(Malformed::NotCose))
    );
    assert_eq!(e.response_code(), (4, 0));
    let mut m = good(&s, b"x", &READ_SENSOR);
    m.cti = None;
    assert_eq!(
        rs.authz_info(&RustCrypto, NOW, HOST_A, &mint(&s.ac, &m)),
        Err(IntakeError::Token(TokenError::MissingClaim(Claim::Cti)))
    );
    let mut m = good(&s, b"y", &READ_SENSOR);
    m.cnf = Some(Confirmation::KeyId(b"k1"));
    let e = rs
        .authz_info(&RustCrypto, NOW, HOST_A, &mint(&s.ac, &m))
        .unwrap_err();
    assert_eq!(e, IntakeError::NoPublicPopKey);
    assert_eq!(e.response_code(), (4, 0));
    let mut m = good(&s, b"z", &READ_SENSOR);
    m.cnf = None;
    assert_eq!(
        rs.authz_info(&RustCrypto, NOW, HOST_A, &mint(&s.ac, &m)),
        Err(IntakeError::NoPublicPopKey)
    );
    // None of them was remembered: the same cti is still fresh.
    rs.authz_info(
        &RustCrypto,
        NOW,
        HOST_A,
        &mint(&s.ac, &good(&s, b"y", &READ_SENSOR)),
    )
    .unwrap();
}

#[test]
fn unknown_key_or_anonymous_peer_gets_no_access() {
    let s = setup();
    let mut rs = rs(&s);
    rs.authz_info(
        &RustCrypto,
        NOW,
        HOST_A,
        &mint(&s.ac, &good(&s, b"c", &READ_SENSOR)),
    )
    .unwrap();
    let (_, stranger) = keypair(SignatureAlgorithm::EcdsaP256, 77);
    let r = rs.authorize(NOW, Some(&stranger), "reading", Method::Get);
    assert_eq!(r, Err(Refusal::NoToken));
    assert_eq!(r.unwrap_err().response_code(), (4, 1));
    assert_eq!(
        rs.authorize(NOW, None, "reading", Method::Get),
        Err(Refusal::NoToken)
    );
}

#[test]
fn error_payload_is_the_ace_error_map_with_the_reason() {
    let mut out = [0u8; 160];
    let n = IntakeError::Replayed.encode_payload(&mut out).unwrap();
    let e = AceError::parse(&out[..n]).unwrap();
    assert_eq!(e.code, AceErrorCode::InvalidGrant);
    assert_eq!(e.description, Some("token was posted before (cti replay)"));
    let n = IntakeError::NoPublicPopKey
        .encode_payload(&mut out)
        .unwrap();
    let e = AceError::parse(&out[..n]).unwrap();
    assert_eq!(e.code, AceErrorCode::InvalidRequest);
}

fn client_key(seed: u64) -> PublicKey {
    keypair(SignatureAlgorithm::EcdsaP256, seed).1
}

#[test]
fn budgets_per_host_and_total_hold_and_entries_return_at_exp() {
    let s = setup();
    // Two tokens in all, one per host; room for four ctis.
    let limits = RsLimits {
        token_bytes: 2 * TOKEN_ENTRY_BYTES,
        token_bytes_per_host: TOKEN_ENTRY_BYTES,
        cti_bytes: 4 * (CTI_ENTRY_BYTES + 2),
        cti_bytes_per_host: 3 * (CTI_ENTRY_BYTES + 2),
        ..unmetered(RsLimits::for_entries(8, 8, 1))
    };
    let mut rs: ResourceServer<'_, 8, 8> = ResourceServer::new(SENSOR, s.ac_pub, RESOURCES, limits);
    let token = |cti: &[u8], key: PublicKey, secs: i64| {
        let m = Mint {
            exp: UnixTime::from_secs(NOW.as_secs() + secs),
            cnf: Some(Confirmation::PublicKey { kid: None, key }),
            ..good(&s, cti, &READ_SENSOR)
        };
        mint(&s.ac, &m)
    };
    rs.authz_info(&RustCrypto, NOW, HOST_A, &token(b"a1", client_key(20), 10))
        .unwrap();
    // A second key from the same host: over the host's token share.
    assert_eq!(
        rs.authz_info(&RustCrypto, NOW, HOST_A, &token(b"a2", client_key(21), 10)),
        Err(IntakeError::Busy { per_host: true })
    );
    // The same key again replaces its token (no new entry), but its cti is charged.
    rs.authz_info(&RustCrypto, NOW, HOST_A, &token(b"a3", client_key(20), 100))
        .unwrap();
    rs.authz_info(&RustCrypto, NOW, HOST_A, &token(b"a4", client_key(20), 100))
        .unwrap();
    // Host A's cti share is used up (a1, a3, a4).
    assert_eq!(
        rs.authz_info(&RustCrypto, NOW, HOST_A, &token(b"a5", client_key(20), 100)),
        Err(IntakeError::Busy { per_host: true })
    );
    rs.authz_info(&RustCrypto, NOW, HOST_B, &token(b"b1", client_key(22), 100))
        .unwrap();
    // The whole cti cache is full now.
    assert_eq!(
        rs.authz_info(&RustCrypto, NOW, HOST_B, &token(b"b2", client_key(22), 100)),
        Err(IntakeError::Busy { per_host: false })
    );
    assert_eq!(rs.charged().1, 4 * (CTI_ENTRY_BYTES + 2));
    assert_eq!(
        rs.poll_timeout(),
        Some(UnixTime::from_secs(NOW.as_secs() + 10))
    );
    // a1 expires: its cti's bytes come back and host A may post again.
    let later = UnixTime::from_secs(NOW.as_secs() + 10);
    rs.authz_info(
        &RustCrypto,
        later,
        HOST_A,
        &token(b"a6", client_key(20), 100),
    )
    .unwrap();
    assert_eq!(rs.counters.tokens_busy, 3);
    assert!(rs.charged().0 <= 2 * TOKEN_ENTRY_BYTES);
}

/// The sizes docs/wire-formats.md gives for a sensor audience: run with `--nocapture`.
#[test]
fn sensor_token_sizes() {
    let (_, client) = keypair(SignatureAlgorithm::EcdsaP256, 2);
    let (_, client_ed) = keypair(SignatureAlgorithm::Ed25519, 3);
    let iss = "aabbccddeeff00112233445566778899";
    for (ac_alg, name) in [
        (SignatureAlgorithm::EcdsaP256, "ES256"),
        (SignatureAlgorithm::Ed25519, "EdDSA"),
    ] {
        let (ac, _) = keypair(ac_alg, 1);
        for (pop, pop_name) in [(client, "P-256"), (client_ed, "Ed25519")] {
            let claims = Claims {
                iss: Some(iss),
                sub: None,
                aud: Some(SENSOR),
                exp: Some(UnixTime::from_secs(NOW.as_secs() + 3600)),
                iat: None,
                nbf: None,
                cti: Some(&[0x5a; 8]),
                scope: Some(Scope::new(&READ_SENSOR)),
                cnf: Some(Confirmation::PublicKey {
                    kid: None,
                    key: pop,
                }),
            };
            let mut out = [0u8; MAX_TOKEN_LEN];
            let n = encode_signed(&claims, None, &ac, &RustCrypto, &mut out).unwrap();
            let claims_len = claims.encode(&mut [0u8; MAX_TOKEN_LEN]).unwrap();
            println!("signed {name}, {pop_name} PoP key: token {n} bytes, claims {claims_len}");
            assert!(n <= MAX_TOKEN_LEN);
        }
    }
    let mut out = [0u8; 160];
    for e in [
        IntakeError::Replayed,
        IntakeError::Token(TokenError::WrongAudience),
        IntakeError::NoPublicPopKey,
    ] {
        let n = e.encode_payload(&mut out).unwrap();
        println!("refusal {:?}: payload {n} bytes", e.response_code());
    }
}

/// Forged tokens from 256 hosts in one second cost at most the second's verifications (4) and
/// the newcomers' one; malformed tokens and tokens of another algorithm cost none; the next
/// second an honest newcomer's token is checked and accepted; one host's flood leaves the rest
/// of the second to another host.
#[test]
fn verifications_budget_per_second_holds_against_many_hosts() {
    let s = setup();
    let mut rs: Rs<'static> =
        ResourceServer::new(SENSOR, s.ac_pub, RESOURCES, RsLimits::for_entries(4, 8, 2));
    let forged = forged_token(&s);
    let other_alg = {
        let (p256, _) = keypair(SignatureAlgorithm::EcdsaP256, 98);
        mint(&p256, &good(&s, b"p256", &READ_SENSOR))
    };
    let mut answers = std::collections::BTreeMap::new();
    for i in 0..256 {
        let r = rs.authz_info(&RustCrypto, NOW, host(i), &forged);
        let code = r.map_or_else(|e| e.response_code(), |_| (2, 1));
        *answers.entry(code).or_insert(0) += 1;
        // Garbage, and a token under another algorithm, cost nothing.
        assert!(rs
            .authz_info(&RustCrypto, NOW, host(i), &[0x82, 1, 2])
            .is_err());
        assert_eq!(
            rs.authz_info(&RustCrypto, NOW, host(i), &other_alg),
            Err(IntakeError::Token(TokenError::UnknownKey))
        );
    }
    assert_eq!(rs.counters.verifications, 5, "{answers:?}");
    assert_eq!(
        answers.get(&(4, 1)),
        Some(&5),
        "four, and a newcomer's, checked"
    );
    assert_eq!(
        answers.get(&(5, 3)),
        Some(&251),
        "the rest refused unchecked"
    );
    assert_eq!(rs.counters.tokens_verify_budget, 251);
    // The next second: an honest newcomer's token is checked and kept.
    let next = UnixTime::from_secs(NOW.as_secs() + 1);
    let honest = mint(&s.ac, &good(&s, b"honest", &READ_SENSOR));
    assert!(rs
        .authz_info(&RustCrypto, next, host(1000), &honest)
        .is_ok());
    assert_eq!(rs.counters.verifications, 6);
    // One host's flood takes its 2 of the second; another host still gets checked.
    let later = UnixTime::from_secs(NOW.as_secs() + 2);
    for _ in 0..10 {
        let _ = rs.authz_info(&RustCrypto, later, host(7), &forged);
    }
    assert_eq!(rs.counters.verifications, 8);
    let other = mint(&s.ac, &good(&s, b"other", &READ_SENSOR));
    let e = rs
        .authz_info(&RustCrypto, later, host(7), &other)
        .unwrap_err();
    assert_eq!(e, IntakeError::VerifyBudget { per_host: true });
    assert!(e.to_string().contains("this host"));
    assert!(rs.authz_info(&RustCrypto, later, host(8), &other).is_ok());
    assert_eq!(rs.counters.verifications, 9);
}

/// Hosts that keep the second's verifications spent do not lock a newcomer out: it is checked
/// on its first post of any second, from the newcomers' verification; accepted tokens give
/// their verification back, so honest posts never spend the budget.
#[test]
fn a_newcomer_gets_through_hosts_that_keep_the_budget_spent() {
    let s = setup();
    let mut rs: ResourceServer<'static, 4, 32> =
        ResourceServer::new(SENSOR, s.ac_pub, RESOURCES, RsLimits::for_entries(4, 32, 1));
    let forged = forged_token(&s);
    for sec in 0..10 {
        let now = UnixTime::from_secs(NOW.as_secs() + sec);
        // Two hosts, two forged tokens each: the second's four.
        for i in [1, 2, 1, 2] {
            assert!(rs.authz_info(&RustCrypto, now, host(i), &forged).is_err());
        }
        let cti = format!("newcomer-{sec}");
        let honest = mint(&s.ac, &good(&s, cti.as_bytes(), &READ_SENSOR));
        let r = rs.authz_info(&RustCrypto, now, host(100 + sec as u32), &honest);
        assert!(r.is_ok(), "second {sec}: {r:?}");
        // Accepted: its verification is given back, and the next honest host gets one too.
        let cti = format!("second-{sec}");
        let honest = mint(&s.ac, &good(&s, cti.as_bytes(), &READ_SENSOR));
        let r = rs.authz_info(&RustCrypto, now, host(200 + sec as u32), &honest);
        assert!(r.is_ok(), "second {sec}, another newcomer: {r:?}");
    }
    assert_eq!(rs.counters.tokens_accepted, 20);
}

/// A host key for loopback address 127.0.0.0 + `i` (IPv4-mapped).
fn host(i: u32) -> HostKey {
    let mut h = [0u8; 16];
    h[10..12].copy_from_slice(&[0xff, 0xff]);
    h[12..].copy_from_slice(&(0x7f00_0000 | i).to_be_bytes());
    h
}

/// A well-formed token signed by a key the resource server does not trust.
fn forged_token(s: &Setup) -> Vec<u8> {
    let (other, _) = keypair(SignatureAlgorithm::Ed25519, 99);
    mint(&other, &good(s, b"forged", &READ_SENSOR))
}
