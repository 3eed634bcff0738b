//! The resource server's side of ACE (RFC 9200 §5.10) for a device that serves its own
//! resources, such as a sensor serving its readings (the publisher-as-server model): token
//! intake at `/authz-info` and the access decision for each request.
//!
//! The device trusts one AC key (its trusted server's, learned at pairing) and checks signed
//! tokens offline with it. [`ResourceServer::authz_info`] validates a token ([`validate`]:
//! signature, `aud` = this device, `exp`, `scope`), requires a `cti` and a raw public key as
//! its proof-of-possession key (RFC 8747 `cnf`, the asymmetric PoP of RFC 9202 §3.2), refuses a
//! `cti` it has seen (a cache that keeps each entry until its token's `exp`), and keeps the
//! token, keyed by its PoP key, until it expires. A newer token for the same key replaces the
//! older (RFC 9202 §5). [`ResourceServer::authorize`] then decides on a request by the peer
//! key its DTLS session authenticated, the resource and the method, at the caller's time: no
//! token for the key (4.01), expired since (4.01, also inside a session established before),
//! the scope does not grant the method on the resource (4.03).
//!
//! Scope objects (AIF, RFC 9237) name this device's resources: the device's identity text
//! grants every resource it serves, `<identity>/<resource>` one of them; objects naming
//! anything else grant nothing here. At intake the scope is reduced to one permission mask per
//! resource, so an entry has a fixed size.
//!
//! Memory is fixed and owned by the caller (`TOKENS` and `CTIS` slots) and, within it, bounded
//! by byte budgets per source host and in total ([`RsLimits`]): each token entry is charged
//! [`TOKEN_ENTRY_BYTES`], each remembered `cti` [`CTI_ENTRY_BYTES`] plus its length. A `cti`
//! still within its token's lifetime is never dropped to make room (that would let its token
//! be replayed): a full cache refuses new tokens ([`IntakeError::Busy`]) until entries expire.
//! No heap, no I/O, no clock.

use crate::cnf::Confirmation;
use crate::error::{Claim, Malformed, TokenError};
use crate::params::{AceError, AceErrorCode};
use crate::scope::Permissions;
use crate::token::{validate, AcSigningKey, AcTrust, MAX_CLAIM_LEN, MAX_TOKEN_LEN};
use core::fmt;
use sigil_crypto::{CryptoProvider, PublicKey};
use sigil_time::UnixTime;

/// The source a token came from, as the caller groups peers for budgets: for IP, the IPv4
/// address (mapped into IPv6) or the IPv6 /64 prefix, zero-padded.
pub type HostKey = [u8; 16];

/// Most resources one resource server names.
pub const MAX_RESOURCES: usize = 8;
/// Charge of one kept token.
pub const TOKEN_ENTRY_BYTES: usize = core::mem::size_of::<TokenEntry>();
/// Fixed charge of one remembered `cti` (its bytes are charged on top).
pub const CTI_ENTRY_BYTES: usize = 32;

pub use crate::params::CONTENT_FORMAT_ACE_CBOR;

/// Byte budgets of the two tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RsLimits {
    /// Kept tokens, all hosts.
    pub token_bytes: usize,
    /// Kept tokens posted from one host.
    pub token_bytes_per_host: usize,
    /// Remembered `cti` values, all hosts.
    pub cti_bytes: usize,
    /// Remembered `cti` values of tokens posted from one host.
    pub cti_bytes_per_host: usize,
    /// Token signatures checked in one second (of the caller's clock), all hosts: what
    /// forged tokens can make the device spend (an Ed25519 verification is about 2.6 million
    /// cycles on a Cortex-M4, docs/device-costs.md). Over it, 5.03 until the next second.
    pub verifications_per_sec: u16,
    /// Token signatures checked in one second for one host.
    pub verifications_per_host_per_sec: u16,
}

impl RsLimits {
    /// Budgets for `tokens` kept tokens and `ctis` remembered `cti` values of up to 16 bytes,
    /// a host getting `per_host_share` of each (at least one entry).
    pub const fn for_entries(tokens: usize, ctis: usize, per_host_share: usize) -> Self {
        let token_bytes = tokens * TOKEN_ENTRY_BYTES;
        let cti_bytes = ctis * (CTI_ENTRY_BYTES + 16);
        let share = if per_host_share == 0 {
            1
        } else {
            per_host_share
        };
        Self {
            token_bytes,
            token_bytes_per_host: max(token_bytes / share, TOKEN_ENTRY_BYTES),
            cti_bytes,
            cti_bytes_per_host: max(cti_bytes / share, CTI_ENTRY_BYTES + MAX_CLAIM_LEN),
            verifications_per_sec: VERIFICATIONS_PER_SEC,
            verifications_per_host_per_sec: VERIFICATIONS_PER_HOST_PER_SEC,
        }
    }
}

/// Default of [`RsLimits::verifications_per_sec`]: at most about a tenth of a 64 MHz
/// Cortex-M4's time on Ed25519 verifications of posted tokens that are not accepted.
pub const VERIFICATIONS_PER_SEC: u16 = 4;
/// Default of [`RsLimits::verifications_per_host_per_sec`]: one host takes at most half.
pub const VERIFICATIONS_PER_HOST_PER_SEC: u16 = 2;
/// Verifications a second for newcomers once the second's are spent: hosts not charged in
/// the last [`NEWCOMER_AFTER_SECS`] (not in the table of recent hosts).
pub const NEWCOMER_VERIFICATIONS_PER_SEC: u16 = 1;
/// How long a host stays known after its last verification.
pub const NEWCOMER_AFTER_SECS: i64 = 60;
/// Hosts remembered with their last verification (the least recent forgotten): a flood from
/// more addresses than this makes some of its own addresses newcomers again, which then
/// compete for the newcomers' verification.
const VERIFY_HOSTS: usize = 32;

/// Which pool a verification was taken from, to give it back if the token is accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pool {
    All,
    Newcomers,
}

/// Signature verifications of the current second: in all, for newcomers, and by host (with
/// when each host was last charged).
#[derive(Clone, Copy, Debug)]
struct VerifyBudget {
    second: i64,
    spent: u16,
    newcomers_spent: u16,
    /// (host, second of its count, its count in that second, second it was last charged).
    hosts: [Option<(HostKey, i64, u16, i64)>; VERIFY_HOSTS],
}

impl VerifyBudget {
    const fn new() -> Self {
        Self {
            second: i64::MIN,
            spent: 0,
            newcomers_spent: 0,
            hosts: [None; VERIFY_HOSTS],
        }
    }

    /// Spends one verification for `host` at `now`, or says whose budget is spent: the host's
    /// share of the second, then the second's total; with the total spent, a newcomer (a host
    /// not charged for [`NEWCOMER_AFTER_SECS`]) takes the newcomers' verification.
    fn take(
        &mut self,
        limits: &RsLimits,
        host: HostKey,
        now: UnixTime,
    ) -> Result<Pool, IntakeError> {
        let sec = now.as_secs();
        if sec != self.second {
            self.second = sec;
            self.spent = 0;
            self.newcomers_spent = 0;
        }
        let known = self
            .hosts
            .iter()
            .position(|h| h.is_some_and(|(k, ..)| k == host));
        let (count, last) = known
            .and_then(|i| self.hosts[i])
            .map_or((0, i64::MIN), |(_, at, n, last)| {
                (if at == sec { n } else { 0 }, last)
            });
        if count >= limits.verifications_per_host_per_sec {
            return Err(IntakeError::VerifyBudget { per_host: true });
        }
        let newcomer = last == i64::MIN || sec.saturating_sub(last) >= NEWCOMER_AFTER_SECS;
        let pool = if self.spent < limits.verifications_per_sec {
            self.spent += 1;
            Pool::All
        } else if newcomer && self.newcomers_spent < NEWCOMER_VERIFICATIONS_PER_SEC {
            self.newcomers_spent += 1;
            Pool::Newcomers
        } else {
            return Err(IntakeError::VerifyBudget { per_host: false });
        };
        // The host's slot, else the least recently charged one.
        let i = known.unwrap_or_else(|| {
            (0..VERIFY_HOSTS)
                .min_by_key(|&i| self.hosts[i].map_or(i64::MIN, |(.., last)| last))
                .unwrap_or(0)
        });
        self.hosts[i] = Some((host, sec, count + 1, sec));
        Ok(pool)
    }

    /// An accepted token gives its verification back: honest tokens never empty the budget,
    /// only refused ones spend it.
    fn give_back(&mut self, pool: Pool, now: UnixTime) {
        if now.as_secs() != self.second {
            return;
        }
        match pool {
            Pool::All => self.spent = self.spent.saturating_sub(1),
            Pool::Newcomers => self.newcomers_spent = self.newcomers_spent.saturating_sub(1),
        }
    }
}

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

/// A request method, as far as scopes are concerned (AIF REST-method bits, RFC 9237 §2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
    /// Any other method: granted by no scope here.
    Other,
}

impl Method {
    /// The AIF permission bit of the method (GET 1, POST 2, PUT 4, DELETE 8).
    pub const fn permission(self) -> Option<Permissions> {
        match self {
            Self::Get => Some(Permissions(1)),
            Self::Post => Some(Permissions(2)),
            Self::Put => Some(Permissions(4)),
            Self::Delete => Some(Permissions(8)),
            Self::Other => None,
        }
    }
}

/// Why a token posted to `/authz-info` was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntakeError {
    /// The token failed [`validate`] or lacks `cti`; the error says why.
    Token(TokenError),
    /// The token's `cnf` is not a raw public key (absent, a key identifier, or symmetric).
    NoPublicPopKey,
    /// A token with this `cti` was accepted before (replay).
    Replayed,
    /// No room: the host's share or the whole budget of a table is taken by live entries.
    Busy { per_host: bool },
    /// The signature verifications of this second are spent, by this host or in all
    /// ([`RsLimits::verifications_per_sec`]); the token was not checked. 5.03: try again.
    VerifyBudget { per_host: bool },
}

impl From<TokenError> for IntakeError {
    fn from(e: TokenError) -> Self {
        Self::Token(e)
    }
}

impl IntakeError {
    /// The CoAP response code (class, detail) for this refusal (RFC 9200 §5.10.1.1): 4.00 for
    /// a token that does not parse or lacks what this server needs, 4.13 for one too large,
    /// 4.01 for an invalid one (bad signature, not the AC's key, expired, replayed), 4.03 for
    /// a valid token for another audience, 5.03 when full.
    pub const fn response_code(&self) -> (u8, u8) {
        match self {
            Self::Token(TokenError::Malformed(_))
            | Self::Token(TokenError::MissingClaim(_))
            | Self::Token(TokenError::UnsupportedAlgorithm(_))
            | Self::Token(TokenError::BufferTooSmall)
            | Self::NoPublicPopKey => (4, 0),
            Self::Token(TokenError::Oversized { .. }) => (4, 13),
            Self::Token(TokenError::Crypto(_)) | Self::Busy { .. } | Self::VerifyBudget { .. } => {
                (5, 3)
            }
            Self::Token(TokenError::WrongAudience) => (4, 3),
            Self::Token(_) | Self::Replayed => (4, 1),
        }
    }

    /// Writes the error payload, the `application/ace+cbor` error map of RFC 9200 §5.8.3 as
    /// the server writes it ([`AceError`]): `error` (30) = `invalid_request` (1) for 4.00 and
    /// 5.03, `invalid_grant` (3) for 4.01, and `error_description` (31), the reason as text.
    pub fn encode_payload(&self, out: &mut [u8]) -> Result<usize, TokenError> {
        let mut text = TextBuf::new();
        // The buffer truncates, so writing cannot fail.
        let _ = fmt::write(&mut text, format_args!("{self}"));
        let code = match self.response_code() {
            (4, 1) | (4, 3) => AceErrorCode::InvalidGrant,
            _ => AceErrorCode::InvalidRequest,
        };
        AceError {
            code,
            description: Some(text.as_str()),
        }
        .encode(out)
    }
}

impl fmt::Display for IntakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Token(e) => write!(f, "{e}"),
            Self::NoPublicPopKey => f.write_str("token does not bind a raw public key (cnf)"),
            Self::Replayed => f.write_str("token was posted before (cti replay)"),
            Self::Busy { per_host: true } => f.write_str("this host's token budget is used up"),
            Self::Busy { per_host: false } => f.write_str("token tables are full"),
            Self::VerifyBudget { per_host: true } => {
                f.write_str("this host's token verifications for this second are spent")
            }
            Self::VerifyBudget { per_host: false } => {
                f.write_str("token verifications for this second are spent")
            }
        }
    }
}

impl core::error::Error for IntakeError {}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The session's peer has no token here (or is anonymous): 4.01.
    NoToken,
    /// Its token expired at `exp`: 4.01. The token is dropped.
    Expired { exp: UnixTime },
    /// The resource is not one this server names: 4.04.
    NotFound,
    /// The token does not grant this method on this resource: 4.03.
    Forbidden,
}

impl Refusal {
    /// The CoAP response code (class, detail).
    pub const fn response_code(&self) -> (u8, u8) {
        match self {
            Self::NoToken | Self::Expired { .. } => (4, 1),
            Self::NotFound => (4, 4),
            Self::Forbidden => (4, 3),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoToken => f.write_str("no access token for this key"),
            Self::Expired { exp } => write!(f, "access token expired at {}", exp.as_secs()),
            Self::NotFound => f.write_str("no such resource"),
            Self::Forbidden => f.write_str("access token does not grant this"),
        }
    }
}

/// A token accepted at `/authz-info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub key: PublicKey,
    pub exp: UnixTime,
    /// Whether it replaced an earlier token for the same key.
    pub replaced: bool,
}

/// What the resource server did, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RsCounters {
    pub tokens_accepted: u64,
    pub tokens_replaced: u64,
    pub tokens_invalid: u64,
    pub tokens_malformed: u64,
    pub tokens_replayed: u64,
    pub tokens_busy: u64,
    /// Tokens refused unchecked: the second's verifications were spent
    /// ([`IntakeError::VerifyBudget`]).
    pub tokens_verify_budget: u64,
    /// Token signatures checked.
    pub verifications: u64,
    pub tokens_expired: u64,
    pub requests_allowed: u64,
    pub requests_no_token: u64,
    pub requests_forbidden: u64,
    pub requests_not_found: u64,
}

#[derive(Clone, Copy, Debug)]
struct TokenEntry {
    key: PublicKey,
    exp: UnixTime,
    host: HostKey,
    grants: [Permissions; MAX_RESOURCES],
}

#[derive(Clone, Copy, Debug)]
struct CtiEntry {
    cti: [u8; MAX_CLAIM_LEN],
    len: u8,
    exp: UnixTime,
    host: HostKey,
}

impl CtiEntry {
    fn cti(&self) -> &[u8] {
        &self.cti[..usize::from(self.len)]
    }

    fn charge(&self) -> usize {
        CTI_ENTRY_BYTES + usize::from(self.len)
    }
}

/// A resource server's token state: `TOKENS` token slots and `CTIS` replay-cache slots.
pub struct ResourceServer<'a, const TOKENS: usize, const CTIS: usize> {
    audience: &'a str,
    ac: PublicKey,
    resources: &'a [&'a str],
    limits: RsLimits,
    tokens: [Option<TokenEntry>; TOKENS],
    ctis: [Option<CtiEntry>; CTIS],
    verify: VerifyBudget,
    pub counters: RsCounters,
}

impl<'a, const TOKENS: usize, const CTIS: usize> ResourceServer<'a, TOKENS, CTIS> {
    /// A resource server for `audience` (this device's identity text) that trusts tokens
    /// signed by `ac` and serves `resources` (paths without a leading slash, at most
    /// [`MAX_RESOURCES`]; extra ones are never granted).
    pub fn new(
        audience: &'a str,
        ac: PublicKey,
        resources: &'a [&'a str],
        limits: RsLimits,
    ) -> Self {
        Self {
            audience,
            ac,
            resources: resources.get(..MAX_RESOURCES).unwrap_or(resources),
            limits,
            tokens: [None; TOKENS],
            ctis: [None; CTIS],
            verify: VerifyBudget::new(),
            counters: RsCounters::default(),
        }
    }

    /// The AC key this server trusts.
    pub fn ac_key(&self) -> &PublicKey {
        &self.ac
    }

    /// Tokens kept now.
    pub fn tokens(&self) -> usize {
        self.tokens.iter().flatten().count()
    }

    /// `cti` values remembered now.
    pub fn remembered_ctis(&self) -> usize {
        self.ctis.iter().flatten().count()
    }

    /// Bytes charged to the token table and the `cti` cache.
    pub fn charged(&self) -> (usize, usize) {
        (
            self.tokens.iter().flatten().count() * TOKEN_ENTRY_BYTES,
            self.ctis.iter().flatten().map(CtiEntry::charge).sum(),
        )
    }

    /// Drops every token and `cti` whose `exp` is at or before `now`.
    pub fn expire(&mut self, now: UnixTime) {
        for slot in &mut self.tokens {
            if slot.is_some_and(|t| t.exp <= now) {
                *slot = None;
                self.counters.tokens_expired += 1;
            }
        }
        for slot in &mut self.ctis {
            if slot.is_some_and(|c| c.exp <= now) {
                *slot = None;
            }
        }
    }

    /// The earliest time an entry expires, for the caller's timer.
    pub fn poll_timeout(&self) -> Option<UnixTime> {
        let t = self.tokens.iter().flatten().map(|t| t.exp);
        let c = self.ctis.iter().flatten().map(|c| c.exp);
        t.chain(c).min()
    }

    /// A token POSTed to `/authz-info` (RFC 9200 §5.10.1) by `host` at `now`.
    pub fn authz_info<P: CryptoProvider + ?Sized>(
        &mut self,
        provider: &P,
        now: UnixTime,
        host: HostKey,
        token: &[u8],
    ) -> Result<Accepted, IntakeError> {
        let r = self.intake(provider, now, host, token);
        match &r {
            Ok(a) => {
                self.counters.tokens_accepted += 1;
                if a.replaced {
                    self.counters.tokens_replaced += 1;
                }
            }
            Err(IntakeError::Replayed) => self.counters.tokens_replayed += 1,
            Err(IntakeError::Busy { .. }) => self.counters.tokens_busy += 1,
            Err(IntakeError::VerifyBudget { .. }) => self.counters.tokens_verify_budget += 1,
            Err(e) if matches!(e.response_code(), (4, 1) | (4, 3)) => {
                self.counters.tokens_invalid += 1
            }
            Err(_) => self.counters.tokens_malformed += 1,
        }
        r
    }

    fn intake<P: CryptoProvider + ?Sized>(
        &mut self,
        provider: &P,
        now: UnixTime,
        host: HostKey,
        token: &[u8],
    ) -> Result<Accepted, IntakeError> {
        let trust = AcTrust {
            signing: Some(AcSigningKey {
                kid: None,
                key: self.ac,
            }),
            ..AcTrust::default()
        };
        // The cheap refusals first: a token that is not a well-formed signed one costs no
        // verification; one that is spends one of the second's before its signature is checked.
        crate::token::precheck_signed(token, self.ac.algorithm())?;
        let pool = self.verify.take(&self.limits, host, now)?;
        self.counters.verifications += 1;
        let r = self.verified_intake(provider, now, host, token, &trust);
        if r.is_ok() {
            self.verify.give_back(pool, now);
        }
        r
    }

    /// The rest of [`ResourceServer::authz_info`] once a verification is spent.
    fn verified_intake<P: CryptoProvider + ?Sized>(
        &mut self,
        provider: &P,
        now: UnixTime,
        host: HostKey,
        token: &[u8],
        trust: &AcTrust<'_>,
    ) -> Result<Accepted, IntakeError> {
        let mut scratch = [0u8; MAX_TOKEN_LEN];
        let t = validate(token, now, self.audience, trust, provider, &mut scratch)?;
        let cti = t.claims.cti.ok_or(TokenError::MissingClaim(Claim::Cti))?;
        if cti.is_empty() {
            return Err(TokenError::Malformed(Malformed::Claim(Claim::Cti)).into());
        }
        let key = match t.claims.cnf {
            Some(Confirmation::PublicKey { key, .. }) => key,
            _ => return Err(IntakeError::NoPublicPopKey),
        };
        let mut grants = [Permissions(0); MAX_RESOURCES];
        for entry in t.scope.iter() {
            let Some(rest) = entry.object.strip_prefix(self.audience) else {
                continue;
            };
            for (i, resource) in self.resources.iter().enumerate() {
                let covers =
                    rest.is_empty() || rest.strip_prefix('/').is_some_and(|r| r == *resource);
                if covers {
                    grants[i].0 |= entry.permissions.0;
                }
            }
        }
        let exp = t.exp;
        self.expire(now);
        if self.ctis.iter().flatten().any(|c| c.cti() == cti) {
            return Err(IntakeError::Replayed);
        }
        // Room in both tables before anything is written.
        let mut c = CtiEntry {
            cti: [0; MAX_CLAIM_LEN],
            len: cti.len() as u8,
            exp,
            host,
        };
        c.cti[..cti.len()].copy_from_slice(cti);
        let (cti_host, cti_total) = self.cti_use(host);
        if cti_total + c.charge() > self.limits.cti_bytes {
            return Err(IntakeError::Busy { per_host: false });
        }
        if cti_host + c.charge() > self.limits.cti_bytes_per_host {
            return Err(IntakeError::Busy { per_host: true });
        }
        let cti_slot = self
            .ctis
            .iter()
            .position(Option::is_none)
            .ok_or(IntakeError::Busy { per_host: false })?;
        let replaced = self
            .tokens
            .iter()
            .position(|t| t.is_some_and(|t| t.key == key));
        let token_slot = match replaced {
            Some(i) => i,
            None => {
                let (host_use, total) = self.token_use(host);
                if total + TOKEN_ENTRY_BYTES > self.limits.token_bytes {
                    return Err(IntakeError::Busy { per_host: false });
                }
                if host_use + TOKEN_ENTRY_BYTES > self.limits.token_bytes_per_host {
                    return Err(IntakeError::Busy { per_host: true });
                }
                self.tokens
                    .iter()
                    .position(Option::is_none)
                    .ok_or(IntakeError::Busy { per_host: false })?
            }
        };
        self.ctis[cti_slot] = Some(c);
        self.tokens[token_slot] = Some(TokenEntry {
            key,
            exp,
            host,
            grants,
        });
        Ok(Accepted {
            key,
            exp,
            replaced: replaced.is_some(),
        })
    }

    fn cti_use(&self, host: HostKey) -> (usize, usize) {
        self.ctis.iter().flatten().fold((0, 0), |(h, t), c| {
            (
                h + if c.host == host { c.charge() } else { 0 },
                t + c.charge(),
            )
        })
    }

    fn token_use(&self, host: HostKey) -> (usize, usize) {
        self.tokens.iter().flatten().fold((0, 0), |(h, t), e| {
            (
                h + if e.host == host { TOKEN_ENTRY_BYTES } else { 0 },
                t + TOKEN_ENTRY_BYTES,
            )
        })
    }

    /// Decides on a request for `resource` (a path without its leading slash) with `method`
    /// from a session whose peer authenticated with `peer` (`None`: anonymous), at `now`.
    pub fn authorize(
        &mut self,
        now: UnixTime,
        peer: Option<&PublicKey>,
        resource: &str,
        method: Method,
    ) -> Result<(), Refusal> {
        let r = self.decide(now, peer, resource, method);
        match r {
            Ok(()) => self.counters.requests_allowed += 1,
            Err(Refusal::NoToken | Refusal::Expired { .. }) => self.counters.requests_no_token += 1,
            Err(Refusal::Forbidden) => self.counters.requests_forbidden += 1,
            Err(Refusal::NotFound) => self.counters.requests_not_found += 1,
        }
        r
    }

    fn decide(
        &mut self,
        now: UnixTime,
        peer: Option<&PublicKey>,
        resource: &str,
        method: Method,
    ) -> Result<(), Refusal> {
        let index = self
            .resources
            .iter()
            .position(|r| *r == resource)
            .ok_or(Refusal::NotFound)?;
        let peer = peer.ok_or(Refusal::NoToken)?;
        let slot = self
            .tokens
            .iter_mut()
            .find(|t| t.is_some_and(|t| t.key == *peer))
            .ok_or(Refusal::NoToken)?;
        let Some(entry) = *slot else {
            return Err(Refusal::NoToken);
        };
        if now >= entry.exp {
            *slot = None;
            self.counters.tokens_expired += 1;
            return Err(Refusal::Expired { exp: entry.exp });
        }
        match method.permission() {
            Some(p) if entry.grants[index].contains(p) => Ok(()),
            _ => Err(Refusal::Forbidden),
        }
    }
}

/// A fixed buffer that keeps what fits of formatted text (cut at a character boundary).
struct TextBuf {
    buf: [u8; 96],
    len: usize,
}

impl TextBuf {
    const fn new() -> Self {
        Self {
            buf: [0; 96],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl fmt::Write for TextBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            let mut b = [0u8; 4];
            let c = ch.encode_utf8(&mut b).as_bytes();
            if self.len + c.len() > self.buf.len() {
                return Ok(());
            }
            self.buf[self.len..self.len + c.len()].copy_from_slice(c);
            self.len += c.len();
        }
        Ok(())
    }
}
