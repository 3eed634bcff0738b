//! A completed handshake, from either carrier, becomes a session of the session table.

use super::trust::auth_of;
use super::{Conn, Delivered, Peer, SecureLayer, CID_LEN, HANDSHAKE_BYTES, SESSION_BYTES};
use crate::budget::{shrink_if_sparse, Host};
use sigil_crypto::RustCrypto;
use sigil_dtls::Traffic;
use sigil_time::Instant;
use std::net::SocketAddr;

impl SecureLayer {
    /// A completed handshake becomes a session: only its established state is kept.
    pub(super) fn established(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        p: Peer<Conn>,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<Delivered> {
        self.handshake_bytes.refund(p.host, HANDSHAKE_BYTES);
        shrink_if_sparse(&mut self.handshakes);
        self.unfinished.remove(&p.host);
        let Peer {
            conn,
            host,
            cid,
            created,
            hello_random,
            ..
        } = p;
        let traffic = match conn.into_traffic() {
            Ok(t) => t,
            Err(_) => {
                self.count("dtls.handshake_failed");
                return Vec::new();
            }
        };
        self.install_session(now, peer, traffic, host, cid, created, hello_random, out)
    }

    /// An established [`Traffic`] (from either carrier) becomes the session of `peer`: charged
    /// to `host`, remembered for resumption, stored before it seals anything.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn install_session(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        traffic: Traffic<RustCrypto>,
        host: Host,
        cid: Option<[u8; CID_LEN]>,
        created: Instant,
        hello_random: [u8; 32],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) -> Vec<Delivered> {
        let auth = auth_of(&traffic, &self.trust);
        // The session it replaces (a device that rebooted at the same address) goes first,
        // so its bytes are there for the new one.
        let replaced = self.sessions.remove(&peer);
        if let Some(old) = replaced {
            self.count("dtls.session_replaced");
            self.release_session(old);
        }
        self.next_row += 1;
        let mut p = Peer {
            conn: Box::new(traffic),
            host,
            cid,
            created,
            last_seen: now,
            progress: now,
            progressed: true,
            resuming: None,
            hello_random,
            auth,
            row: self.next_row,
            claimed: None,
            known: true,
            carrier_id: None,
        };
        // At its identity's cap, the identity's least recently active session gives way
        // ([`SecureLayer::make_room_for_identity`]): after the new one has its room, unless
        // the room is what that session's bytes are needed for.
        let mut charged = self.session_bytes.charge(host, SESSION_BYTES).is_ok();
        if let Some(identity) = p.auth.as_ref().map(|a| *a.identity()) {
            self.make_room_for_identity(now, &identity, out);
            if !charged {
                charged = self.session_bytes.charge(host, SESSION_BYTES).is_ok();
            }
        }
        if !charged {
            // Room was checked when the handshake started, counting it; this happens only
            // if that room went to a session that moved here by connection ID since.
            self.count("dtls.refused_sessions_full");
            crate::limited!(self.log, Self::secs(now), "dtls.refused_sessions_full", info, %peer, "DTLS session refused: no room in the session table");
            if p.conn.close().is_ok() {
                self.flush(now, peer, &mut p, out);
            }
            return Vec::new();
        }
        self.count("dtls.handshake_completed");
        if p.conn.resumed() {
            self.count("dtls.resumed");
        } else if let Some(session) = p.conn.session() {
            self.remember(session, host, now);
        }
        crate::limited!(self.log, Self::secs(now), "dtls.session_established", debug, %peer, auth = ?p.auth.as_ref().map(|a| a.identity().to_string()), "DTLS session established");
        // Stored (with its write sequence reserved ahead) before anything more is sealed.
        if !self.save_session(now, peer, &mut p) {
            self.release_session(p);
            return Vec::new();
        }
        let delivered = self.drain(peer, &mut p);
        if let Some(cid) = p.cid {
            self.by_cid.insert(cid, peer);
        }
        self.sessions.insert(peer, p);
        delivered
    }
}
