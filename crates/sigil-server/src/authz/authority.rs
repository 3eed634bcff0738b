//! The AC: the keys it protects tokens with, and the tokens it makes.

use super::{CTI_LEN, KID_LEN, KID_PREFIX, POP_KEY_LEN};
use sigil_ace::{
    encode_encrypted, encode_signed, AcSharedKey, AcSigningKey, AcTrust, Claims, Confirmation,
    Permissions, Scope, ScopeEntry, TokenError, MAX_TOKEN_LEN,
};
use sigil_crypto::{CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey};
use sigil_identity::Identity;
use sigil_time::UnixTime;

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
    pub(super) audience: String,
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
    pub(super) fn trust(&self) -> AcTrust<'_> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

#[cfg(test)]
mod sizes {
    use super::super::tests_support::*;
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
