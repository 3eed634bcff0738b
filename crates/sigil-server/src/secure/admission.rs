//! Who may start a handshake, and what gives way: the stateless cookie exchange, the tables'
//! byte budgets per host and in total, the per-host handshake rate, suspects, the half-open
//! handshake a newcomer may push out of a full table (within a total budget of evictions),
//! expiry under pressure, and the identity's cap of sessions.

use super::config::DtlsConfig;
use super::trust::take_claimed;
use super::{chain_of, offer, Conn, Peer, SecureLayer, HANDSHAKE_BYTES, SESSION_BYTES};
use crate::budget::{shrink_if_sparse, Caps, Host, Over};
use sigil_crypto::{Rng, RustCrypto};
use sigil_dtls::record::RecordFacts;
use sigil_dtls::{Connection, Stateless};
use sigil_identity::Identity;
use sigil_time::{Instant, UnixTime};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::Duration;

/// How often the cookie secrets turn (RFC 6347 §4.2.1): a cookie seen on the wire is good for
/// at most two of these, from its peer address and for its ClientHello only.
pub const COOKIE_ROTATION: Duration = Duration::from_secs(60);

/// Why a ClientHello with a valid cookie got no handshake: its counter, for the stats and the
/// rate-limited log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The host already holds its share of half-open handshakes.
    HostHandshakes,
    /// The handshake table is full and no host holds more than the newcomer's would.
    Handshakes,
    /// The host's share of sessions is taken by live sessions (and its own handshakes).
    HostSessions,
    /// The session table is full of live sessions (and handshakes that may become some).
    Sessions,
    /// The host started its burst of handshakes and is above its sustained rate.
    HostRate,
    /// The table is full and the total budget of evictions is spent for now.
    EvictionBudget,
}

/// How long after its last progress a stranger's half-open handshake is safe from newcomers
/// (on the record layer): RFC 6347 §4.2.4.1 retransmits after 1 s, then 2 s, then 4 s, so a
/// client whose flight (or the server's answer) is lost twice still sends the flight that
/// moves its handshake on within 1 + 2 + 4 = 7 s.
pub const HANDSHAKE_SHIELD: Duration = Duration::from_secs(7);

/// How long after its last progress a stranger's half-open handshake over the CoAP carrier is
/// safe from newcomers: one CoAP retransmission sequence (RFC 7252 §4.8: ACK_TIMEOUT 2 s,
/// doubled on each of the first retransmissions: 2 + 4 + 8 = 14 s), and a second for the
/// random factor's spread and a signature on a slow device.
pub const CARRIER_HANDSHAKE_SHIELD: Duration = Duration::from_secs(15);

/// A token bucket for the whole table (thousandths of an eviction): how many half-open
/// handshakes newcomers may push out, whatever the number of their hosts.
pub(super) struct TotalRate {
    tokens: u64,
    burst: u64,
    /// Tokens added every `period_ms`.
    per: u64,
    period_ms: u64,
    at: Instant,
}

impl TotalRate {
    /// `per` evictions every `period`, and a reserve of `burst`.
    pub(super) fn new(per: usize, period: Duration, burst: usize) -> Self {
        let burst = (burst.max(1) as u64) * 1000;
        Self {
            tokens: burst,
            burst,
            per: per.max(1) as u64,
            period_ms: (period.as_millis().clamp(1, u128::from(u32::MAX))) as u64,
            at: Instant::ZERO,
        }
    }

    pub(super) fn refill(&mut self, now: Instant) {
        let ms = now
            .saturating_since(self.at)
            .as_millis()
            .min(u128::from(u32::MAX)) as u64;
        let add = ms.saturating_mul(self.per).saturating_mul(1000) / self.period_ms;
        if add > 0 {
            self.tokens = self.tokens.saturating_add(add).min(self.burst);
            self.at = now;
        }
    }

    pub(super) fn has(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.tokens >= 1000
    }

    pub(super) fn take(&mut self, now: Instant) -> bool {
        if !self.has(now) {
            return false;
        }
        self.tokens -= 1000;
        true
    }
}

impl Refusal {
    pub(super) fn counter(self) -> &'static str {
        match self {
            Self::EvictionBudget => "dtls.refused_eviction_budget",
            Self::HostHandshakes => "dtls.refused_host_handshakes",
            Self::Handshakes => "dtls.refused_tables_full",
            Self::HostSessions => "dtls.refused_host_sessions",
            Self::Sessions => "dtls.refused_tables_full",
            Self::HostRate => "dtls.refused_host_rate",
        }
    }
}

/// Most hosts whose handshake-rate bucket is kept (about 48 B each: 196 KiB at most). A
/// bucket that has filled up again is the same as none and goes first; past that, the host
/// with the most tokens left (the least throttled) gives its bucket up.
pub const RATE_HOSTS: usize = 4096;

/// Handshake starts per source host: a token bucket in thousandths of a handshake.
pub(super) struct StartRate {
    burst: u64,
    per_sec: u64,
    pub(super) hosts: HashMap<Host, (u64, Instant)>,
}

impl StartRate {
    pub(super) fn new(burst: u32, per_sec: u32) -> Self {
        Self {
            burst: u64::from(burst.max(1)) * 1000,
            per_sec: u64::from(per_sec),
            hosts: HashMap::new(),
        }
    }

    /// The tokens (thousandths) of a bucket at `now`.
    pub(super) fn level(&self, (tokens, at): (u64, Instant), now: Instant) -> u64 {
        let ms = now
            .saturating_since(at)
            .as_millis()
            .min(u128::from(u32::MAX)) as u64;
        tokens
            .saturating_add(ms.saturating_mul(self.per_sec))
            .min(self.burst)
    }

    /// Whether `host`'s bucket holds a handshake start (nothing taken).
    pub(super) fn has(&self, now: Instant, host: Host) -> bool {
        self.hosts
            .get(&host)
            .is_none_or(|b| self.level(*b, now) >= 1000)
    }

    /// Takes one handshake start from `host`'s bucket, if it has one.
    pub(super) fn take(&mut self, now: Instant, host: Host) -> bool {
        if !self.hosts.contains_key(&host) && self.hosts.len() >= RATE_HOSTS {
            let (burst, per_sec) = (self.burst, self.per_sec);
            let probe = Self {
                burst,
                per_sec,
                hosts: HashMap::new(),
            };
            self.hosts.retain(|_, b| probe.level(*b, now) < burst);
            if self.hosts.len() >= RATE_HOSTS {
                let least_throttled = self
                    .hosts
                    .iter()
                    .max_by_key(|(_, b)| probe.level(**b, now))
                    .map(|(h, _)| *h);
                if let Some(h) = least_throttled {
                    self.hosts.remove(&h);
                }
            }
            shrink_if_sparse(&mut self.hosts);
        }
        let bucket = self.hosts.get(&host).copied().unwrap_or((self.burst, now));
        let level = self.level(bucket, now);
        if level < 1000 {
            self.hosts.insert(host, (level, now));
            return false;
        }
        self.hosts.insert(host, (level - 1000, now));
        true
    }
}

/// The caps of a table of `entries` entries of `bytes` each, `per_host` of them per host.
pub(super) fn caps(entries: usize, per_host: usize, bytes: usize) -> Caps {
    Caps {
        total: entries.saturating_mul(bytes),
        per_host: per_host.clamp(1, entries.max(1)).saturating_mul(bytes),
    }
}

impl SecureLayer {
    /// Drops handshakes older than `handshake_timeout`; with the table above half full, also
    /// strangers' handshakes without progress for [`crowded_lifetime`]
    /// (`dtls.handshake_expired_crowded`).
    pub(super) fn expire_handshakes(&mut self, now: Instant) {
        let stale = self.config.handshake_timeout;
        let crowded = self.handshake_bytes.used() * 2 > self.handshake_bytes.caps().total;
        let short = crowded_lifetime(&self.config);
        let old: Vec<(SocketAddr, bool)> = self
            .handshakes
            .iter()
            .filter_map(|(a, p)| {
                let age = now.saturating_since(p.created);
                if age >= stale {
                    Some((*a, false))
                } else if crowded && !p.known && now.saturating_since(p.progress) >= short {
                    Some((*a, true))
                } else {
                    None
                }
            })
            .collect();
        for (a, early) in old {
            if let Some(p) = self.handshakes.remove(&a) {
                self.release_handshake(p);
                self.count(if early {
                    "dtls.handshake_expired_crowded"
                } else {
                    "dtls.handshake_expired"
                });
            }
        }
    }

    /// A ClientHello: the stateless cookie exchange, then (cookie valid, room in the tables)
    /// a handshake slot; a client certificate is checked at the caller's Unix time `unix`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new_handshake(
        &mut self,
        now: Instant,
        unix: UnixTime,
        rng: &mut dyn Rng,
        peer: SocketAddr,
        datagram: &[u8],
        facts: Option<&RecordFacts<'_>>,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let addr = peer_bytes(&peer);
        let cookie = match self
            .cookie
            .respond(&RustCrypto, &addr, datagram, &mut self.buf)
        {
            Stateless::HelloVerify(n) => {
                self.count("dtls.hello_verify");
                out.push((peer, self.buf[..n].to_vec()));
                return;
            }
            Stateless::Drop(e) => {
                self.count("dtls.bad_client_hello");
                crate::limited!(self.log, Self::secs(now), "dtls.bad_client_hello", debug, %peer, error = %e, "ClientHello dropped");
                return;
            }
            Stateless::Accept(cookie) => cookie,
        };
        // The cookie checked out, so the ClientHello parsed: its facts are there.
        let Some(hello) = facts.and_then(|f| f.client_hello) else {
            self.count("dtls.bad_client_hello");
            return;
        };
        let host = Host::of(peer);
        let requested = hello.requested_session.copied();
        // A peer that completed a handshake before: a session at this address, or a cached
        // session it asks to resume that was made from this host, if no other handshake is
        // already resuming it as known. Session IDs travel in clear, so naming one alone
        // proves nothing.
        let known = self.sessions.contains_key(&peer)
            || self.vouched(host)
            || requested.is_some_and(|id| {
                self.resumable_from(&id, host, now)
                    && !self
                        .handshakes
                        .iter()
                        .any(|(a, p)| *a != peer && p.known && p.resuming == Some(id))
            });
        // A client that started over gives up its old handshake first (its own slot); it
        // still counts as holding one, so starting over never pushes out someone else's, and
        // its new handshake keeps the old one's progress (starting over is not progress).
        let restarted = match self.handshakes.remove(&peer) {
            Some(old) => {
                let since = (old.progress, old.progressed);
                self.release_handshake(old);
                Some(since)
            }
            None => None,
        };
        // Room is found before any handshake work, but nothing is pushed out until the
        // ClientHello has been accepted.
        let room = self
            .make_room(now, host, peer, known, restarted.is_some())
            .and_then(|victim| {
                if self.start_rate.take(now, host) {
                    Ok(victim)
                } else {
                    Err(Refusal::HostRate)
                }
            });
        let victim = match room {
            Ok(v) => v,
            Err(refusal) => {
                self.count(refusal.counter());
                crate::limited!(self.log, Self::secs(now), refusal.counter(), info, %peer, reason = ?refusal, "ClientHello refused: no room in the DTLS tables");
                return;
            }
        };
        let chain = chain_of(&self.config);
        let cid = self.fresh_cid(rng);
        let resume = self.resumable(hello.requested_session, now);
        let offer = offer(
            &self.config,
            &self.key,
            &chain,
            cid.as_ref(),
            resume.as_ref(),
            unix,
        );
        match Connection::accept(
            RustCrypto,
            self.trust.clone(),
            self.config.dtls,
            &offer,
            rng,
            cookie,
            datagram,
            now,
        ) {
            Ok(conn) => {
                if let Some((at, why)) = victim {
                    if let Some(p) = self.handshakes.remove(&at) {
                        if !known {
                            self.evictions.take(now);
                        }
                        self.release_handshake(p);
                        self.count("dtls.handshake_evicted");
                        self.count(why);
                    }
                }
                if self.handshake_bytes.charge(host, HANDSHAKE_BYTES).is_err() {
                    // make_room found room; this is unreachable unless the caps are zero.
                    self.count(Refusal::Handshakes.counter());
                    return;
                }
                let took_cid = !conn.connection_id().is_empty();
                if took_cid {
                    self.count("dtls.connection_id");
                }
                let (progress, progressed) = restarted.unwrap_or((now, false));
                let mut p = Peer {
                    cid: cid.filter(|_| took_cid),
                    conn: Box::new(conn),
                    host,
                    created: now,
                    last_seen: now,
                    progress,
                    progressed,
                    resuming: requested.filter(|_| resume.is_some()),
                    hello_random: *hello.random,
                    auth: None,
                    row: 0,
                    claimed: take_claimed(),
                    known,
                    carrier_id: None,
                };
                self.count("dtls.handshake_started");
                note_unfinished(&mut self.unfinished, host, now);
                if restarted.is_some() {
                    self.count("dtls.handshake_restarted");
                }
                self.flush(now, peer, &mut p, out);
                self.handshakes.insert(peer, p);
            }
            Err(e) => {
                // Nothing was pushed out for it.
                self.count("dtls.handshake_failed");
                crate::limited!(self.log, Self::secs(now), "dtls.handshake_failed", debug, %peer, error = %e, "ClientHello refused");
                if let Some(n) = sigil_dtls::refusal(&e, datagram, &mut self.buf) {
                    out.push((peer, self.buf[..n].to_vec()));
                }
            }
        }
    }

    /// Whether `host` holds no half-open handshake here and its last one started (on either
    /// carrier) within [`SUSPECT_MEMORY`] did not complete: it was pushed out, expired or
    /// failed, and none completed since. Such a host takes only free slots
    /// (`dtls.refused_tables_full` otherwise), so hosts that hold handshakes without finishing
    /// them cannot push out others' in turn.
    pub(super) fn suspect(&self, host: Host, now: Instant) -> bool {
        self.handshake_bytes.held_by(host) == 0
            && self
                .unfinished
                .get(&host)
                .is_some_and(|t| now.saturating_since(*t) < SUSPECT_MEMORY)
    }

    /// Whether `host` holds a live session: a device there completed an authenticated
    /// handshake, so the host's newcomers count as known (not suspects, not held to the
    /// eviction budget strangers spend). A host an attacker shares with honest devices (one
    /// NAT) is vouched for too; it stays within the host's share and handshake rate.
    pub(super) fn vouched(&self, host: Host) -> bool {
        self.session_bytes.held_by(host) > 0
    }

    /// Room for one more half-open handshake from `host` (at `peer`), which may become a
    /// session; nothing is pushed out here, the handshake to push out (and its counter) is
    /// returned for the caller to remove once the ClientHello is accepted:
    /// - the host's own share of the handshake table: stale handshakes expire first; beyond
    ///   that, refused (the host's other handshakes are not pushed out, so a burst of its own
    ///   devices still completes one by one);
    /// - the whole handshake table: stale handshakes expire first (above half full, a
    ///   stranger's without progress for [`crowded_lifetime`]); then, within the total
    ///   budget of evictions ([`TotalRate`]), the handshake [`SecureLayer::victim`] names;
    ///   else refused. Nothing is pushed out for a host above its handshake rate;
    /// - the session table, counting every handshake in progress as a session to be: idle
    ///   sessions expire first; a live session is never pushed out. A handshake from the
    ///   address of an existing session will replace it, so it needs no new room.
    pub(super) fn make_room(
        &mut self,
        now: Instant,
        host: Host,
        peer: SocketAddr,
        known: bool,
        restarted: bool,
    ) -> Result<Option<(SocketAddr, &'static str)>, Refusal> {
        if self.handshake_bytes.check(host, HANDSHAKE_BYTES).is_err() {
            self.expire_handshakes(now);
        }
        let mut victim = None;
        match self.handshake_bytes.check(host, HANDSHAKE_BYTES) {
            Ok(()) => {}
            Err(Over::Host) => return Err(Refusal::HostHandshakes),
            Err(Over::Total) => {
                if !self.start_rate.has(now, host) {
                    return Err(Refusal::HostRate);
                }
                let Some(v) = self.victim(now, host, known, restarted) else {
                    return Err(Refusal::Handshakes);
                };
                // A known peer's push-out is not held to the budget: it is spent by strangers.
                if !known && !self.evictions.has(now) {
                    return Err(Refusal::EvictionBudget);
                }
                victim = Some(v);
            }
        }
        if self.sessions.contains_key(&peer) {
            return Ok(victim);
        }
        let in_flight = self.carrier_in_flight(peer);
        // The victim's slot would be freed for this one.
        let freed = usize::from(victim.is_some());
        let mut room = self.session_room(host, in_flight, freed);
        if room.is_err() {
            self.expire_sessions(now);
            room = self.session_room(host, in_flight, freed);
        }
        room.map(|()| victim)
    }

    /// Whether the session table has room for the sessions the handshakes in progress (and
    /// one more from `host`, less `freed` about to be pushed out) may become; `carrier` is
    /// the CoAP carrier's half-open handshakes (the host's, all), which are not in the
    /// handshake table.
    pub(super) fn session_room(
        &self,
        host: Host,
        carrier: (usize, usize),
        freed: usize,
    ) -> Result<(), Refusal> {
        let host_handshakes = self.handshake_bytes.held_by(host) / HANDSHAKE_BYTES + carrier.0;
        let host_would = self
            .session_bytes
            .held_by(host)
            .saturating_add((host_handshakes + 1).saturating_mul(SESSION_BYTES));
        if host_would > self.session_bytes.caps().per_host {
            return Err(Refusal::HostSessions);
        }
        let all_would = self.session_bytes.used().saturating_add(
            (self.handshakes.len() + carrier.1 + 1)
                .saturating_sub(freed)
                .saturating_mul(SESSION_BYTES),
        );
        if all_would > self.session_bytes.caps().total {
            return Err(Refusal::Sessions);
        }
        Ok(())
    }

    /// The half-open handshake a newcomer from `host` may push out of a full table, and its
    /// counter. Only a stranger's (not `known`) without progress for [`HANDSHAKE_SHIELD`] is
    /// a candidate, and of those the ones that never progressed go first, then the longest
    /// without progress. The candidate of the host holding the most goes if that host holds
    /// more than `host` would with one more (`dtls.handshake_evicted_heaviest`); else, for a
    /// newcomer whose host holds none (`restarted`: it just gave one up, so it does not) or a
    /// known peer, the first candidate of all (`dtls.handshake_evicted_oldest`).
    pub(super) fn victim(
        &self,
        now: Instant,
        host: Host,
        known: bool,
        restarted: bool,
    ) -> Option<(SocketAddr, &'static str)> {
        if !known && self.suspect(host, now) {
            return None;
        }
        let candidate =
            |p: &Peer<Conn>| !p.known && now.saturating_since(p.progress) >= HANDSHAKE_SHIELD;
        let order = |p: &Peer<Conn>| (p.progressed, p.progress, p.created);
        let mut by_host: HashMap<Host, usize> = HashMap::new();
        for p in self.handshakes.values() {
            *by_host.entry(p.host).or_insert(0) += 1;
        }
        let own = self.handshake_bytes.held_by(host) / HANDSHAKE_BYTES;
        let heavier: HashSet<Host> = by_host
            .iter()
            .filter(|(_, n)| **n > own + 1)
            .map(|(h, _)| *h)
            .collect();
        if !heavier.is_empty() {
            let most = by_host
                .iter()
                .filter(|(h, _)| heavier.contains(*h))
                .map(|(_, n)| *n)
                .max()
                .unwrap_or(0);
            let heaviest = self
                .handshakes
                .iter()
                .filter(|(_, p)| by_host.get(&p.host) == Some(&most) && candidate(p))
                .min_by_key(|(_, p)| order(p))
                .map(|(a, _)| *a);
            if let Some(a) = heaviest {
                return Some((a, "dtls.handshake_evicted_heaviest"));
            }
        }
        let holds_none = !restarted && own == 0;
        if !holds_none && !known {
            return None;
        }
        self.handshakes
            .iter()
            .filter(|(_, p)| candidate(p))
            .min_by_key(|(_, p)| order(p))
            .map(|(a, _)| (*a, "dtls.handshake_evicted_oldest"))
    }

    /// Before `identity` gets a new session: if it holds `max_sessions_per_identity`
    /// already, its least recently active one is closed (an alert to its address) and its
    /// bytes go back, whatever host it is charged to.
    pub(super) fn make_room_for_identity(
        &mut self,
        now: Instant,
        identity: &Identity,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let cap = self.config.max_sessions_per_identity.max(1);
        loop {
            // The least recently active, preferring one that delivered nothing in this batch
            // (whose read mark is not due); among sessions restored at once, the one stored
            // first (row IDs grow).
            let mut held = 0usize;
            let mut oldest: Option<((bool, Instant, i64), SocketAddr)> = None;
            for (addr, p) in &self.sessions {
                if p.auth.as_ref().is_some_and(|a| a.identity() == identity) {
                    held += 1;
                    let rank = (self.marks_due.contains(addr), p.last_seen, p.row);
                    if oldest.is_none_or(|(r, _)| rank < r) {
                        oldest = Some((rank, *addr));
                    }
                }
            }
            let Some((_, addr)) = oldest.filter(|_| held >= cap) else {
                return;
            };
            let Some(mut p) = self.sessions.remove(&addr) else {
                return;
            };
            self.count("dtls.gave_way.identity_cap");
            crate::limited!(self.log, Self::secs(now), "dtls.gave_way.identity_cap", info, peer = %addr, identity = %identity, cap, "DTLS session closed: its identity opened a new one at its cap");
            if p.conn.close().is_ok() {
                self.flush(now, addr, &mut p, out);
            }
            // What it delivered in this batch is dropped with it, as for a failed save: its
            // stored row (and read mark) goes, so those records must not be acted on.
            self.release_unsaved(addr, p);
        }
    }
}

/// How long, under pressure (the table above half full), a stranger's half-open handshake
/// lives after its last progress: `crowded_handshake_timeout`, never less than a third more
/// than [`HANDSHAKE_SHIELD`] (so a newcomer has a while to push out what went the shield
/// without progress before it expires), nor more than `handshake_timeout`.
pub(super) fn crowded_lifetime(config: &DtlsConfig) -> Duration {
    config
        .crowded_handshake_timeout
        .max(HANDSHAKE_SHIELD + HANDSHAKE_SHIELD / 3)
        .min(config.handshake_timeout)
}

/// How long a host whose handshake did not complete stays a suspect (unless it completes one):
/// longer than an attacker's cycle of holding a slot until it expires and starting again, so
/// hosts that never finish a handshake push out at most one each.
pub const SUSPECT_MEMORY: Duration = Duration::from_secs(600);

/// Notes that `host` started a handshake at `now` (kept for at most [`RATE_HOSTS`] hosts:
/// entries older than [`SUSPECT_MEMORY`] go first; with none of those, the host is not noted).
pub(super) fn note_unfinished(map: &mut HashMap<Host, Instant>, host: Host, now: Instant) {
    if !map.contains_key(&host) && map.len() >= RATE_HOSTS {
        map.retain(|_, t| now.saturating_since(*t) < SUSPECT_MEMORY);
        if map.len() >= RATE_HOSTS {
            return;
        }
    }
    map.insert(host, now);
}

/// The address bytes the cookie is bound to.
pub(super) fn peer_bytes(peer: &SocketAddr) -> Vec<u8> {
    let mut v = match peer.ip() {
        std::net::IpAddr::V4(a) => a.octets().to_vec(),
        std::net::IpAddr::V6(a) => a.octets().to_vec(),
    };
    v.extend_from_slice(&peer.port().to_be_bytes());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rate table stays within [`RATE_HOSTS`] buckets under a spread of hosts; refilled
    /// buckets go first, then the least throttled, so a throttled host keeps its bucket.
    #[test]
    fn rate_buckets_are_bounded_and_throttled_hosts_keep_theirs() {
        let mut r = StartRate::new(2, 1);
        let t0 = Instant::ZERO;
        let throttled = Host::of_ip([198, 51, 100, 1].into());
        assert!(r.take(t0, throttled) && r.take(t0, throttled));
        assert!(!r.take(t0, throttled));
        for i in 0..3 * RATE_HOSTS as u32 {
            let h = Host::of_ip(std::net::Ipv4Addr::from(0x0a00_0000 + i).into());
            assert!(r.take(t0, h), "a new host has its burst");
            assert!(r.hosts.len() <= RATE_HOSTS);
        }
        assert!(
            !r.take(t0, throttled),
            "the throttled host kept its empty bucket"
        );
        // A second on, one token back.
        let t1 = t0 + Duration::from_secs(1);
        assert!(r.take(t1, throttled));
        assert!(!r.take(t1, throttled));
    }
}
