//! The handshake as a CoAP resource (`PUT /dtls`, [`sigil_dtls_coap`]) on the DTLS port:
//! [`CARRIER_SHARDS`] fixed tables of [`CARRIER_SLOTS`] handshakes, a host always in the same
//! one; a handshake completed there leaves its table and becomes an ordinary session.

use super::admission::{note_unfinished, Refusal};
use super::trust::{forget_claimed, take_claimed, SharedTrust};
use super::{chain_of, offer, Delivered, SecureLayer, CID_LEN};
use crate::budget::Host;
use sigil_crypto::{Rng, RustCrypto};
use sigil_dtls::record::RecordFacts;
use sigil_dtls_coap::{Endpoint, Standing};
use sigil_time::{Instant, UnixTime};
use std::net::SocketAddr;

/// The handshakes a CoAP-carrier table refused on a flight (4.03), so far.
pub(super) fn refused_flights(ep: &Carrier) -> u64 {
    let c = ep.counters();
    c.handshake_failed + c.refused_hello
}

/// Handshakes one of the CoAP carrier's tables holds at once; a host gets at most half of its
/// table, and no more than `max_handshakes_per_host`.
pub const CARRIER_SLOTS: usize = 8;

/// The carrier's tables (hosts are spread over them by a keyed hash).
pub const CARRIER_SHARDS: usize = 8;

/// One of the carrier's endpoints: a fixed table (about 14.5 KB a slot), allocated once.
pub(super) type Carrier = Endpoint<'static, RustCrypto, SharedTrust, CARRIER_SLOTS>;

/// What the carrier's tables take, whatever their peers do.
pub const CARRIER_BYTES: usize = CARRIER_SHARDS * size_of::<Carrier>();

impl SecureLayer {
    /// Publishes the carrier's counters (`dtls_coap.*`), its sessions and its fixed memory
    /// (`mem.dtls_coap.total`), if it is enabled.
    pub(super) fn publish_carrier(&self) {
        if self.carrier.is_empty() {
            return;
        }
        let mut c = sigil_dtls_coap::Counters::default();
        let mut sessions = 0;
        for ep in &self.carrier {
            c = add_counters(c, ep.counters());
            sessions += ep.sessions();
        }
        for (name, v) in [
            ("dtls_coap.hello_verify", c.hello_verify),
            ("dtls_coap.bad_cookie", c.bad_cookie),
            ("dtls_coap.created", c.created),
            ("dtls_coap.established", c.established),
            ("dtls_coap.table_full", c.table_full),
            ("dtls_coap.peer_limit", c.peer_limit),
            ("dtls_coap.not_admitted", c.not_admitted),
            ("dtls_coap.unknown_session", c.unknown_session),
            ("dtls_coap.malformed", c.malformed),
            ("dtls_coap.wrong_method", c.wrong_method),
            ("dtls_coap.oversized", c.oversized),
            ("dtls_coap.handshake_failed", c.handshake_failed),
            ("dtls_coap.refused_hello", c.refused_hello),
            ("dtls_coap.duplicates", c.duplicates),
            ("dtls_coap.amplification", c.amplification),
            ("dtls_coap.expired", c.expired),
            ("dtls_coap.deleted", c.deleted),
            ("dtls_coap.handed_off", c.handed_off),
            ("dtls_coap.evicted", c.evicted),
            ("dtls_coap.evicted_oldest", c.evicted_oldest),
            ("dtls_coap.expired_crowded", c.expired_crowded),
            ("dtls_coap.eviction_budget", c.eviction_budget),
            ("dtls_coap.sessions", sessions as u64),
            ("mem.dtls_coap.total", CARRIER_BYTES as u64),
        ] {
            self.stats.set(name, v);
        }
    }

    /// The carrier's table of `host`, out of `tables`.
    pub(super) fn shard(&self, host: Host, tables: usize) -> usize {
        use std::hash::BuildHasher;
        (self.shard_of.hash_one(host) % tables.max(1) as u64) as usize
    }

    /// The CoAP carrier's half-open handshakes: those of `peer`'s host, and all.
    pub(super) fn carrier_in_flight(&self, peer: SocketAddr) -> (usize, usize) {
        if self.carrier.is_empty() {
            return (0, 0);
        }
        let key = carrier_peer(&peer);
        let shard = self.shard(Host::of(peer), self.carrier.len());
        (
            self.carrier[shard].half_open(&key[..HOST_BYTES]),
            self.carrier.iter().map(|ep| ep.half_open(&[])).sum(),
        )
    }

    /// A CoAP message on the DTLS port: the handshake as a CoAP resource. Its answer goes to
    /// `out`; a handshake it completes becomes a session.
    pub(super) fn carrier_datagram(
        &mut self,
        now: Instant,
        unix: UnixTime,
        rng: &mut dyn Rng,
        peer: SocketAddr,
        datagram: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<Delivered> {
        let mut carrier = std::mem::take(&mut self.carrier);
        if carrier.is_empty() {
            return Vec::new();
        }
        self.count("dtls_coap.received");
        let host = Host::of(peer);
        let shard = self.shard(host, carrier.len());
        let key = carrier_peer(&peer);
        // Only a `PUT /dtls` can start a handshake: what its ClientHello would be offered (a
        // fresh connection ID, the session it asks to resume if the cache has it) is made for
        // that alone.
        let message = sigil_coap::Message::parse(datagram).ok();
        let is_put = message
            .as_ref()
            .is_some_and(|m| m.code == sigil_coap::Code::PUT);
        let requested = message
            .as_ref()
            .filter(|_| is_put)
            .and_then(|m| RecordFacts::parse(m.payload, 0).ok())
            .and_then(|f| f.client_hello)
            .and_then(|ch| ch.requested_session.copied());
        let resume = self.resumable(requested.as_ref(), now);
        // A peer that completed a handshake before (a session at this address, or a cached
        // session made from this host that no other address is resuming as known) is kept
        // over strangers in a crowded table.
        let resumed_here = requested.is_some_and(|id| {
            self.resumable_from(&id, host, now)
                && self.carrier_resuming.get(&id).is_none_or(|a| *a == peer)
        });
        let known =
            is_put && (self.sessions.contains_key(&peer) || self.vouched(host) || resumed_here);
        if is_put && resumed_here {
            if let Some(id) = requested {
                self.carrier_resuming.insert(id, peer);
            }
        }
        let cid = if is_put { self.fresh_cid(rng) } else { None };
        // Admitted (once the cookie is valid) only with room in the session table for what
        // it may become, counting the handshakes in progress over either carrier, and within
        // the host's handshake rate.
        let room = if !is_put || self.sessions.contains_key(&peer) {
            Ok(())
        } else {
            let in_flight = (
                carrier[shard].half_open(&key[..HOST_BYTES]),
                carrier.iter().map(|ep| ep.half_open(&[])).sum(),
            );
            let mut room = self.session_room(host, in_flight, 0);
            if room.is_err() {
                self.expire_sessions(now);
                room = self.session_room(host, in_flight, 0);
            }
            room
        };
        let chain = chain_of(&self.config);
        let offer = offer(
            &self.config,
            &self.key,
            &chain,
            cid.as_ref(),
            resume.as_ref(),
            unix,
        );
        let standing = if known {
            Standing::Known
        } else if self.suspect(host, now) {
            Standing::Suspect
        } else {
            Standing::Stranger
        };
        let start_rate = &mut self.start_rate;
        let unfinished = &mut self.unfinished;
        let mut refusal = None;
        let mut admit = |_: &[u8]| {
            if let Err(r) = room {
                refusal = Some(r);
                return false;
            }
            if !start_rate.take(now, host) {
                refusal = Some(Refusal::HostRate);
                return false;
            }
            note_unfinished(unfinished, host, now);
            true
        };
        let ep = &mut carrier[shard];
        // DELETE of the resource an established session was made at: 4.05 (it ends with its
        // authenticated close_notify), also after the carrier's slot has gone.
        if let Some(id) = self.sessions.get(&peer).and_then(|p| p.carrier_id) {
            if let Some(n) = ep.refuse_delete_of(id, datagram, &mut self.buf) {
                out.push((peer, self.buf[..n].to_vec()));
                self.count("dtls_coap.delete_of_established");
                self.carrier = carrier;
                return Vec::new();
            }
        }
        let refused_before = refused_flights(ep);
        forget_claimed();
        let answer = ep.handle_datagram_from(
            now,
            &key,
            standing,
            datagram,
            &offer,
            &mut admit,
            rng,
            &mut self.buf,
        );
        // A whole flight is handled in one call: what it claimed is this datagram's.
        let claimed = take_claimed();
        if let Some(n) = answer {
            out.push((peer, self.buf[..n].to_vec()));
        }
        if let Some(r) = refusal {
            self.count(r.counter());
            crate::limited!(self.log, Self::secs(now), r.counter(), info, %peer, reason = ?r, "ClientHello over CoAP refused");
        }
        if refused_flights(ep) > refused_before {
            // The endpoint answers 4.03 without saying why: a flight that named an identity
            // and failed is most often one not provisioned, revoked or without a PSK (the
            // operator's to fix, so at the default level, as on the record layer).
            match &claimed {
                Some(c) => {
                    crate::limited!(self.log, Self::secs(now), "dtls.handshake_refused_identity", warn, %peer, claimed = %c, "DTLS handshake over CoAP refused (identity not provisioned, revoked or without a PSK, or a bad Finished)");
                }
                None => {
                    crate::limited!(self.log, Self::secs(now), "dtls.handshake_failed", debug, %peer, claimed = "-", "DTLS handshake over CoAP failed");
                }
            }
        }
        let mut delivered = Vec::new();
        while let Some(est) = ep.take_established() {
            // Only the datagram just handled can have completed a handshake.
            if est.peer() != key {
                self.count("dtls_coap.peer_mismatch");
                continue;
            }
            let cid: Option<[u8; CID_LEN]> = est.traffic.connection_id().try_into().ok();
            if cid.is_some_and(|c| self.by_cid.contains_key(&c)) {
                self.count("dtls_coap.cid_taken");
                continue;
            }
            let id = est.id;
            delivered.extend(self.install_session(
                now,
                peer,
                est.traffic,
                host,
                cid,
                now,
                [0; 32],
                out,
            ));
            if let Some(p) = self.sessions.get_mut(&peer) {
                p.carrier_id = Some(id);
                self.count("dtls_coap.handshake_completed");
                self.unfinished.remove(&host);
            }
        }
        self.carrier = carrier;
        delivered
    }
}

/// The sum of two tables' counters.
pub(super) fn add_counters(
    a: sigil_dtls_coap::Counters,
    b: &sigil_dtls_coap::Counters,
) -> sigil_dtls_coap::Counters {
    sigil_dtls_coap::Counters {
        hello_verify: a.hello_verify + b.hello_verify,
        bad_cookie: a.bad_cookie + b.bad_cookie,
        created: a.created + b.created,
        established: a.established + b.established,
        table_full: a.table_full + b.table_full,
        peer_limit: a.peer_limit + b.peer_limit,
        unknown_session: a.unknown_session + b.unknown_session,
        malformed: a.malformed + b.malformed,
        wrong_method: a.wrong_method + b.wrong_method,
        oversized: a.oversized + b.oversized,
        handshake_failed: a.handshake_failed + b.handshake_failed,
        refused_hello: a.refused_hello + b.refused_hello,
        duplicates: a.duplicates + b.duplicates,
        amplification: a.amplification + b.amplification,
        expired: a.expired + b.expired,
        deleted: a.deleted + b.deleted,
        not_admitted: a.not_admitted + b.not_admitted,
        handed_off: a.handed_off + b.handed_off,
        evicted: a.evicted + b.evicted,
        evicted_oldest: a.evicted_oldest + b.evicted_oldest,
        eviction_budget: a.eviction_budget + b.eviction_budget,
        expired_crowded: a.expired_crowded + b.expired_crowded,
    }
}

/// Leading bytes of [`carrier_peer`] that name the host: the host's family and its address
/// (IPv4, or the IPv6 /64) padded to 8 bytes.
pub(super) const HOST_BYTES: usize = 9;

/// A peer address as the carrier's endpoint sees it: its host first (family, then an IPv4
/// address or an IPv6 /64), so the endpoint's per-peer limit is per host and no IPv4 host
/// shares its bytes with an IPv6 one; then the address and the port.
pub(super) fn carrier_peer(peer: &SocketAddr) -> [u8; 27] {
    let mut b = [0u8; 27];
    match Host::of(*peer).ip() {
        std::net::IpAddr::V4(h) => {
            b[0] = 4;
            b[1..5].copy_from_slice(&h.octets());
        }
        std::net::IpAddr::V6(h) => {
            b[0] = 6;
            b[1..HOST_BYTES].copy_from_slice(&h.octets()[..HOST_BYTES - 1]);
        }
    }
    let ip = match peer.ip() {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        std::net::IpAddr::V6(a) => a.octets(),
    };
    b[HOST_BYTES..HOST_BYTES + 16].copy_from_slice(&ip);
    b[HOST_BYTES + 16..].copy_from_slice(&peer.port().to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carrier_peers_are_host_first_with_their_family() {
        let key = |a: &str| carrier_peer(&a.parse().unwrap());
        // Distinct addresses stay distinct.
        assert_ne!(key("10.1.2.3:5683"), key("10.1.2.3:5684"));
        assert_ne!(key("10.1.2.3:1"), key("[2001:db8::1]:1"));
        // One /64 is one host; an IPv4-mapped address is its IPv4 host.
        let (x, y) = (
            key("[2001:db8:1:2:3:4:5:6]:1"),
            key("[2001:db8:1:2:ff:4:5:6]:2"),
        );
        assert_eq!(x[..HOST_BYTES], y[..HOST_BYTES]);
        assert_eq!(
            key("10.1.2.3:1")[..HOST_BYTES],
            key("[::ffff:10.1.2.3]:2")[..HOST_BYTES]
        );
        // An IPv6 /64 whose first bytes spell an IPv4 host is another host.
        assert_ne!(
            key("32.1.13.184:1")[..HOST_BYTES],
            key("[2001:db8::1]:1")[..HOST_BYTES]
        );
    }
}
