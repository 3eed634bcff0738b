//! The access-control server (ACE, RFC 9200) and this server's side of the DTLS profile
//! (RFC 9202) as a resource server.
//!
//! - `POST /token` (coaps:// only): a client authenticated by its session asks for a token for
//!   an audience (this server's broker and RD, or a sensor that serves its own readings) and a
//!   scope. The policy is the one `sigil provision grant` keeps: a client may read the sensors
//!   and kits it was granted, and itself; every authenticated identity may look up the RD; a
//!   device may publish to its own topic. For this server the token is a COSE_Encrypt0 under
//!   the AC-RS key carrying a fresh symmetric PoP key (the client's DTLS PSK, kid chosen here),
//!   or, when the client asks with `req_cnf` or holds a raw-public-key session, a COSE_Sign1
//!   binding that public key. For a sensor it is always signed, with the client's public key:
//!   the sensor checks it offline with the server key it was paired with. A key is bound only
//!   to a client that proved it holds it: its session's own raw public key, or any other with
//!   `req_cnf_pop` (the key's signature over the client's identity and the key). Requests are
//!   rate-limited per session and per subject ([`Tokens::take_request`]) before anything that
//!   costs a signature or a verification.
//! - `POST /authz-info` (coap:// or coaps://): a token for this server is checked (AC key,
//!   audience, expiry, its `cti` never seen before, its subject still authorized) and kept
//!   until it expires, keyed by its PoP key. A DTLS handshake with that PSK (identity = kid) or
//!   raw public key then gives a session whose reads the token's scope allows
//!   ([`Tokens::allows`]).
//!
//! Both tables here (tokens, and the `cti` replay cache) are filled by peers, so both are
//! charged in bytes per source host and in total ([`crate::budget`]); tokens are also capped
//! per subject (the subject's oldest gives way), and a revoked subject's tokens and `cti`s are
//! dropped when the server learns of the revocation ([`Tokens::forget_subjects`]).

use crate::budget::{ByteBudget, Caps, Host, ENTRY_OVERHEAD};
use crate::stats::Stats;
use sigil_ace::{
    encode_encrypted, encode_signed, validate, AcSharedKey, AcSigningKey, AcTrust, AceError,
    AceErrorCode, Claims, Confirmation, Permissions, Scope, ScopeEntry, TokenError, TokenForm,
    MAX_TOKEN_LEN,
};
use sigil_crypto::{CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey};
use sigil_identity::Identity;
use sigil_time::UnixTime;
use std::collections::HashMap;

/// The first byte of every kid this AC makes for a symmetric PoP key: `~`, which no identity's
/// text form holds (hex digits and the separators `-`, `:`, `_`, space), so a PSK identity
/// that starts with it is never taken for a provisioned identity.
pub const KID_PREFIX: u8 = b'~';
/// Bytes of a kid: the prefix and 8 random bytes as 16 lower-case hex digits. Every byte is
/// printable ASCII and none is zero, so C stacks that take the PSK identity as a C string
/// (OpenSSL, GnuTLS, libcoap's `coap-client -u`) use it as it is (RFC 9202 §3.3).
pub const KID_LEN: usize = 17;
/// Bytes of a symmetric PoP key (the DTLS PSK the token names).
pub const POP_KEY_LEN: usize = 16;
/// Bytes of a token's `cti`.
pub const CTI_LEN: usize = 8;

/// The AC: the keys it protects tokens with and how long they live.
///
/// A token it makes carries `sub` (the client), `aud`, `exp`, `cti` (8 random bytes), `scope`
/// and `cnf`.
pub struct Authority {
    /// The server's long-term key (the one DTLS presents and pairing messages are signed with):
    /// it signs tokens, and sensors check them with it.
    key: SecretKey,
    public: PublicKey,
    /// The server's identity `h(P)` in text form: the audience that names this server's broker
    /// and RD.
    audience: String,
    /// The key encrypted tokens for this server are protected with (the AC and the RS are one
    /// process; it is kept in the database so tokens survive a restart).
    rs_key: [u8; 16],
    /// The kid of the AC's signing key in the tokens it signs.
    kid: [u8; 4],
    /// Seconds a token is valid.
    pub lifetime: u32,
    rng: Box<dyn Rng + Send>,
}

impl Authority {
    pub fn new(
        key: SecretKey,
        rs_key: [u8; 16],
        lifetime: u32,
        rng: Box<dyn Rng + Send>,
    ) -> Result<Self, sigil_crypto::CryptoError> {
        let public = RustCrypto.public_key(&key)?;
        let identity = Identity::of_key(&RustCrypto, &public, b"")
            .map_err(|_| sigil_crypto::CryptoError::InvalidKey)?;
        let mut kid = [0u8; 4];
        kid.copy_from_slice(&identity.as_bytes()[..4]);
        Ok(Self {
            key,
            public,
            audience: identity.to_string(),
            kid,
            rs_key,
            lifetime: lifetime.max(1),
            rng,
        })
    }

    /// The audience naming this server (its identity in text form).
    pub fn audience(&self) -> &str {
        &self.audience
    }

    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// What this server trusts a token for itself by.
    fn trust(&self) -> AcTrust<'_> {
        AcTrust {
            signing: Some(AcSigningKey {
                kid: None,
                key: self.public,
            }),
            shared: Some(AcSharedKey {
                kid: None,
                key: &self.rs_key,
            }),
            mac: None,
        }
    }
}

/// Who a token is for and how it binds its holder.
pub enum Binding {
    /// A fresh symmetric key the AC makes (only for this server: the token is encrypted to it).
    Symmetric,
    /// The client's public key.
    PublicKey(PublicKey),
}

/// A token the AC made.
pub struct Issued {
    pub token: Vec<u8>,
    /// The symmetric PoP key and its kid, for the client (`cnf` of the response).
    pub pop: Option<(Vec<u8>, [u8; POP_KEY_LEN])>,
    pub expires_in: u32,
}

impl Authority {
    /// Makes a token for `subject` with `scope` at `audience`, valid from `now`.
    pub fn issue(
        &mut self,
        subject: &Identity,
        audience: &str,
        scope: &[(String, u32)],
        binding: Binding,
        now: UnixTime,
    ) -> Result<Issued, TokenError> {
        let mut cti = [0u8; CTI_LEN];
        self.rng.fill(&mut cti).map_err(TokenError::Crypto)?;
        let entries: Vec<ScopeEntry<'_>> = scope
            .iter()
            .map(|(o, p)| ScopeEntry {
                object: o,
                permissions: Permissions(*p),
            })
            .collect();
        let subject = subject.to_string();
        let mut kid = [0u8; KID_LEN];
        let mut psk = [0u8; POP_KEY_LEN];
        let cnf = match binding {
            Binding::PublicKey(key) => Confirmation::PublicKey { kid: None, key },
            Binding::Symmetric => {
                kid = token_kid(&mut *self.rng).map_err(TokenError::Crypto)?;
                self.rng.fill(&mut psk).map_err(TokenError::Crypto)?;
                Confirmation::Symmetric {
                    kid: &kid,
                    key: &psk,
                }
            }
        };
        // No `iss` or `iat`: every resource server knows its one AC, and `exp` is what it
        // checks; 41 bytes less per token.
        let claims = Claims {
            sub: Some(&subject),
            aud: Some(audience),
            exp: Some(UnixTime::from_secs(
                now.as_secs().saturating_add(i64::from(self.lifetime)),
            )),
            cti: Some(&cti),
            scope: Some(Scope::new(&entries)),
            cnf: Some(cnf),
            ..Claims::new()
        };
        let mut out = [0u8; MAX_TOKEN_LEN];
        let (n, pop) = match cnf {
            Confirmation::Symmetric { .. } => {
                let n = encode_encrypted(
                    &claims,
                    None,
                    &self.rs_key,
                    &RustCrypto,
                    &mut *self.rng,
                    &mut out,
                )?;
                (n, Some((kid.to_vec(), psk)))
            }
            // A signed token names the AC's key (the first 4 bytes of the server's identity),
            // as verifiers such as python-cwt require by default and key rotation needs.
            _ => (
                encode_signed(&claims, Some(&self.kid), &self.key, &RustCrypto, &mut out)?,
                None,
            ),
        };
        Ok(Issued {
            token: out[..n].to_vec(),
            pop,
            expires_in: self.lifetime,
        })
    }
}

/// A fresh kid for a symmetric PoP key: [`KID_PREFIX`], then 8 random bytes in lower-case
/// hex (docs/wire-formats.md, "Access tokens").
pub fn token_kid(rng: &mut dyn Rng) -> Result<[u8; KID_LEN], sigil_crypto::CryptoError> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut random = [0u8; (KID_LEN - 1) / 2];
    rng.fill(&mut random)?;
    let mut kid = [KID_PREFIX; KID_LEN];
    for (i, b) in random.iter().enumerate() {
        kid[1 + 2 * i] = DIGITS[usize::from(b >> 4)];
        kid[2 + 2 * i] = DIGITS[usize::from(b & 0x0f)];
    }
    Ok(kid)
}

/// How a held token binds its holder's session.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PopKey {
    /// The PSK identity (the kid) of a symmetric key.
    Kid(Vec<u8>),
    /// The identity `h(P)` of the client's raw public key.
    Key(Identity),
}

/// A token this server accepted at `/authz-info`.
#[derive(Clone, Debug)]
pub struct Held {
    /// The identity the AC issued it to.
    pub subject: Identity,
    pub exp: UnixTime,
    pub scope: Vec<(String, u32)>,
    /// The DTLS PSK of a symmetric PoP key.
    pub psk: Option<Vec<u8>>,
    host: Host,
    bytes: usize,
    /// When it was accepted, in order: at its subject's cap the oldest gives way.
    order: u64,
}

/// A `cti` of an accepted token, kept until the token expires.
struct Seen {
    exp: UnixTime,
    host: Host,
    bytes: usize,
    subject: Identity,
}

/// Why `/authz-info` refused a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Token(TokenError),
    /// The token's `cti` was posted before (RFC 9202 §3.2: a token is accepted once).
    Replayed,
    /// The token's subject is no longer on the authorized list (or it names none).
    Revoked,
    /// No `cti`, or no usable `cnf` (only a symmetric key or a public key binds a session).
    Incomplete(&'static str),
    /// The host's share or the table is full.
    Full,
    /// The PoP key holds a token issued to another client.
    OtherSubject,
}

impl Refusal {
    /// The counter (`authz.refused.<reason>`).
    pub fn counter(&self) -> &'static str {
        match self {
            Self::Token(TokenError::Expired { .. }) => "authz.refused.expired",
            Self::Token(TokenError::NotYetValid { .. }) => "authz.refused.not_yet_valid",
            Self::Token(TokenError::WrongAudience) => "authz.refused.wrong_audience",
            Self::Token(TokenError::BadSignature | TokenError::BadTag) => "authz.refused.tampered",
            Self::Token(TokenError::UnknownKey | TokenError::UnsupportedAlgorithm(_)) => {
                "authz.refused.unknown_key"
            }
            Self::Token(TokenError::Oversized { .. }) => "authz.refused.oversized",
            Self::Token(TokenError::MissingClaim(_)) => "authz.refused.incomplete",
            Self::Token(_) => "authz.refused.malformed",
            Self::Replayed => "authz.refused.replayed",
            Self::Revoked => "authz.refused.revoked",
            Self::Incomplete(_) => "authz.refused.incomplete",
            Self::Full => "authz.refused.full",
            Self::OtherSubject => "authz.refused.other_subject",
        }
    }

    /// The CoAP answer's code and its error map (RFC 9200 §5.10.1.1: 4.00 for a request that
    /// is not a token or claims that cannot be processed, 4.01 for a token that is not valid,
    /// 4.03 for a valid token for another audience, 5.03 when there is no room).
    pub fn answer(&self) -> (sigil_coap::Code, Vec<u8>) {
        use sigil_coap::Code;
        let (code, err) = match self {
            // Not a token, or claims this server cannot process.
            Self::Token(
                TokenError::Malformed(_)
                | TokenError::Oversized { .. }
                | TokenError::MissingClaim(_),
            )
            | Self::Incomplete(_) => (Code::BAD_REQUEST, AceErrorCode::InvalidRequest),
            // A valid token for another resource server.
            Self::Token(TokenError::WrongAudience) => (Code::FORBIDDEN, AceErrorCode::InvalidGrant),
            Self::Full => (Code::SERVICE_UNAVAILABLE, AceErrorCode::InvalidRequest),
            _ => (Code::UNAUTHORIZED, AceErrorCode::InvalidGrant),
        };
        let description = self.counter().trim_start_matches("authz.refused.");
        let mut buf = [0u8; 64];
        let n = AceError {
            code: err,
            description: Some(description),
        }
        .encode(&mut buf)
        .unwrap_or(0);
        (code, buf[..n].to_vec())
    }
}

/// A token bucket's size and refill: at most `burst` at once, then one every `every_secs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub burst: u32,
    pub every_secs: u32,
}

impl std::str::FromStr for Rate {
    type Err = String;

    /// `BURST,SECONDS` (`12,5`: 12 at once, then one every 5 s); both at least 1.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("{s:?}: expected BURST,SECONDS (e.g. 12,5: 12 at once, then one every 5 s)");
        let (b, e) = s.split_once(',').ok_or_else(bad)?;
        let burst: u32 = b.trim().parse().map_err(|_| bad())?;
        let e = e.trim();
        let every_secs: u32 = e
            .strip_suffix('s')
            .unwrap_or(e)
            .parse()
            .map_err(|_| bad())?;
        if burst == 0 || every_secs == 0 {
            return Err(bad());
        }
        Ok(Self { burst, every_secs })
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.burst, self.every_secs)
    }
}

/// Caps of the token table and the replay cache, and how fast `/token` issues.
#[derive(Clone, Copy, Debug)]
pub struct TokenCaps {
    pub tokens: Caps,
    pub cti: Caps,
    /// Tokens held for one subject: at the cap, the subject's oldest token gives way to its
    /// new one (its `cti` stays, so it is not accepted again).
    pub per_subject: usize,
    /// `/token` requests one subject may make, over all its sessions.
    pub subject_rate: Rate,
    /// `/token` requests one session (one peer address) may make.
    pub session_rate: Rate,
}

/// Tokens held for one subject, by default.
pub const TOKENS_PER_SUBJECT: usize = 16;
/// `/token` requests per subject, by default: 12 at once, then one every 5 s (each may cost
/// an ECDSA signature and, with `req_cnf_pop`, a verification).
pub const SUBJECT_RATE: Rate = Rate {
    burst: 12,
    every_secs: 5,
};
/// `/token` requests per session, by default: 6 at once, then one every 10 s.
pub const SESSION_RATE: Rate = Rate {
    burst: 6,
    every_secs: 10,
};
/// Sessions whose `/token` buckets are kept at once (sessions that have not asked for a while
/// are forgotten first; forgetting one only gives it a full bucket, the subject's stays).
const MAX_SESSION_BUCKETS: usize = 4096;

impl Default for TokenCaps {
    fn default() -> Self {
        Self {
            tokens: Caps {
                total: 4 << 20,
                per_host: 256 << 10,
            },
            cti: Caps {
                total: 2 << 20,
                per_host: 128 << 10,
            },
            per_subject: TOKENS_PER_SUBJECT,
            subject_rate: SUBJECT_RATE,
            session_rate: SESSION_RATE,
        }
    }
}

/// One token bucket, in thousandths of a request, refilled by the seconds passed.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    milli: u64,
    at: i64,
    /// What the seconds counted so far gained beyond whole thousandths (in thousandths of a
    /// request × `every_secs`), kept so that asking often loses nothing to rounding.
    carry: u64,
}

impl Bucket {
    fn full(rate: Rate, now: i64) -> Self {
        Self {
            milli: u64::from(rate.burst) * 1000,
            at: now,
            carry: 0,
        }
    }

    fn refill(&mut self, rate: Rate, now: i64) {
        let secs = u64::try_from(now.saturating_sub(self.at)).unwrap_or(0);
        let every = u64::from(rate.every_secs.max(1));
        let units = secs.saturating_mul(1000).saturating_add(self.carry);
        self.milli = self.milli.saturating_add(units / every);
        self.carry = units % every;
        let cap = u64::from(rate.burst) * 1000;
        if self.milli >= cap {
            self.milli = cap;
            self.carry = 0;
        }
        self.at = now;
    }

    /// Seconds until one request is in the bucket (0: there is one now).
    fn wait(&self, rate: Rate) -> u32 {
        if self.milli >= 1000 {
            return 0;
        }
        let missing = 1000 - self.milli;
        let every = u64::from(rate.every_secs.max(1));
        let units = (missing * every).saturating_sub(self.carry);
        u32::try_from(units.div_ceil(1000)).unwrap_or(u32::MAX)
    }

    fn is_full(&self, rate: Rate) -> bool {
        self.milli >= u64::from(rate.burst) * 1000
    }
}

/// Why `/token` refused a request for its rate, and when to ask again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    /// `session` or `subject`: whose bucket is empty.
    pub whose: &'static str,
    pub retry_secs: u32,
}

impl RateLimited {
    pub fn counter(&self) -> &'static str {
        match self.whose {
            "session" => "token.refused.rate_session",
            _ => "token.refused.rate_subject",
        }
    }
}

/// The tokens this server holds as a resource server, and the `cti` of every token it
/// accepted that has not expired yet.
pub struct Tokens {
    held: HashMap<PopKey, Held>,
    /// Tokens held per subject (for [`TokenCaps::per_subject`]).
    per_subject: HashMap<Identity, usize>,
    seen: HashMap<Vec<u8>, Seen>,
    budget: ByteBudget,
    cti_budget: ByteBudget,
    caps: TokenCaps,
    /// The acceptance order of the next token.
    next_order: u64,
    /// Tokens that gave way to a newer one of their subject at its cap; and tokens and `cti`s
    /// dropped because their subject was revoked.
    gave_way: u64,
    dropped_revoked: u64,
    /// `/token` buckets per subject and per session.
    subject_buckets: HashMap<Identity, Bucket>,
    session_buckets: HashMap<std::net::SocketAddr, Bucket>,
    /// When the full buckets were last forgotten (seconds).
    buckets_pruned: i64,
    /// Bumped when the set of PoP keys changes (the DTLS trust must be refreshed).
    pub generation: u64,
}

impl Default for Tokens {
    fn default() -> Self {
        Self::new(TokenCaps::default())
    }
}

impl Tokens {
    pub fn new(caps: TokenCaps) -> Self {
        Self {
            held: HashMap::new(),
            per_subject: HashMap::new(),
            seen: HashMap::new(),
            budget: ByteBudget::new("authz.tokens", caps.tokens),
            cti_budget: ByteBudget::new("authz.cti", caps.cti),
            caps,
            next_order: 0,
            gave_way: 0,
            dropped_revoked: 0,
            subject_buckets: HashMap::new(),
            session_buckets: HashMap::new(),
            buckets_pruned: i64::MIN,
            generation: 0,
        }
    }

    /// Takes one `/token` request from `subject`'s bucket and from its session's (`peer`) at
    /// `now`, or says whose bucket is empty and when to ask again. Neither bucket is charged
    /// when either is empty. Checked before anything else `/token` does.
    pub fn take_request(
        &mut self,
        subject: &Identity,
        peer: std::net::SocketAddr,
        now: UnixTime,
    ) -> Result<(), RateLimited> {
        let now = now.as_secs();
        let (sr, pr) = (self.caps.subject_rate, self.caps.session_rate);
        if !self.session_buckets.contains_key(&peer)
            && self.session_buckets.len() >= MAX_SESSION_BUCKETS
        {
            // The bucket idle longest goes (it has refilled the most).
            if let Some(oldest) = self
                .session_buckets
                .iter()
                .min_by_key(|(_, b)| b.at)
                .map(|(a, _)| *a)
            {
                self.session_buckets.remove(&oldest);
            }
        }
        let mut session = *self
            .session_buckets
            .entry(peer)
            .or_insert_with(|| Bucket::full(pr, now));
        let mut own = *self
            .subject_buckets
            .entry(*subject)
            .or_insert_with(|| Bucket::full(sr, now));
        session.refill(pr, now);
        own.refill(sr, now);
        let refused = if session.wait(pr) > 0 {
            Some(RateLimited {
                whose: "session",
                retry_secs: session.wait(pr),
            })
        } else if own.wait(sr) > 0 {
            Some(RateLimited {
                whose: "subject",
                retry_secs: own.wait(sr),
            })
        } else {
            session.milli -= 1000;
            own.milli -= 1000;
            None
        };
        self.session_buckets.insert(peer, session);
        self.subject_buckets.insert(*subject, own);
        refused.map_or(Ok(()), Err)
    }

    /// Forgets the buckets that are full again (at most once a second).
    fn prune_buckets(&mut self, now: UnixTime) {
        let now = now.as_secs();
        if now == self.buckets_pruned {
            return;
        }
        self.buckets_pruned = now;
        let (sr, pr) = (self.caps.subject_rate, self.caps.session_rate);
        self.session_buckets.retain(|_, b| {
            let mut b = *b;
            b.refill(pr, now);
            !b.is_full(pr)
        });
        self.subject_buckets.retain(|_, b| {
            let mut b = *b;
            b.refill(sr, now);
            !b.is_full(sr)
        });
        crate::budget::shrink_if_sparse(&mut self.session_buckets);
        crate::budget::shrink_if_sparse(&mut self.subject_buckets);
    }

    /// Drops every token held for a subject `keep` no longer keeps (a revoked identity), with
    /// its `cti`s and its `/token` bucket, and gives their bytes back. A dropped `cti` lets
    /// no token in again: a token of a revoked subject is refused for that first (and a
    /// reinstated subject's old token still needs its PoP key, which only its client holds).
    /// Returns how many tokens and `cti`s went.
    pub fn forget_subjects(&mut self, keep: impl Fn(&Identity) -> bool) -> (usize, usize) {
        let (mut tokens, mut ctis) = (0, 0);
        let budget = &mut self.budget;
        let per_subject = &mut self.per_subject;
        self.held.retain(|_, h| {
            if keep(&h.subject) {
                return true;
            }
            budget.refund(h.host, h.bytes);
            per_subject.remove(&h.subject);
            tokens += 1;
            false
        });
        let cti = &mut self.cti_budget;
        self.seen.retain(|_, s| {
            if keep(&s.subject) {
                return true;
            }
            cti.refund(s.host, s.bytes);
            ctis += 1;
            false
        });
        self.subject_buckets.retain(|id, _| keep(id));
        if tokens > 0 {
            self.generation += 1;
        }
        self.dropped_revoked += (tokens + ctis) as u64;
        crate::budget::shrink_if_sparse(&mut self.held);
        crate::budget::shrink_if_sparse(&mut self.seen);
        (tokens, ctis)
    }

    /// Removes the held token of `pop`, giving its bytes back.
    fn remove_held(&mut self, pop: &PopKey) -> Option<Held> {
        let h = self.held.remove(pop)?;
        self.budget.refund(h.host, h.bytes);
        if let Some(n) = self.per_subject.get_mut(&h.subject) {
            *n -= 1;
            if *n == 0 {
                self.per_subject.remove(&h.subject);
            }
        }
        Some(h)
    }

    /// Puts a token in the table (its bytes already charged).
    fn insert_held(&mut self, pop: PopKey, h: Held) {
        *self.per_subject.entry(h.subject).or_insert(0) += 1;
        self.held.insert(pop, h);
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Checks and keeps a token posted to `/authz-info` from `from` at `now`.
    /// `authorized` says whether an identity is still on the list.
    pub fn accept(
        &mut self,
        authority: &Authority,
        token: &[u8],
        from: Host,
        now: UnixTime,
        authorized: impl Fn(&Identity) -> bool,
    ) -> Result<PopKey, Refusal> {
        self.expire(now);
        let mut scratch = [0u8; MAX_TOKEN_LEN];
        let t = validate(
            token,
            now,
            &authority.audience,
            &authority.trust(),
            &RustCrypto,
            &mut scratch,
        )
        .map_err(Refusal::Token)?;
        let cti = t.claims.cti.ok_or(Refusal::Incomplete("no cti"))?;
        let subject = t
            .claims
            .sub
            .and_then(|s| Identity::parse(s).ok())
            .ok_or(Refusal::Revoked)?;
        if !authorized(&subject) {
            return Err(Refusal::Revoked);
        }
        if self.seen.contains_key(cti) {
            return Err(Refusal::Replayed);
        }
        let (pop, psk) = match t.claims.cnf {
            Some(Confirmation::Symmetric { kid, key }) => {
                // A symmetric key only ever travels encrypted (checked by `validate`).
                debug_assert!(t.form == TokenForm::Encrypted);
                (PopKey::Kid(kid.to_vec()), Some(key.to_vec()))
            }
            Some(Confirmation::PublicKey { key, .. }) => {
                let id = Identity::of_key(&RustCrypto, &key, b"")
                    .map_err(|_| Refusal::Incomplete("unusable public key"))?;
                (PopKey::Key(id), None)
            }
            _ => return Err(Refusal::Incomplete("no symmetric or public PoP key")),
        };
        let scope: Vec<(String, u32)> = t
            .scope
            .iter()
            .map(|e| (e.object.to_string(), e.permissions.0))
            .collect();
        let bytes =
            ENTRY_OVERHEAD + token.len() + scope.iter().map(|(o, _)| o.len() + 32).sum::<usize>();
        let cti_bytes = ENTRY_OVERHEAD + cti.len();
        if self.cti_budget.check(from, cti_bytes).is_err() {
            return Err(Refusal::Full);
        }
        // A newer token for the same PoP key replaces the older one (RFC 9202 §3.2.2 / §3.3.2:
        // updating access rights); its bytes are refunded first.
        // A PoP key already bound to another client's token is not taken over.
        if self.held.get(&pop).is_some_and(|h| h.subject != subject) {
            return Err(Refusal::OtherSubject);
        }
        let replaced = self.remove_held(&pop);
        if self.budget.check(from, bytes).is_err() {
            if let Some(old) = replaced {
                // Put the old one back exactly as it was.
                let _ = self.budget.charge(old.host, old.bytes);
                self.insert_held(pop, old);
            }
            return Err(Refusal::Full);
        }
        // At its subject's cap, the subject's oldest token gives way (a client that asks for
        // tokens as fast as it may displaces only its own).
        if replaced.is_none()
            && self.per_subject.get(&subject).copied().unwrap_or(0) >= self.caps.per_subject
        {
            let oldest = self
                .held
                .iter()
                .filter(|(_, h)| h.subject == subject)
                .min_by_key(|(_, h)| h.order)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.remove_held(&k);
                self.gave_way += 1;
            }
        }
        if self.budget.charge(from, bytes).is_err() {
            return Err(Refusal::Full);
        }
        let _ = self.cti_budget.charge(from, cti_bytes);
        self.seen.insert(
            cti.to_vec(),
            Seen {
                exp: t.exp,
                host: from,
                bytes: cti_bytes,
                subject,
            },
        );
        self.generation += 1;
        let order = self.next_order;
        self.next_order += 1;
        self.insert_held(
            pop.clone(),
            Held {
                subject,
                exp: t.exp,
                scope,
                psk,
                host: from,
                bytes,
                order,
            },
        );
        Ok(pop)
    }

    /// Drops every token and `cti` whose expiry has passed.
    pub fn expire(&mut self, now: UnixTime) {
        let mut changed = false;
        let budget = &mut self.budget;
        let per_subject = &mut self.per_subject;
        self.held.retain(|_, h| {
            let keep = now < h.exp;
            if !keep {
                budget.refund(h.host, h.bytes);
                if let Some(n) = per_subject.get_mut(&h.subject) {
                    *n -= 1;
                    if *n == 0 {
                        per_subject.remove(&h.subject);
                    }
                }
                changed = true;
            }
            keep
        });
        let cti = &mut self.cti_budget;
        self.seen.retain(|_, s| {
            let keep = now < s.exp;
            if !keep {
                cti.refund(s.host, s.bytes);
            }
            keep
        });
        self.prune_buckets(now);
        if changed {
            self.generation += 1;
        }
        crate::budget::shrink_if_sparse(&mut self.held);
        crate::budget::shrink_if_sparse(&mut self.seen);
        crate::budget::shrink_if_sparse(&mut self.per_subject);
    }

    /// The token a session's PoP key holds, if it is still valid at `now` for a subject that is
    /// still authorized.
    pub fn valid(
        &self,
        pop: &PopKey,
        now: UnixTime,
        authorized: impl Fn(&Identity) -> bool,
    ) -> Result<&Held, TokenCheck> {
        let h = self.held.get(pop).ok_or(TokenCheck::None)?;
        if now >= h.exp {
            return Err(TokenCheck::Expired);
        }
        if !authorized(&h.subject) {
            return Err(TokenCheck::Revoked);
        }
        Ok(h)
    }

    /// The symmetric PoP keys held, by kid, with the subject each speaks for (for the DTLS
    /// trust).
    /// Only subjects still `authorized` count: a revoked client's token opens no session.
    pub fn psks(
        &self,
        authorized: impl Fn(&Identity) -> bool,
    ) -> HashMap<Vec<u8>, (Vec<u8>, Identity)> {
        self.held
            .iter()
            .filter(|(_, h)| authorized(&h.subject))
            .filter_map(|(pop, h)| match (pop, &h.psk) {
                (PopKey::Kid(kid), Some(psk)) => Some((kid.clone(), (psk.clone(), h.subject))),
                _ => None,
            })
            .collect()
    }

    /// The identities of the raw public keys held tokens bind (for the DTLS trust).
    pub fn keys(
        &self,
        authorized: impl Fn(&Identity) -> bool,
    ) -> std::collections::HashSet<Identity> {
        self.held
            .iter()
            .filter(|(_, h)| authorized(&h.subject))
            .filter_map(|(pop, _)| match pop {
                PopKey::Key(id) => Some(*id),
                PopKey::Kid(_) => None,
            })
            .collect()
    }

    /// Publishes the gauges of both tables.
    pub fn publish(&self, stats: &Stats) {
        self.budget.publish(stats);
        self.cti_budget.publish(stats);
        stats.set("authz.tokens_held", self.held.len() as u64);
        stats.set(
            "authz.tokens_held_most_by_one_subject",
            self.per_subject.values().copied().max().unwrap_or(0) as u64,
        );
        stats.set("authz.ctis_held", self.seen.len() as u64);
        stats.set("authz.gave_way.subject_cap", self.gave_way);
        stats.set("authz.dropped.revoked", self.dropped_revoked);
    }
}

/// Why a session's token does not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenCheck {
    /// The session's key holds no token.
    None,
    Expired,
    /// The token's subject was revoked since.
    Revoked,
}

impl Held {
    /// Whether the token grants `wanted` on `object`.
    pub fn allows(&self, object: &str, wanted: Permissions) -> bool {
        self.scope
            .iter()
            .any(|(o, p)| o == object && Permissions(*p).contains(wanted))
    }
}

// ---- The handlers ----

use crate::auth::PeerAuth;
use crate::context::{Ctx, Rejection, Reply, Request, Response};
use sigil_ace::{TokenRequest, TokenResponse, CONTENT_FORMAT_ACE_CBOR, PROFILE_COAP_DTLS};
use sigil_coap::{Code, ContentFormat};

/// An `application/ace+cbor` error answer (RFC 9200 §5.8.3).
fn ace_error(code: Code, err: AceErrorCode, description: &str) -> Reply {
    let mut buf = [0u8; 128];
    let n = AceError {
        code: err,
        description: Some(description),
    }
    .encode(&mut buf)
    .unwrap_or(0);
    Reply::Response(Response {
        code,
        content_format: Some(CONTENT_FORMAT_ACE_CBOR),
        payload: buf[..n].to_vec(),
        ..Default::default()
    })
}

impl Ctx<'_> {
    /// The permissions the policy gives `client` on `object` at this server (`own`) or at
    /// the sensor `sensor`: `rd` lookup to every authenticated identity (here only); reading
    /// a sensor to the sensor itself and to identities granted it or its kit; publishing to a
    /// device's own topic (here only).
    fn policy(&self, client: &Identity, object: &str, own: bool, sensor: Option<&Identity>) -> u32 {
        if object == sigil_ace::RD_OBJECT {
            return if own { Permissions::READ.0 } else { 0 };
        }
        let Ok(id) = Identity::parse(object) else {
            return 0;
        };
        // Objects are named exactly as resource servers compare them.
        if object != id.to_string() || (!own && sensor != Some(&id)) {
            return 0;
        }
        let mut perms = 0;
        if id == *client {
            perms |= Permissions::READ.0;
            if own {
                perms |= Permissions::PUBLISH.0;
            }
        }
        let kit = self
            .svc
            .by_ep
            .get(&id)
            .and_then(|n| self.svc.entries.get(n))
            .map(|e| e.reg.authorized_by);
        if self
            .svc
            .read_grants
            .get(client)
            .is_some_and(|g| g.contains(&id) || kit.is_some_and(|k| g.contains(&k)))
        {
            perms |= Permissions::READ.0;
        }
        perms
    }

    /// `POST /token` (RFC 9200 §5.8).
    pub fn token(&mut self, req: &Request) -> Reply {
        let Some(auth) = req.auth.clone() else {
            self.count("token.refused.no_session");
            return ace_error(
                Code::UNAUTHORIZED,
                AceErrorCode::InvalidClient,
                "coaps:// session needed",
            );
        };
        let client = *auth.identity();
        if matches!(auth, PeerAuth::Token { .. }) || !self.svc.authorized.contains_key(&client) {
            self.count("token.refused.client");
            // Authenticated, but not a client this AC serves (RFC 9200 §5.8.3).
            return ace_error(
                Code::BAD_REQUEST,
                AceErrorCode::UnauthorizedClient,
                "not a provisioned identity",
            );
        }
        // Its rate before anything that costs: each request may cost a signature (a signed
        // token) and a verification (`req_cnf_pop`).
        if let Err(limited) = self.tokens.take_request(&client, req.peer, self.now) {
            self.count(limited.counter());
            crate::limited!(self.log, self.now.as_secs(), limited.counter(), warn, peer = %req.peer, identity = %client, whose = limited.whose, retry_secs = limited.retry_secs, "/token refused: rate limit reached");
            let description = match limited.whose {
                "session" => "rate limited: this session's token requests",
                _ => "rate limited: this client's token requests",
            };
            let Reply::Response(mut r) = ace_error(
                Code::SERVICE_UNAVAILABLE,
                AceErrorCode::InvalidRequest,
                description,
            ) else {
                unreachable!("ace_error answers a response")
            };
            r.max_age = Some(limited.retry_secs.max(1));
            return Reply::Response(r);
        }
        if req
            .content_format
            .is_some_and(|cf| cf != CONTENT_FORMAT_ACE_CBOR)
        {
            self.count("token.refused.malformed");
            return ace_error(
                Code::BAD_REQUEST,
                AceErrorCode::InvalidRequest,
                "application/ace+cbor expected",
            );
        }
        let asked = match TokenRequest::parse(&req.payload) {
            Ok(r) => r,
            Err(_) => {
                self.count("token.refused.malformed");
                return ace_error(Code::BAD_REQUEST, AceErrorCode::InvalidRequest, "malformed");
            }
        };
        let Some(authority) = self.authority.as_deref() else {
            return ace_error(Code::NOT_FOUND, AceErrorCode::InvalidRequest, "no AC here");
        };
        let own_audience = authority.audience().to_string();
        let server_key = authority.public_key();
        let audience = asked.audience.unwrap_or(&own_audience);
        let own = audience == own_audience;
        let sensor = if own {
            None
        } else {
            match Identity::parse(audience)
                .ok()
                .filter(|id| audience == id.to_string())
                .and_then(|id| self.svc.by_ep.get(&id))
                .and_then(|n| self.svc.entries.get(n))
                // A sensor without a key (PSK-only) cannot check a signed token.
                .and_then(|e| Some((e.reg.ep, e.reg.key?)))
            {
                Some(sensor) => Some(sensor),
                None => {
                    self.count("token.refused.audience");
                    return ace_error(
                        Code::BAD_REQUEST,
                        AceErrorCode::InvalidRequest,
                        "unknown audience",
                    );
                }
            }
        };
        let Some(scope) = asked.scope else {
            self.count("token.refused.scope");
            return ace_error(
                Code::BAD_REQUEST,
                AceErrorCode::InvalidScope,
                "scope needed",
            );
        };
        let asked_entries = scope.len();
        let granted: Vec<(String, u32)> = scope
            .iter()
            .filter_map(|e| {
                let p = e.permissions.0
                    & self.policy(&client, e.object, own, sensor.as_ref().map(|s| &s.0));
                (p != 0).then(|| (e.object.to_string(), p))
            })
            .collect();
        if granted.is_empty() {
            self.count("token.refused.scope");
            return ace_error(
                Code::BAD_REQUEST,
                AceErrorCode::InvalidScope,
                "nothing granted",
            );
        }
        let binding = match (asked.req_cnf, &auth) {
            // The key the session itself authenticated with: proven by the handshake.
            (
                Some(Confirmation::PublicKey { key, .. }),
                PeerAuth::RawPublicKey { key: own, .. },
            ) if key == *own => Binding::PublicKey(key),
            (Some(Confirmation::PublicKey { key, .. }), _) => {
                // Never bind the key of another provisioned identity: its holder could then
                // not post tokens of its own for it.
                let other = Identity::of_key(&RustCrypto, &key, b"")
                    .is_ok_and(|id| id != client && self.svc.authorized.contains_key(&id));
                if other {
                    self.count("token.refused.pop_key");
                    return ace_error(
                        Code::BAD_REQUEST,
                        AceErrorCode::UnsupportedPopKey,
                        "req_cnf is another identity's key",
                    );
                }
                // Any other key only with the client's proof that it holds it: its signature
                // over the client's own identity and the key (`req_cnf_pop`). Without it any
                // client could have a token bound to a key it read in another client's token,
                // post it first, and lock that client's own tokens out (`other_subject`).
                let Some(sig) = asked.req_cnf_pop else {
                    self.count("token.refused.pop_unproven");
                    crate::limited!(self.log, self.now.as_secs(), "token.refused.pop_unproven", warn, peer = %req.peer, identity = %client, "/token refused: req_cnf without a proof of possession");
                    return ace_error(
                        Code::BAD_REQUEST,
                        AceErrorCode::UnsupportedPopKey,
                        "req_cnf needs req_cnf_pop (the key's signature)",
                    );
                };
                let mut input = [0u8; sigil_ace::REQ_CNF_POP_INPUT_MAX];
                let proven = sigil_ace::req_cnf_pop_input(&client.to_string(), &key, &mut input)
                    .is_ok_and(|n| RustCrypto.verify(&key, &input[..n], sig).is_ok());
                if !proven {
                    self.count("token.refused.pop_proof");
                    crate::limited!(self.log, self.now.as_secs(), "token.refused.pop_proof", warn, peer = %req.peer, identity = %client, "/token refused: req_cnf_pop does not verify with req_cnf for this client");
                    return ace_error(
                        Code::BAD_REQUEST,
                        AceErrorCode::UnsupportedPopKey,
                        "req_cnf_pop does not verify (not this client's key)",
                    );
                }
                Binding::PublicKey(key)
            }
            (Some(_), _) => {
                self.count("token.refused.pop_key");
                return ace_error(
                    Code::BAD_REQUEST,
                    AceErrorCode::UnsupportedPopKey,
                    "req_cnf must be a public key",
                );
            }
            (None, PeerAuth::RawPublicKey { key, .. }) => Binding::PublicKey(*key),
            (None, _) if own => Binding::Symmetric,
            (None, _) => {
                self.count("token.refused.pop_key");
                return ace_error(
                    Code::BAD_REQUEST,
                    AceErrorCode::UnsupportedPopKey,
                    "a sensor needs a public PoP key",
                );
            }
        };
        let public_binding = matches!(binding, Binding::PublicKey(_));
        let now = self.now;
        let Some(authority) = self.authority.as_deref_mut() else {
            return ace_error(Code::NOT_FOUND, AceErrorCode::InvalidRequest, "no AC here");
        };
        let issued = match authority.issue(&client, audience, &granted, binding, now) {
            Ok(i) => i,
            Err(e) => {
                tracing::error!(error = %e, "cannot make a token");
                self.count("token.error");
                return ace_error(
                    Code::INTERNAL_SERVER_ERROR,
                    AceErrorCode::InvalidRequest,
                    "token",
                );
            }
        };
        let rs_key = match &sensor {
            Some((_, key)) => Some(*key),
            None if public_binding => Some(server_key),
            None => None,
        };
        // The granted scope goes back when it is less than the one asked for (§5.8.2).
        let narrowed = granted.len() < asked_entries
            || scope
                .iter()
                .zip(&granted)
                .any(|(a, g)| a.permissions.0 != g.1);
        let granted_entries: Vec<ScopeEntry<'_>> = granted
            .iter()
            .map(|(o, p)| ScopeEntry {
                object: o,
                permissions: Permissions(*p),
            })
            .collect();
        let response = TokenResponse {
            scope: narrowed.then(|| Scope::new(&granted_entries)),
            access_token: &issued.token,
            expires_in: Some(u64::from(issued.expires_in)),
            cnf: issued
                .pop
                .as_ref()
                .map(|(kid, key)| Confirmation::Symmetric { kid, key: &key[..] }),
            rs_cnf: rs_key.map(|key| Confirmation::PublicKey { kid: None, key }),
            ace_profile: Some(PROFILE_COAP_DTLS),
        };
        let mut buf = vec![0u8; sigil_ace::params::MAX_PARAMS_LEN + 128];
        let n = match response.encode(&mut buf) {
            Ok(n) => n,
            Err(_) => {
                self.count("token.error");
                return ace_error(
                    Code::INTERNAL_SERVER_ERROR,
                    AceErrorCode::InvalidRequest,
                    "token",
                );
            }
        };
        buf.truncate(n);
        self.count("token.issued");
        if public_binding {
            self.count("token.signed");
        }
        Reply::Response(Response {
            code: Code::CREATED,
            content_format: Some(CONTENT_FORMAT_ACE_CBOR),
            payload: buf,
            ..Default::default()
        })
    }

    /// `POST /authz-info` (RFC 9200 §5.10.1, RFC 9202 §3): keeps a valid token for this
    /// server. Open to plain CoAP: the token is its own proof (the AC's signature or
    /// encryption), and every answer is a few bytes, smaller than the token posted.
    pub fn authz_info(&mut self, req: &Request) -> Reply {
        let Some(authority) = self.authority.as_deref() else {
            return ace_error(Code::NOT_FOUND, AceErrorCode::InvalidRequest, "no AC here");
        };
        let svc = self.svc;
        let (now, tokens) = (self.now, &mut *self.tokens);
        let authorized = |id: &Identity| svc.authorized.contains_key(id);
        let mut accept =
            || tokens.accept(authority, &req.payload, Host::of(req.peer), now, authorized);
        // Cheap refusals before an ES256 verification, which is charged to the verification
        // budget for a datagram nobody authenticated ([`crate::verify`]).
        let result = match crate::verify::token_precheck(
            &req.payload,
            now,
            authority.audience(),
            authorized,
        ) {
            Err(why) => Err(why),
            Ok(true) if req.auth.is_none() => match svc.verify.run(req.peer, accept, Result::is_ok)
            {
                Ok(r) => r,
                Err(over) => return self.reject(crate::Rejection::VerifyBudget(over), req),
            },
            Ok(_) => accept(),
        };
        match result {
            Ok(_) => {
                self.count("authz.accepted");
                Reply::Response(Response {
                    code: Code::CREATED,
                    ..Default::default()
                })
            }
            Err(why) => {
                self.count(why.counter());
                let (code, payload) = why.answer();
                Reply::Response(Response {
                    code,
                    content_format: Some(CONTENT_FORMAT_ACE_CBOR),
                    payload,
                    ..Default::default()
                })
            }
        }
    }

    /// The token a session holds (by its PSK kid or its raw public key), checked at `now`.
    fn session_token(&self, auth: &PeerAuth) -> Result<&Held, TokenCheck> {
        let pop = match auth {
            PeerAuth::Token { kid, .. } => PopKey::Kid(kid.clone()),
            PeerAuth::RawPublicKey { identity, .. } => PopKey::Key(*identity),
            PeerAuth::Psk(_) => return Err(TokenCheck::None),
        };
        let svc = self.svc;
        self.tokens
            .valid(&pop, self.now, |id| svc.authorized.contains_key(id))
    }

    /// Whether a token's session may publish to the topic of `ep`: its token is valid, was
    /// issued to `ep` itself, and its scope allows publishing there (the reading is still
    /// verified by its signature).
    pub(crate) fn token_may_publish(&self, auth: &PeerAuth, ep: &Identity) -> bool {
        self.session_token(auth)
            .is_ok_and(|t| t.subject == *ep && t.allows(&ep.to_string(), Permissions::PUBLISH))
    }

    /// With `authorize_reads`: whether the request's session may read the readings of `ep`
    /// (authorized through `kit`): the sensor itself, an identity granted it or its kit, or a
    /// session whose token's scope allows reading it.
    pub(crate) fn may_read_sensor(
        &self,
        req: &Request,
        ep: &Identity,
        kit: &Identity,
    ) -> Result<(), Rejection> {
        let Some(auth) = req.auth.as_ref() else {
            return Err(Rejection::ReadWithoutSession);
        };
        if !matches!(auth, PeerAuth::Token { .. }) {
            let reader = auth.identity();
            // A session opened before its identity was revoked reads nothing more by its
            // grants (a key a token binds is on no list: the token decides, below).
            let active = self.svc.authorized.contains_key(reader);
            let granted = self
                .svc
                .read_grants
                .get(reader)
                .is_some_and(|objects| objects.contains(ep) || objects.contains(kit));
            if active && (reader == ep || granted) {
                return Ok(());
            }
        }
        match self.session_token(auth) {
            Ok(t) => {
                if t.allows(&ep.to_string(), Permissions::READ)
                    || t.allows(&kit.to_string(), Permissions::READ)
                {
                    Ok(())
                } else {
                    Err(Rejection::ReadNotGranted)
                }
            }
            // An identity session without a token was refused by the grants.
            Err(TokenCheck::None) if !matches!(auth, PeerAuth::Token { .. }) => {
                Err(Rejection::ReadNotGranted)
            }
            Err(why) => Err(Rejection::ReadToken(why)),
        }
    }

    /// `GET /keys/<identity>`: the reading key of a PSK-only node (`sigil_objects::mac`), as
    /// a COSE_Key (RFC 9052 §7: kty Symmetric, kid the identity, alg HMAC 256/64, k), so a
    /// subscriber can verify the node's MACed readings. Disclosed only over a coaps:// session
    /// that may read the node's readings (the node itself, a reader granted the node or its kit,
    /// or a token whose scope allows reading it), whatever `--authorize-reads` says: the key
    /// lets its holder make readings too (docs/security.md, "Nodes without public-key crypto").
    pub fn reading_key(&mut self, req: &Request) -> Reply {
        self.count("request.keys");
        // The session first: without one nothing is said, not even whether the node exists.
        if req.auth.is_none() {
            return self.reject(Rejection::ReadWithoutSession, req);
        }
        let node = req
            .path
            .get(1)
            .and_then(|t| Identity::parse(t).ok())
            .and_then(|id| Some((id, self.svc.reading_keys.get(&id)?)));
        let Some((ep, key)) = node else {
            // Not a PSK-only node (a signing device has no reading key to give).
            return self.reject(Rejection::NotFound, req);
        };
        let kit = self
            .svc
            .by_ep
            .get(&ep)
            .and_then(|n| self.entry(*n))
            .map_or(ep, |e| e.reg.authorized_by);
        if let Err(why) = self.may_read_sensor(req, &ep, &kit) {
            return self.reject(why, req);
        }
        let mut buf = [0u8; sigil_objects::mac::READING_KEY_COSE_LEN];
        let Ok(n) = sigil_objects::mac::encode_reading_key(key, &ep, &mut buf) else {
            return crate::context::respond(Code::INTERNAL_SERVER_ERROR);
        };
        self.count("keys.disclosed");
        crate::context::content(ContentFormat::COSE_KEY, buf[..n].to_vec())
    }

    /// With `authorize_reads`: whether the request's session may look up the RD or discover
    /// topics: any provisioned identity's session, or a token's whose scope allows `rd`.
    pub(crate) fn may_look_up(&self, req: &Request) -> Result<(), Rejection> {
        if !self.svc.config.authorize_reads {
            return Ok(());
        }
        let Some(auth) = req.auth.as_ref() else {
            return Err(Rejection::LookupWithoutSession);
        };
        if !matches!(auth, PeerAuth::Token { .. })
            && self.svc.authorized.contains_key(auth.identity())
        {
            return Ok(());
        }
        match self.session_token(auth) {
            Ok(t) if t.allows(sigil_ace::RD_OBJECT, Permissions::READ) => Ok(()),
            Ok(_) => Err(Rejection::LookupNotGranted),
            // A key that never held a token; a token session whose token is gone is 4.01.
            Err(TokenCheck::None) if !matches!(auth, PeerAuth::Token { .. }) => {
                Err(Rejection::LookupNotGranted)
            }
            Err(why) => Err(Rejection::ReadToken(why)),
        }
    }
}

#[cfg(test)]
mod tests_support {
    use super::*;
    use sigil_crypto::SignatureAlgorithm;

    pub struct Counter(pub u8);
    impl Rng for Counter {
        fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
            for b in buf {
                self.0 = self.0.wrapping_add(1);
                *b = self.0;
            }
            Ok(())
        }
    }

    const T0: i64 = 1_700_000_000;

    pub fn now(s: i64) -> UnixTime {
        UnixTime::from_secs(T0 + s)
    }

    pub fn authority(seed: u8) -> Authority {
        let key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Counter(seed))
            .unwrap();
        Authority::new(key, [seed; 16], 60, Box::new(Counter(seed))).unwrap()
    }

    pub fn client() -> Identity {
        Identity::parse("00112233445566778899aabbccddeeff").unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::*;
    use super::*;
    use sigil_crypto::SignatureAlgorithm;

    fn host(n: u8) -> Host {
        Host::of(std::net::SocketAddr::from(([10, 0, 0, n], 5683)))
    }

    /// A bucket asked every second at a rate slower than one a thousand seconds still refills:
    /// the seconds' fractions are carried, not lost to rounding each time it is asked.
    #[test]
    fn a_slow_bucket_asked_every_second_still_refills() {
        let rate = Rate {
            burst: 1,
            every_secs: 1500,
        };
        let mut b = Bucket::full(rate, 0);
        b.refill(rate, 0);
        b.milli -= 1000;
        let mut waits = Vec::new();
        for now in 1..=1500 {
            b.refill(rate, now);
            waits.push(b.wait(rate));
        }
        assert_eq!(waits[0], 1499, "the wait counts down");
        assert_eq!(waits[999], 500);
        assert_eq!(*waits.last().unwrap(), 0, "full again after 1500 s");
        assert!(b.milli >= 1000);
    }

    #[test]
    fn a_rate_is_burst_comma_seconds() {
        assert_eq!(
            "12,5".parse::<Rate>(),
            Ok(Rate {
                burst: 12,
                every_secs: 5
            })
        );
        assert_eq!("2, 3600s".parse::<Rate>().map(|r| r.every_secs), Ok(3600));
        assert_eq!(SUBJECT_RATE.to_string().parse::<Rate>(), Ok(SUBJECT_RATE));
        for bad in ["12", "0,5", "5,0", "a,b", "", "1,2,3", "1,5ss"] {
            let e = bad.parse::<Rate>().unwrap_err();
            assert!(e.contains("BURST,SECONDS"), "{bad}: {e}");
        }
    }

    fn scope(object: &str) -> Vec<(String, u32)> {
        vec![(object.to_string(), Permissions::READ.0)]
    }

    fn symmetric(a: &mut Authority, at: i64) -> Issued {
        let aud = a.audience().to_string();
        a.issue(&client(), &aud, &scope("s1"), Binding::Symmetric, now(at))
            .unwrap()
    }

    /// Every kid is printable ASCII with no zero byte (a C string as it is), starts with the
    /// prefix, never parses as an identity, and carries its 64 random bits: over many
    /// kids from a real RNG none repeats.
    #[test]
    fn token_kids_are_printable_c_strings_never_identities() {
        let mut rng = crate::OsRng;
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20_000 {
            let kid = token_kid(&mut rng).unwrap();
            assert_eq!(kid[0], KID_PREFIX);
            assert!(kid.iter().all(|b| b.is_ascii_graphic()), "{kid:?}");
            assert!(!kid.contains(&0));
            let text = std::str::from_utf8(&kid).unwrap();
            assert!(Identity::parse(text).is_err(), "{text}");
            assert!(seen.insert(kid), "{text} repeated");
        }
        // All-zero and all-one random bytes, the ones that made a zero byte before.
        struct Fixed(u8);
        impl Rng for Fixed {
            fn fill(&mut self, buf: &mut [u8]) -> Result<(), sigil_crypto::CryptoError> {
                buf.fill(self.0);
                Ok(())
            }
        }
        assert_eq!(&token_kid(&mut Fixed(0)).unwrap(), b"~0000000000000000");
        assert_eq!(&token_kid(&mut Fixed(0xff)).unwrap(), b"~ffffffffffffffff");
    }

    #[test]
    fn a_symmetric_token_is_kept_once_and_its_key_reaches_dtls() {
        let mut a = authority(1);
        let issued = symmetric(&mut a, 0);
        let (kid, psk) = issued.pop.clone().unwrap();
        assert_eq!(kid[0], KID_PREFIX);
        let mut t = Tokens::default();
        let g = t.generation;
        let pop = t
            .accept(&a, &issued.token, host(1), now(1), |_| true)
            .unwrap();
        assert_eq!(pop, PopKey::Kid(kid.clone()));
        assert!(t.generation > g, "the DTLS trust must learn the new PSK");
        assert_eq!(
            t.psks(|_| true).get(&kid).unwrap(),
            &(psk.to_vec(), client())
        );
        assert!(
            t.psks(|_| false).is_empty(),
            "a revoked subject's key opens nothing"
        );
        let held = t.valid(&pop, now(2), |_| true).unwrap();
        assert!(held.allows("s1", Permissions::READ));
        assert!(!held.allows("s2", Permissions::READ), "another topic");
        assert!(
            !held.allows("s1", Permissions::PUBLISH),
            "another permission"
        );
        // The same token again: replayed.
        assert_eq!(
            t.accept(&a, &issued.token, host(1), now(3), |_| true),
            Err(Refusal::Replayed)
        );
    }

    #[test]
    fn expiry_and_revocation_take_effect_on_a_held_token() {
        let mut a = authority(2);
        let issued = symmetric(&mut a, 0);
        let mut t = Tokens::default();
        let pop = t
            .accept(&a, &issued.token, host(1), now(1), |_| true)
            .unwrap();
        assert_eq!(
            t.valid(&pop, now(2), |_| false).unwrap_err(),
            TokenCheck::Revoked
        );
        assert_eq!(
            t.valid(&pop, now(60), |_| true).unwrap_err(),
            TokenCheck::Expired
        );
        t.expire(now(60));
        assert_eq!(
            t.valid(&pop, now(1), |_| true).unwrap_err(),
            TokenCheck::None
        );
        assert!(t.psks(|_| true).is_empty());
        // Too late to post it at all.
        let mut t = Tokens::default();
        assert!(matches!(
            t.accept(&a, &issued.token, host(1), now(61), |_| true),
            Err(Refusal::Token(TokenError::Expired { .. }))
        ));
        // A subject revoked before posting.
        let issued = symmetric(&mut a, 0);
        assert_eq!(
            t.accept(&a, &issued.token, host(1), now(1), |_| false),
            Err(Refusal::Revoked)
        );
    }

    #[test]
    fn tokens_for_others_tampered_or_oversized_are_refused_with_their_reason() {
        let mut a = authority(3);
        let mut other = authority(4);
        let mut t = Tokens::default();
        // Another AC's token (its key, its audience).
        let foreign = symmetric(&mut other, 0);
        let r = t.accept(&a, &foreign.token, host(1), now(1), |_| true);
        assert!(
            matches!(r, Err(Refusal::Token(TokenError::BadTag))),
            "{r:?}"
        );
        assert_eq!(r.unwrap_err().counter(), "authz.refused.tampered");
        // Signed by another key, for this audience.
        let aud = a.audience().to_string();
        let key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Counter(9))
            .unwrap();
        let pk = RustCrypto.public_key(&key).unwrap();
        let signed = other
            .issue(
                &client(),
                &aud,
                &scope("s1"),
                Binding::PublicKey(pk),
                now(0),
            )
            .unwrap();
        assert_eq!(
            t.accept(&a, &signed.token, host(1), now(1), |_| true),
            Err(Refusal::Token(TokenError::BadSignature))
        );
        // For another audience (a sensor), from this AC.
        let for_sensor = a
            .issue(
                &client(),
                "ffeeddccbbaa99887766554433221100",
                &scope("s1"),
                Binding::PublicKey(pk),
                now(0),
            )
            .unwrap();
        assert_eq!(
            t.accept(&a, &for_sensor.token, host(1), now(1), |_| true),
            Err(Refusal::Token(TokenError::WrongAudience))
        );
        // One bit flipped in the ciphertext.
        let mut tampered = symmetric(&mut a, 0).token;
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert_eq!(
            t.accept(&a, &tampered, host(1), now(1), |_| true),
            Err(Refusal::Token(TokenError::BadTag))
        );
        // Oversized.
        let big = vec![0u8; MAX_TOKEN_LEN + 1];
        let r = t.accept(&a, &big, host(1), now(1), |_| true).unwrap_err();
        assert_eq!(r.counter(), "authz.refused.oversized");
        assert_eq!(r.answer().0, sigil_coap::Code::BAD_REQUEST);
        assert!(t.is_empty());
    }

    #[test]
    fn a_public_key_token_binds_that_key_and_a_newer_one_replaces_it() {
        let mut a = authority(5);
        let aud = a.audience().to_string();
        let key = RustCrypto
            .generate(SignatureAlgorithm::EcdsaP256, &mut Counter(7))
            .unwrap();
        let pk = RustCrypto.public_key(&key).unwrap();
        let mut t = Tokens::default();
        let first = a
            .issue(
                &client(),
                &aud,
                &scope("s1"),
                Binding::PublicKey(pk),
                now(0),
            )
            .unwrap();
        let pop = t
            .accept(&a, &first.token, host(1), now(0), |_| true)
            .unwrap();
        assert_eq!(
            pop,
            PopKey::Key(Identity::of_key(&RustCrypto, &pk, b"").unwrap())
        );
        assert!(t
            .keys(|_| true)
            .contains(&Identity::of_key(&RustCrypto, &pk, b"").unwrap()));
        let second = a
            .issue(
                &client(),
                &aud,
                &scope("s2"),
                Binding::PublicKey(pk),
                now(0),
            )
            .unwrap();
        t.accept(&a, &second.token, host(1), now(0), |_| true)
            .unwrap();
        assert_eq!(t.len(), 1);
        let held = t.valid(&pop, now(1), |_| true).unwrap();
        assert!(held.allows("s2", Permissions::READ) && !held.allows("s1", Permissions::READ));
    }

    #[test]
    fn a_key_holding_one_clients_token_takes_no_token_of_another() {
        let mut a = authority(8);
        let aud = a.audience().to_string();
        let pk = RustCrypto
            .public_key(
                &RustCrypto
                    .generate(SignatureAlgorithm::EcdsaP256, &mut Counter(11))
                    .unwrap(),
            )
            .unwrap();
        let mut t = Tokens::default();
        let mine = a
            .issue(
                &client(),
                &aud,
                &scope("s1"),
                Binding::PublicKey(pk),
                now(0),
            )
            .unwrap();
        t.accept(&a, &mine.token, host(1), now(0), |_| true)
            .unwrap();
        let someone = Identity::parse("ffeeddccbbaa99887766554433221100").unwrap();
        let theirs = a
            .issue(&someone, &aud, &scope("rd"), Binding::PublicKey(pk), now(0))
            .unwrap();
        let r = t.accept(&a, &theirs.token, host(2), now(0), |_| true);
        assert_eq!(r, Err(Refusal::OtherSubject));
        assert_eq!(r.unwrap_err().answer().0, sigil_coap::Code::UNAUTHORIZED);
        let pop = PopKey::Key(Identity::of_key(&RustCrypto, &pk, b"").unwrap());
        assert!(t
            .valid(&pop, now(1), |_| true)
            .unwrap()
            .allows("s1", Permissions::READ));
    }

    /// A subject at its cap: its oldest token gives way to its new one (whatever host posts
    /// it), another subject's stay; a revoked subject's tokens and `cti`s all go, with their
    /// bytes, and the `cti`s of the tokens that gave way still refuse them.
    #[test]
    fn a_subject_holds_at_most_its_cap_and_revocation_frees_its_bytes() {
        let mut a = authority(9);
        let caps = TokenCaps {
            per_subject: 3,
            ..TokenCaps::default()
        };
        let mut t = Tokens::new(caps);
        let aud = a.audience().to_string();
        let other = Identity::parse("ffeeddccbbaa99887766554433221100").unwrap();
        let theirs = a
            .issue(&other, &aud, &scope("rd"), Binding::Symmetric, now(0))
            .unwrap();
        t.accept(&a, &theirs.token, host(9), now(0), |_| true)
            .unwrap();
        let (others_bytes, others_cti) = (t.budget.used(), t.cti_budget.used());
        let issued: Vec<Issued> = (0..5).map(|_| symmetric(&mut a, 0)).collect();
        let mut pops = vec![];
        for (i, token) in issued.iter().enumerate() {
            pops.push(
                t.accept(&a, &token.token, host(i as u8 + 1), now(1), |_| true)
                    .unwrap(),
            );
        }
        assert_eq!(t.len(), 4, "three of the client's and the other's");
        assert_eq!(t.gave_way, 2);
        assert_eq!(t.per_subject[&client()], 3);
        // The two oldest gave way, the newest three stay.
        assert_eq!(
            t.valid(&pops[0], now(2), |_| true).unwrap_err(),
            TokenCheck::None
        );
        assert!(t.valid(&pops[4], now(2), |_| true).is_ok());
        // Gone, but not to be posted again.
        assert_eq!(
            t.accept(&a, &issued[0].token, host(1), now(2), |_| true),
            Err(Refusal::Replayed)
        );
        // Revoked: everything of the client goes now, the other's stays.
        let g = t.generation;
        assert_eq!(t.forget_subjects(|id| *id != client()), (3, 5));
        assert!(t.generation > g, "the DTLS trust must drop the keys");
        assert_eq!(t.len(), 1);
        assert_eq!(t.budget.used(), others_bytes);
        assert_eq!(t.cti_budget.used(), others_cti);
        assert!(!t.per_subject.contains_key(&client()));
    }

    /// `/token`'s buckets: a session gets its burst, then one request per its interval; a
    /// subject's bucket holds over all its sessions; a refusal charges neither bucket and says
    /// when to ask again; a full bucket is forgotten.
    #[test]
    fn token_requests_are_limited_per_session_and_per_subject() {
        let caps = TokenCaps {
            subject_rate: Rate {
                burst: 4,
                every_secs: 10,
            },
            session_rate: Rate {
                burst: 3,
                every_secs: 5,
            },
            ..TokenCaps::default()
        };
        let mut t = Tokens::new(caps);
        let peer = |n: u8| std::net::SocketAddr::from(([10, 0, 0, n], 5684));
        let c = client();
        for _ in 0..3 {
            t.take_request(&c, peer(1), now(0)).unwrap();
        }
        let r = t.take_request(&c, peer(1), now(0)).unwrap_err();
        assert_eq!(r.whose, "session");
        assert_eq!(r.retry_secs, 5);
        assert_eq!(r.counter(), "token.refused.rate_session");
        // Another session of the same subject: one left in the subject's bucket.
        t.take_request(&c, peer(2), now(0)).unwrap();
        let r = t.take_request(&c, peer(2), now(0)).unwrap_err();
        assert_eq!((r.whose, r.retry_secs), ("subject", 10));
        // Another subject is not touched.
        let other = Identity::parse("ffeeddccbbaa99887766554433221100").unwrap();
        t.take_request(&other, peer(3), now(0)).unwrap();
        // Ten seconds on: one more for the subject.
        t.take_request(&c, peer(2), now(10)).unwrap();
        assert!(t.take_request(&c, peer(2), now(10)).is_err());
        // Long after, every bucket is full again and forgotten.
        t.expire(now(1000));
        assert!(t.session_buckets.is_empty() && t.subject_buckets.is_empty());
    }

    #[test]
    fn one_host_fills_only_its_share_of_the_token_table_and_the_replay_cache() {
        let mut a = authority(6);
        let caps = TokenCaps {
            tokens: Caps {
                total: 4096,
                per_host: 1024,
            },
            cti: Caps {
                total: 4096,
                per_host: 1024,
            },
            ..TokenCaps::default()
        };
        let mut t = Tokens::new(caps);
        let mut accepted = 0;
        let mut full = 0;
        for _ in 0..40 {
            let issued = symmetric(&mut a, 0);
            match t.accept(&a, &issued.token, host(1), now(1), |_| true) {
                Ok(_) => accepted += 1,
                Err(Refusal::Full) => full += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
        assert!(accepted > 0 && full > 0, "{accepted} accepted, {full} full");
        assert!(t.budget.held_by(host(1)) <= 1024);
        // Another host still gets in.
        let issued = symmetric(&mut a, 0);
        t.accept(&a, &issued.token, host(2), now(1), |_| true)
            .unwrap();
    }
}

#[cfg(test)]
mod sizes {
    use super::tests_support::*;
    use super::*;

    /// The token sizes docs/wire-formats.md reports for what this AC issues (one sensor in
    /// the scope): encrypted with a symmetric PoP key, and signed (ES256) with a P-256 key.
    #[test]
    fn issued_token_sizes() {
        let mut a = authority(1);
        let aud = a.audience().to_string();
        let topic = "00112233445566778899aabbccddeeff".to_string();
        let scope = vec![(topic, Permissions::READ.0)];
        let enc = a
            .issue(&client(), &aud, &scope, Binding::Symmetric, now(0))
            .unwrap();
        let pk = RustCrypto
            .public_key(
                &RustCrypto
                    .generate(sigil_crypto::SignatureAlgorithm::EcdsaP256, &mut Counter(3))
                    .unwrap(),
            )
            .unwrap();
        let signed = a
            .issue(&client(), &aud, &scope, Binding::PublicKey(pk), now(0))
            .unwrap();
        println!(
            "encrypted {} B, signed {} B",
            enc.token.len(),
            signed.token.len()
        );
        assert_eq!(enc.token.len(), 200);
        assert_eq!(signed.token.len(), 284);
    }
}
