//! Whom the layer trusts: provisioned PSKs (and the PoP keys of tokens), raw public keys
//! whose identity `h(P)` is authorized, certificate chains to the configured anchors; the
//! identity a session speaks for; and the sessions of revoked identities, ended.

use super::SecureLayer;
use crate::auth::{Credentials, PeerAuth};
use sigil_crypto::{PublicKey, RustCrypto};
use sigil_dtls::keys::MAX_PSK_LEN;
use sigil_dtls::{Peer as DtlsPeer, Traffic, Trust};
use sigil_identity::Identity;
use sigil_time::{Instant, UnixTime};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// What DTLS trusts, shared by every connection and refreshed from the authorized list: the
/// credentials, the trust anchors for client certificates, and how many times the credentials
/// were replaced ([`SharedTrust::replace`]), so the layer notices new ones. It holds no clock:
/// a certificate chain is checked at the time the handshake passes (the caller's, given with
/// each ClientHello's offer).
#[derive(Clone, Default)]
pub struct SharedTrust(Arc<RwLock<Credentials>>, Arc<Vec<Vec<u8>>>, Arc<AtomicU64>);

impl SharedTrust {
    /// With trust anchors for client certificates.
    pub fn with_anchors(anchors: Vec<Vec<u8>>) -> Self {
        Self(Arc::default(), Arc::new(anchors), Arc::default())
    }

    /// How many times the credentials were replaced.
    pub(super) fn generation(&self) -> u64 {
        self.2.load(Ordering::Acquire)
    }

    /// Whether `auth` speaks for a revoked identity: a PSK or raw public key of one, or a
    /// token issued to one.
    pub(super) fn is_revoked(&self, auth: &PeerAuth) -> bool {
        self.0
            .read()
            .is_ok_and(|g| g.revoked.contains(auth.identity()))
    }

    /// New credentials; the layer ends the sessions of identities they revoke at its next
    /// call ([`SecureLayer::handle_datagram`], [`SecureLayer::handle_timeout`]).
    pub fn replace(&self, c: Credentials) {
        if let Ok(mut g) = self.0.write() {
            *g = c;
        }
        self.2.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether `auth` is the session of a PSK-only node, which is never kept across a restart.
    pub(super) fn is_psk_node(&self, auth: Option<&PeerAuth>) -> bool {
        match auth {
            Some(PeerAuth::Psk(id)) => self.0.read().is_ok_and(|g| g.psk_nodes.contains(id)),
            _ => false,
        }
    }

    /// The client a token's PoP key speaks for.
    pub(super) fn token_subject(&self, kid: &[u8]) -> Option<Identity> {
        self.0.read().ok()?.token_psks.get(kid).map(|(_, s)| *s)
    }

    pub(super) fn identity_of_key(key: &PublicKey) -> Option<Identity> {
        Identity::of_key(&RustCrypto, key, b"").ok()
    }
}

impl Trust for SharedTrust {
    /// The PSK identity is the text form of a provisioned identity (any label form).
    /// An identity that starts with [`crate::authz::KID_PREFIX`] is the kid of a token's PoP
    /// key (RFC 9202 §3.3).
    fn psk(&self, identity: &[u8], key: &mut [u8; MAX_PSK_LEN]) -> Option<usize> {
        // The peer chose these bytes: cleaned for the log.
        let shown = crate::context::peer_text(&String::from_utf8_lossy(identity));
        refused_identity(format!("{shown} (PSK identity)"));
        let g = self.0.read().ok()?;
        let psk = if identity.first() == Some(&crate::authz::KID_PREFIX) {
            &g.token_psks.get(identity)?.0
        } else {
            let id = Identity::parse(std::str::from_utf8(identity).ok()?).ok()?;
            g.psks.get(&id)?
        };
        key.get_mut(..psk.len())?.copy_from_slice(psk);
        Some(psk.len())
    }

    /// A raw public key is trusted when its identity `h(P)` is on the authorized list.
    fn trusted_key(&self, key: &PublicKey) -> bool {
        let Some(id) = Self::identity_of_key(key) else {
            return false;
        };
        refused_identity(format!("{id} (key)"));
        self.0
            .read()
            .is_ok_and(|g| g.authorized.contains(&id) || g.token_keys.contains(&id))
    }

    /// A certificate chain must reach a configured anchor at `now` (the caller's Unix time
    /// for the ClientHello), and the certified key must be one the authorized list trusts:
    /// the CA vouches for the key, provisioning still decides who may connect.
    fn certificate_chain(
        &self,
        chain: &[&[u8]],
        now: UnixTime,
    ) -> Result<PublicKey, sigil_dtls::Error> {
        let anchors: Vec<&[u8]> = self.1.iter().map(Vec::as_slice).collect();
        let key = sigil_dtls::x509::verify_chain(&RustCrypto, chain, &anchors, now)?;
        if !self.trusted_key(&key) {
            return Err(sigil_dtls::Error::UntrustedKey);
        }
        Ok(key)
    }
}

std::thread_local! {
    /// The identity the datagram being processed on this thread claimed in a handshake (its
    /// PSK identity or its key's identity). Cleared as each datagram starts
    /// ([`forget_claimed`]) and taken into the handshake's own state ([`Peer::claimed`])
    /// after it, so a log line names only what that handshake's peer claimed.
    static CLAIMED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

pub(super) fn refused_identity(claimed: String) {
    CLAIMED.with(|c| *c.borrow_mut() = Some(claimed));
}

/// What this datagram's handshake claimed, if it claimed anything (taken).
pub(super) fn take_claimed() -> Option<String> {
    CLAIMED.with(|c| c.borrow_mut().take())
}

/// Drops whatever an earlier call left (a check of a stored session's key, a handshake that
/// claimed and went on): nothing carries over to another peer's datagram.
pub(super) fn forget_claimed() {
    take_claimed();
}

/// The identity an established session speaks for, from the peer its handshake proved.
pub(super) fn auth_of(traffic: &Traffic<RustCrypto>, trust: &SharedTrust) -> Option<PeerAuth> {
    match traffic.peer() {
        DtlsPeer::Key { key, .. } => {
            SharedTrust::identity_of_key(key).map(|identity| PeerAuth::RawPublicKey {
                identity,
                key: *key,
            })
        }
        DtlsPeer::Psk { .. } => {
            let id = traffic.psk_identity();
            if id.first() == Some(&crate::authz::KID_PREFIX) {
                trust.token_subject(id).map(|subject| PeerAuth::Token {
                    kid: id.to_vec(),
                    subject,
                })
            } else {
                std::str::from_utf8(id)
                    .ok()
                    .and_then(|t| Identity::parse(t).ok())
                    .map(PeerAuth::Psk)
            }
        }
        DtlsPeer::Anonymous(_) => None,
    }
}

impl SecureLayer {
    /// Once the credentials changed: ends every session that speaks for an identity they
    /// revoke (its PSK, its raw public key, or a token issued to it), with a close_notify,
    /// and deletes its stored row, so revocation reaches sessions already open
    /// (docs/security.md, "Revocation"). New handshakes and resumptions of such a peer fail
    /// on the trust itself.
    pub(super) fn end_revoked_sessions(
        &mut self,
        now: Instant,
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        let generation = self.trust.generation();
        if generation == self.trust_seen {
            return;
        }
        self.trust_seen = generation;
        let revoked: Vec<SocketAddr> = self
            .sessions
            .iter()
            .filter(|(_, p)| p.auth.as_ref().is_some_and(|a| self.trust.is_revoked(a)))
            .map(|(a, _)| *a)
            .collect();
        for peer in revoked {
            let Some(mut p) = self.sessions.remove(&peer) else {
                continue;
            };
            if p.conn.close().is_ok() {
                self.flush(now, peer, &mut p, out);
            }
            let identity = p.auth.as_ref().map(|a| a.identity().to_string());
            self.release_session(p);
            self.count("dtls.session_revoked");
            crate::limited!(self.log, Self::secs(now), "dtls.session_revoked", warn, %peer, identity = identity.as_deref().unwrap_or(""), "DTLS session ended: its identity was revoked");
        }
    }
}
