//! The tokens this server holds as a resource server, and the `cti` replay cache, both
//! charged in bytes per source host and in total.

use super::authority::Authority;
use super::rate::{Bucket, Rate, SESSION_RATE, SUBJECT_RATE};
use crate::budget::{ByteBudget, Caps, Host, ENTRY_OVERHEAD};
use crate::stats::Stats;
use sigil_ace::{
    validate, AceError, AceErrorCode, Confirmation, Permissions, TokenError, TokenForm,
    MAX_TOKEN_LEN,
};
use sigil_crypto::RustCrypto;
use sigil_identity::Identity;
use sigil_time::UnixTime;
use std::collections::HashMap;

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

/// The tokens this server holds as a resource server, and the `cti` of every token it
/// accepted that has not expired yet.
pub struct Tokens {
    held: HashMap<PopKey, Held>,
    /// Tokens held per subject (for [`TokenCaps::per_subject`]).
    per_subject: HashMap<Identity, usize>,
    seen: HashMap<Vec<u8>, Seen>,
    budget: ByteBudget,
    cti_budget: ByteBudget,
    pub(super) caps: TokenCaps,
    /// The acceptance order of the next token.
    next_order: u64,
    /// Tokens that gave way to a newer one of their subject at its cap; and tokens and `cti`s
    /// dropped because their subject was revoked.
    gave_way: u64,
    dropped_revoked: u64,
    /// `/token` buckets per subject and per session.
    pub(super) subject_buckets: HashMap<Identity, Bucket>,
    pub(super) session_buckets: HashMap<std::net::SocketAddr, Bucket>,
    /// When the full buckets were last forgotten (seconds).
    pub(super) buckets_pruned: i64,
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

#[cfg(test)]
mod tests {
    use super::super::tests_support::*;
    use super::super::{Binding, Issued, KID_PREFIX};
    use super::*;
    use sigil_crypto::{CryptoProvider, SignatureAlgorithm};

    fn host(n: u8) -> Host {
        Host::of(std::net::SocketAddr::from(([10, 0, 0, n], 5683)))
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
