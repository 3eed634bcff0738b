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

mod authority;
mod handlers;
mod rate;
mod tokens;

pub use authority::{token_kid, Authority, Binding, Issued};
pub use rate::{Rate, RateLimited, SESSION_RATE, SUBJECT_RATE};
pub use tokens::{Held, PopKey, Refusal, TokenCaps, TokenCheck, Tokens, TOKENS_PER_SUBJECT};

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

#[cfg(test)]
mod tests_support {
    use super::Authority;
    use sigil_crypto::SignatureAlgorithm;
    use sigil_crypto::{CryptoProvider, Rng, RustCrypto};
    use sigil_identity::Identity;
    use sigil_time::UnixTime;

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
