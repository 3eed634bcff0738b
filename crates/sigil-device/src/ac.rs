//! Which access-control server (AC) key the device trusts for the tokens it checks as a
//! resource server (RFC 9200 §5.10; `sigil_ace::rs`): the key of its trusted server and no
//! other. The AC's tokens are signed with the server's persistent key, the one that signs
//! pairing messages and authenticates the server's DTLS handshakes.
//!
//! The key comes from, in this order:
//! 1. the pairing (RFC 8387 §4.1): the key that signed the pairing message, which hashes to the
//!    server identity the device pinned; a configured server identity must be that one;
//! 2. otherwise, a key learned in a raw-public-key DTLS handshake with the server, accepted only
//!    if it hashes (`I = h(P)`, empty O) to the server identity the device was provisioned with.
//!
//! Anything else is refused: a device with neither a pairing nor a provisioned identity trusts
//! no AC and accepts no token.

use core::fmt;
use sigil_ace::Pairing;
use sigil_crypto::{CryptoProvider, PublicKey};
use sigil_identity::Identity;

/// Where the trusted AC key came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcSource {
    Pairing,
    /// Learned in a DTLS handshake and checked against the provisioned identity.
    Handshake,
}

/// Why no AC key is trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcRefusal {
    /// Neither a pairing nor a provisioned server identity: nothing to trust.
    NoTrustedServer,
    /// A server identity was provisioned but no key for it was learned yet.
    NotLearned { server: Identity },
    /// The learned key does not hash to the provisioned server identity.
    KeyMismatch { server: Identity },
    /// The provisioned identity is not the server of the pairing.
    PairingConflict {
        paired: Identity,
        configured: Identity,
    },
}

impl fmt::Display for AcRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoTrustedServer => {
                f.write_str("no trusted server: pair the device or give its server identity")
            }
            Self::NotLearned { server } => write!(
                f,
                "server {server}'s key is not known yet (no DTLS handshake with it so far)"
            ),
            Self::KeyMismatch { server } => {
                write!(f, "the learned key is not server {server}'s")
            }
            Self::PairingConflict { paired, configured } => write!(
                f,
                "configured server {configured} is not the paired server {paired}"
            ),
        }
    }
}

impl core::error::Error for AcRefusal {}

/// The AC key the device trusts, given its pairing, the server identity it was provisioned with
/// and a key learned in a handshake (see the module documentation).
pub fn trusted_ac_key<C: CryptoProvider + ?Sized>(
    crypto: &C,
    pairing: Option<&Pairing>,
    configured: Option<Identity>,
    learned: Option<&PublicKey>,
) -> Result<(PublicKey, AcSource), AcRefusal> {
    if let Some(p) = pairing {
        return match configured {
            Some(c) if c != p.server => Err(AcRefusal::PairingConflict {
                paired: p.server,
                configured: c,
            }),
            _ => Ok((p.server_key, AcSource::Pairing)),
        };
    }
    let server = configured.ok_or(AcRefusal::NoTrustedServer)?;
    let key = learned.ok_or(AcRefusal::NotLearned { server })?;
    match Identity::of_key(crypto, key, b"") {
        Ok(id) if id == server => Ok((*key, AcSource::Handshake)),
        _ => Err(AcRefusal::KeyMismatch { server }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigil_crypto::{RustCrypto, SecretKey, SignatureAlgorithm};

    fn key(seed: u8) -> PublicKey {
        let sk = SecretKey::from_bytes(SignatureAlgorithm::Ed25519, &[seed; 32]).unwrap();
        RustCrypto.public_key(&sk).unwrap()
    }

    fn id(k: &PublicKey) -> Identity {
        Identity::of_key(&RustCrypto, k, b"").unwrap()
    }

    fn pairing(server: &PublicKey) -> Pairing {
        Pairing::new(1, id(server), *server, id(server), id(server), None).unwrap()
    }

    #[test]
    fn pairing_key_is_trusted_and_pins_the_configured_identity() {
        let (s, other) = (key(1), key(2));
        let p = pairing(&s);
        assert_eq!(
            trusted_ac_key(&RustCrypto, Some(&p), None, Some(&other)),
            Ok((s, AcSource::Pairing))
        );
        assert_eq!(
            trusted_ac_key(&RustCrypto, Some(&p), Some(id(&s)), None),
            Ok((s, AcSource::Pairing))
        );
        assert_eq!(
            trusted_ac_key(&RustCrypto, Some(&p), Some(id(&other)), None),
            Err(AcRefusal::PairingConflict {
                paired: id(&s),
                configured: id(&other)
            })
        );
    }

    #[test]
    fn learned_key_must_hash_to_the_provisioned_identity() {
        let (s, other) = (key(1), key(2));
        assert_eq!(
            trusted_ac_key(&RustCrypto, None, Some(id(&s)), Some(&s)),
            Ok((s, AcSource::Handshake))
        );
        assert_eq!(
            trusted_ac_key(&RustCrypto, None, Some(id(&s)), Some(&other)),
            Err(AcRefusal::KeyMismatch { server: id(&s) })
        );
        assert_eq!(
            trusted_ac_key(&RustCrypto, None, Some(id(&s)), None),
            Err(AcRefusal::NotLearned { server: id(&s) })
        );
        assert_eq!(
            trusted_ac_key(&RustCrypto, None, None, Some(&s)),
            Err(AcRefusal::NoTrustedServer)
        );
    }
}
