//! The access-control server's tables against one provisioned identity that asks for tokens
//! from many addresses at once, in memory: real DTLS clients against the real dispatcher,
//! service and DTLS layer, each answer read from the server's own counters and gauges.
//!
//! - A key is bound only to a client that proved it holds it (`req_cnf_pop`), so no client has
//!   a token bound to another client's key and locks that client's own tokens out.
//! - `/token` is rate-limited per session and per subject: the signatures it makes stay within
//!   the subject's rate however many sessions ask; the tokens held for one subject stay at its
//!   cap (the oldest gives way); another client is still served.
//! - Revoking a subject drops its held tokens and `cti`s at once and gives their bytes back.

use sigil_coap::{Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::{Config, Credentials};
use sigil_identity::Identity;
use sigil_server::authz::{SUBJECT_RATE, TOKENS_PER_SUBJECT};
use sigil_server::Store;
use sigil_testkit::Seeded;

use common::{addr, run, Client, Process, Secure as Server, NOW};
use sigil_testkit::server as common;

/// The server with its access-control server (tokens live 60 s here).
fn server() -> Server {
    Server::fresh(
        |_| {},
        |_| {},
        Process {
            authority: true,
            ..Process::default()
        },
    )
}

/// A DTLS client at port `port`'s address; its message IDs count on from `port` × 1000.
fn client(port: u16, creds: Credentials<'_>, seed: u64, now: u64) -> Client {
    let mut c = Client::connect(addr(port), Config::default(), creds, seed, now);
    c.mid = port.wrapping_mul(1000);
    c
}

fn psk_client(port: u16, id: &Identity, seed: u8, now: u64) -> Client {
    let text = id.to_string();
    client(
        port,
        Credentials::Psk {
            identity: text.as_bytes(),
            key: &[seed; 16],
        },
        u64::from(seed) + u64::from(port),
        now,
    )
}

fn coap(
    code: Code,
    path: &[&str],
    mid: u16,
    content_format: Option<u16>,
    payload: &[u8],
) -> Vec<u8> {
    let mut buf = [0u8; 1400];
    let mut b = MessageBuilder::new(&mut buf, MessageType::Confirmable, code, mid, &[2]).unwrap();
    for p in path {
        b.uri_path(p).unwrap();
    }
    if let Some(cf) = content_format {
        b.uint_option(12, u32::from(cf)).unwrap();
    }
    let n = b.finish_with_payload(payload).unwrap();
    buf[..n].to_vec()
}

/// The body of a `/token` request for `rd` at this server, binding `bind`'s key if given,
/// with the proof of possession `pop_for` names (the client whose identity the key signs).
fn token_request(bind: Option<(&SecretKey, &Identity)>, with_proof: bool) -> Vec<u8> {
    let entries = [sigil_ace::ScopeEntry {
        object: "rd",
        permissions: sigil_ace::Permissions::READ,
    }];
    let key = bind.map(|(sk, _)| RustCrypto.public_key(sk).unwrap());
    let sig = match (bind, &key) {
        (Some((sk, client)), Some(pk)) if with_proof => {
            let mut input = [0u8; sigil_ace::REQ_CNF_POP_INPUT_MAX];
            let n = sigil_ace::req_cnf_pop_input(&client.to_string(), pk, &mut input).unwrap();
            Some(RustCrypto.sign(sk, &input[..n]).unwrap())
        }
        _ => None,
    };
    let mut body = [0u8; 512];
    let n = sigil_ace::TokenRequest {
        scope: Some(sigil_ace::Scope::new(&entries)),
        req_cnf: key.map(|key| sigil_ace::Confirmation::PublicKey { kid: None, key }),
        req_cnf_pop: sig.as_ref().map(|s| &s.0[..]),
        ..Default::default()
    }
    .encode(&mut body)
    .unwrap();
    body[..n].to_vec()
}

/// Sends `req` inside `c`'s session; the answer's code and payload.
fn exchange(s: &mut Server, c: &mut Client, req: &[u8], now: &mut u64) -> (Code, Vec<u8>) {
    let before = c.inbox.len();
    c.send(req);
    run(s, &mut [&mut *c], now, 300);
    assert_eq!(c.inbox.len(), before + 1, "one answer");
    let m = Message::parse(c.inbox.last().unwrap()).unwrap();
    (m.code, m.payload.to_vec())
}

fn ask_token(s: &mut Server, c: &mut Client, body: &[u8], now: &mut u64) -> (Code, Vec<u8>) {
    let mid = c.next_mid();
    exchange(
        s,
        c,
        &coap(Code::POST, &["token"], mid, Some(19), body),
        now,
    )
}

fn post_token(s: &mut Server, c: &mut Client, token: &[u8], now: &mut u64) -> (Code, Vec<u8>) {
    let mid = c.next_mid();
    exchange(
        s,
        c,
        &coap(Code::POST, &["authz-info"], mid, Some(61), token),
        now,
    )
}

fn description(body: &[u8]) -> String {
    sigil_ace::AceError::parse(body)
        .ok()
        .and_then(|e| e.description)
        .unwrap_or_default()
        .to_string()
}

/// Another provisioned client (identity 42) at port `port` makes a session within `for_ms`
/// and is issued a token.
fn another_client_gets_a_token(s: &mut Server, port: u16, for_ms: u64, now: &mut u64) {
    let h = s.provision_psk(42, &[42; 16]);
    let mut ch = psk_client(port, &h, 42, *now);
    run(s, &mut [&mut ch], now, for_ms);
    let (code, body) = ask_token(s, &mut ch, &token_request(None, false), now);
    assert_eq!(code, Code::CREATED, "{}", description(&body));
}

fn p256(seed: u64) -> SecretKey {
    RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Seeded(seed))
        .unwrap()
}

/// Finding: any provisioned client could have a token bound to another client's public PoP key
/// (it is in clear in that client's signed token) and post it first; the victim's own token
/// was then refused `other_subject` for the token's lifetime. Now the AC binds a key only with
/// the client's proof that it holds it, signed over the client's own identity.
#[test]
fn a_client_gets_no_token_bound_to_another_clients_key() {
    let mut s = server();
    let mut now = 0;
    let (a, b) = (
        s.provision_psk(31, &[31; 16]),
        s.provision_psk(32, &[32; 16]),
    );
    let mut ca = psk_client(1, &a, 31, now);
    let mut cb = psk_client(2, &b, 32, now);
    run(&mut s, &mut [&mut ca, &mut cb], &mut now, 3_000);
    assert!(ca.conn.is_established() && cb.conn.is_established());
    let k = p256(300);

    // A, with its proof: a signed token bound to K.
    let (code, body) = ask_token(
        &mut s,
        &mut ca,
        &token_request(Some((&k, &a)), true),
        &mut now,
    );
    assert_eq!(code, Code::CREATED, "{}", description(&body));
    let token_a = sigil_ace::TokenResponse::parse(&body)
        .unwrap()
        .access_token
        .to_vec();

    // B asks for K without a proof: refused, counted, and the answer says why.
    let (code, body) = ask_token(
        &mut s,
        &mut cb,
        &token_request(Some((&k, &b)), false),
        &mut now,
    );
    assert_eq!(code, Code::BAD_REQUEST, "B must get no token for A's key");
    assert_eq!(
        sigil_ace::AceError::parse(&body).unwrap().code,
        sigil_ace::AceErrorCode::UnsupportedPopKey
    );
    assert!(
        description(&body).contains("req_cnf_pop"),
        "{}",
        description(&body)
    );
    assert_eq!(s.count("token.refused.pop_unproven"), 1);
    // B replays A's proof (it names A): refused too.
    let mut input = [0u8; sigil_ace::REQ_CNF_POP_INPUT_MAX];
    let kp = RustCrypto.public_key(&k).unwrap();
    let n = sigil_ace::req_cnf_pop_input(&a.to_string(), &kp, &mut input).unwrap();
    let as_proof = RustCrypto.sign(&k, &input[..n]).unwrap();
    let entries = [sigil_ace::ScopeEntry {
        object: "rd",
        permissions: sigil_ace::Permissions::READ,
    }];
    let mut replay = [0u8; 512];
    let m = sigil_ace::TokenRequest {
        scope: Some(sigil_ace::Scope::new(&entries)),
        req_cnf: Some(sigil_ace::Confirmation::PublicKey { kid: None, key: kp }),
        req_cnf_pop: Some(&as_proof.0),
        ..Default::default()
    }
    .encode(&mut replay)
    .unwrap();
    let (code, body) = ask_token(&mut s, &mut cb, &replay[..m], &mut now);
    assert_eq!(code, Code::BAD_REQUEST);
    assert!(
        description(&body).contains("does not verify"),
        "{}",
        description(&body)
    );
    assert_eq!(s.count("token.refused.pop_proof"), 1);
    assert_eq!(s.count("token.issued"), 1, "only A's token was made");

    // B's own fresh key, proven: served (the honest path).
    let kb = p256(301);
    let (code, _) = ask_token(
        &mut s,
        &mut cb,
        &token_request(Some((&kb, &b)), true),
        &mut now,
    );
    assert_eq!(code, Code::CREATED);

    // A's own token is accepted, and its key opens a session that looks the RD up.
    let (code, body) = post_token(&mut s, &mut ca, &token_a, &mut now);
    assert_eq!(code, Code::CREATED, "{}", description(&body));
    assert_eq!(s.count("authz.refused.other_subject"), 0);
    let mut holder = client(3, Credentials::RawPublicKey(Some(&k)), 303, now);
    run(&mut s, &mut [&mut holder], &mut now, 3_000);
    assert!(holder.conn.is_established(), "A's token binds K");
    let mid = holder.next_mid();
    let (code, _) = exchange(
        &mut s,
        &mut holder,
        &coap(Code::GET, &["rd-lookup", "ep"], mid, None, &[]),
        &mut now,
    );
    assert_eq!(code, Code::CONTENT);
}

/// The attack: one provisioned identity asks for tokens as fast as it can over 16
/// sessions from 16 addresses (half of them bound to fresh keys it proves, so each costs the
/// server a verification and an ECDSA signature) and posts each token it gets. What `/token`
/// issues stays within the subject's rate, the tokens held for it stay at its cap with its
/// oldest giving way, each refusal is counted and says why, and another client is served.
#[test]
fn one_identity_asking_for_tokens_from_16_addresses_gets_only_its_rate_and_its_cap() {
    let mut s = server();
    let mut now = 0;
    let m = s.provision_psk(41, &[41; 16]);
    let mut sessions: Vec<Client> = (1..=16).map(|p| psk_client(p, &m, 41, 0)).collect();
    {
        let mut all: Vec<&mut Client> = sessions.iter_mut().collect();
        run(&mut s, &mut all, &mut now, 3_000);
    }
    assert!(sessions.iter().all(|c| c.conn.is_established()));
    let start = now;
    let mut rate_limited = 0u64;
    let mut max_age_seen = false;
    let mut seed = 1000;
    // 50 rounds, one second apart: every session asks once per round and posts what it got.
    let mut pending: Vec<Option<Vec<u8>>> = vec![None; sessions.len()];
    for round in 0..50 {
        for (i, c) in sessions.iter_mut().enumerate() {
            if let Some(token) = pending[i].take() {
                let mid = c.next_mid();
                c.send(&coap(Code::POST, &["authz-info"], mid, Some(61), &token));
            }
            seed += 1;
            let body = if (round + i) % 2 == 0 {
                token_request(Some((&p256(seed), &m)), true)
            } else {
                token_request(None, false)
            };
            let mid = c.next_mid();
            c.send(&coap(Code::POST, &["token"], mid, Some(19), &body));
        }
        let before: Vec<usize> = sessions.iter().map(|c| c.inbox.len()).collect();
        {
            let mut all: Vec<&mut Client> = sessions.iter_mut().collect();
            run(&mut s, &mut all, &mut now, 1_000);
        }
        for (i, c) in sessions.iter().enumerate() {
            for raw in &c.inbox[before[i]..] {
                let msg = Message::parse(raw).unwrap();
                if msg.code == Code::CREATED && !msg.payload.is_empty() {
                    if let Ok(r) = sigil_ace::TokenResponse::parse(msg.payload) {
                        pending[i] = Some(r.access_token.to_vec());
                    }
                } else if msg.code == Code::SERVICE_UNAVAILABLE {
                    rate_limited += 1;
                    assert!(
                        description(msg.payload).starts_with("rate limited"),
                        "{}",
                        description(msg.payload)
                    );
                    max_age_seen |= msg
                        .uint_option(sigil_coap::option::MAX_AGE)
                        .is_some_and(|secs| secs >= 1);
                }
            }
        }
    }
    let elapsed_secs = (now - start) / 1000 + 1;
    let allowed = u64::from(SUBJECT_RATE.burst) + elapsed_secs / u64::from(SUBJECT_RATE.every_secs);
    let issued = s.count("token.issued");
    eprintln!(
        "{issued} tokens issued ({} signed) in {elapsed_secs} s for 800 requests; {rate_limited} refused for the rate; allowed {allowed}",
        s.count("token.signed")
    );
    assert!(
        issued <= allowed,
        "{issued} issued, the rate allows {allowed}"
    );
    assert!(s.count("token.signed") <= issued);
    assert!(
        s.count("token.signed") > 0,
        "the attack made signed tokens too"
    );
    assert_eq!(
        s.count("token.refused.rate_subject") + s.count("token.refused.rate_session"),
        rate_limited
    );
    assert!(rate_limited >= 800 - allowed);
    assert!(
        max_age_seen,
        "a rate refusal says when to ask again (Max-Age)"
    );
    // Held: at most the cap for the subject, the oldest having given way.
    assert!(
        s.count("authz.tokens_held_most_by_one_subject") <= TOKENS_PER_SUBJECT as u64,
        "{} held",
        s.count("authz.tokens_held_most_by_one_subject")
    );
    assert!(s.count("authz.tokens_held") <= TOKENS_PER_SUBJECT as u64);
    assert!(s.count("authz.gave_way.subject_cap") >= 1);
    assert!(s.count("authz.accepted") > TOKENS_PER_SUBJECT as u64);

    // Another client asks at once: served.
    another_client_gets_a_token(&mut s, 200, 3_000, &mut now);
}

/// The same identity from 256 hosts, one after the other: each host makes a session and asks
/// for a token at once. The identity holds at most `max_sessions_per_identity` (16) sessions
/// at a time (each new one closes its least recently active, `dtls.gave_way.identity_cap`), so
/// the 16 sessions of the test above are as many as it can hold; and however many hosts and
/// sessions it goes through, `/token` issues it only the subject's rate.
#[test]
fn one_identity_going_through_256_hosts_holds_16_sessions_and_gets_only_its_rate() {
    let mut s = server();
    let mut now = 0;
    let m = s.provision_psk(41, &[41; 16]);
    let start = now;
    let mut created = 0u64;
    for port in 1..=256u16 {
        let mut c = psk_client(port, &m, 41, now);
        run(&mut s, &mut [&mut c], &mut now, 200);
        assert!(c.conn.is_established(), "host {port}: a session");
        let (code, body) = ask_token(&mut s, &mut c, &token_request(None, false), &mut now);
        match code {
            Code::CREATED => created += 1,
            Code::SERVICE_UNAVAILABLE => assert!(
                description(&body).starts_with("rate limited"),
                "{}",
                description(&body)
            ),
            other => panic!("host {port}: {other:?} {}", description(&body)),
        }
    }
    let elapsed_secs = (now - start) / 1000 + 1;
    let allowed = u64::from(SUBJECT_RATE.burst) + elapsed_secs / u64::from(SUBJECT_RATE.every_secs);
    assert_eq!(s.count("token.issued"), created);
    assert!(
        created <= allowed,
        "{created} issued, the rate allows {allowed}"
    );
    assert_eq!(s.count("dtls.gave_way.identity_cap"), 256 - 16);
    s.layer.publish();
    assert_eq!(
        s.count("mem.dtls_sessions.bytes"),
        16 * sigil_server::secure::SESSION_BYTES as u64
    );

    // Another client is served meanwhile.
    another_client_gets_a_token(&mut s, 300, 300, &mut now);
}

/// Revoking a subject drops its held tokens and their `cti`s at once: the byte gauges of both
/// tables fall to what the other subject holds, and the revoked subject's token, posted before,
/// opens nothing and is refused when posted again.
#[test]
fn revoking_a_subject_drops_its_tokens_and_ctis_and_frees_their_bytes() {
    let mut s = server();
    let mut now = 0;
    let (m, o) = (
        s.provision_psk(51, &[51; 16]),
        s.provision_psk(52, &[52; 16]),
    );
    let mut cm = psk_client(1, &m, 51, now);
    let mut co = psk_client(2, &o, 52, now);
    run(&mut s, &mut [&mut cm, &mut co], &mut now, 3_000);

    // The other subject holds one token.
    let (code, body) = ask_token(&mut s, &mut co, &token_request(None, false), &mut now);
    assert_eq!(code, Code::CREATED);
    let token_o = sigil_ace::TokenResponse::parse(&body)
        .unwrap()
        .access_token
        .to_vec();
    assert_eq!(
        post_token(&mut s, &mut co, &token_o, &mut now).0,
        Code::CREATED
    );
    let others_bytes = s.count("mem.authz.tokens.bytes");
    let others_cti = s.count("mem.authz.cti.bytes");
    assert!(others_bytes > 0 && others_cti > 0);

    // The subject to revoke holds five, one of them with a session open.
    let mut first: Option<(Vec<u8>, Vec<u8>, Vec<u8>)> = None;
    for _ in 0..5 {
        let (code, body) = ask_token(&mut s, &mut cm, &token_request(None, false), &mut now);
        assert_eq!(code, Code::CREATED, "{}", description(&body));
        let r = sigil_ace::TokenResponse::parse(&body).unwrap();
        let Some(sigil_ace::Confirmation::Symmetric { kid, key }) = r.cnf else {
            panic!("a symmetric PoP key")
        };
        let token = r.access_token.to_vec();
        assert_eq!(
            post_token(&mut s, &mut cm, &token, &mut now).0,
            Code::CREATED
        );
        first.get_or_insert((token, kid.to_vec(), key.to_vec()));
    }
    let (token_m, kid, key) = first.unwrap();
    assert_eq!(s.count("authz.tokens_held"), 6);
    assert!(s.count("mem.authz.tokens.bytes") > others_bytes);
    let key16: [u8; 16] = key.try_into().unwrap();
    let mut tm = client(
        3,
        Credentials::Psk {
            identity: &kid,
            key: &key16,
        },
        53,
        now,
    );
    run(&mut s, &mut [&mut tm], &mut now, 3_000);
    assert!(tm.conn.is_established(), "the token's PSK opens a session");

    // Revoked by another connection to the database, as `sigil provision revoke` does.
    Store::open(&s.db)
        .unwrap()
        .revoke_identity(&m, NOW)
        .unwrap();
    let mid = co.next_mid();
    co.send(&coap(Code::GET, &["rd-lookup", "ep"], mid, None, &[]));
    let before = co.inbox.len();
    run(&mut s, &mut [&mut co, &mut tm, &mut cm], &mut now, 300);
    assert_eq!(co.inbox.len(), before + 1);
    assert_eq!(
        Message::parse(co.inbox.last().unwrap()).unwrap().code,
        Code::CONTENT,
        "the other subject's session goes on"
    );
    assert_eq!(s.count("authz.tokens_held"), 1);
    assert_eq!(
        s.count("mem.authz.tokens.bytes"),
        others_bytes,
        "the token table holds what the other subject holds"
    );
    assert_eq!(
        s.count("mem.authz.cti.bytes"),
        others_cti,
        "the replay cache holds what the other subject holds"
    );
    assert_eq!(s.count("authz.dropped.revoked"), 10, "5 tokens and 5 ctis");

    // The revoked subject's token: its session ended, a new one is not opened, and the token
    // posted again is refused as revoked.
    assert!(!tm.conn.is_established(), "the token's session ended");
    assert!(!cm.conn.is_established(), "and the subject's own");
    let mut again = client(
        4,
        Credentials::Psk {
            identity: &kid,
            key: &key16,
        },
        54,
        now,
    );
    run(&mut s, &mut [&mut again], &mut now, 3_000);
    assert!(
        !again.conn.is_established(),
        "the dropped token's PSK opens nothing"
    );
    let (code, body) = post_token(&mut s, &mut co, &token_m, &mut now);
    assert_eq!(code, Code::UNAUTHORIZED);
    assert_eq!(description(&body), "revoked");
    assert_eq!(s.count("mem.authz.tokens.bytes"), others_bytes);
}
