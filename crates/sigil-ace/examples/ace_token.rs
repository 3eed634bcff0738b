//! Makes and checks access tokens from the command line, hex on stdin and stdout, for the
//! interop tests (tests/interop/test_ace_tokens.py) against implementations written elsewhere.
//!
//! ```text
//! ace_token sign <ed25519|p256> <ac-secret-hex> <now> <aud> <topic> <client-p256-point-hex>
//! ace_token encrypt <shared-key-hex> <now> <aud> <topic> <psk-hex>
//! ace_token mac <mac-key-hex> <now> <aud> <topic> <client-p256-point-hex>
//! ace_token check-signed <ed25519|p256> <ac-public-hex> <now> <aud>      (token hex on stdin)
//! ace_token check-encrypted <shared-key-hex> <now> <aud>                 (token hex on stdin)
//! ace_token check-maced <mac-key-hex> <now> <aud>                        (token hex on stdin)
//! ```
//!
//! A check prints `ok`, then `form`, `aud`, `exp`, one `scope <object> <bits>` line per pair
//! and a `cnf` line; a refusal prints `refused <reason>` and exits with status 1. Tokens made
//! here carry kid `ac1`, exp = now + 3600, cti 01020304, and read permission on `topic`.

use std::io::Read;
use std::process::ExitCode;

use sigil_ace::{
    encode_encrypted, encode_maced, encode_signed, validate, AcMacKey, AcSharedKey, AcSigningKey,
    AcTrust, Claims, Confirmation, Permissions, Scope, ScopeEntry, TokenError, MAC_KEY_LEN,
    MAX_TOKEN_LEN,
};
use sigil_crypto::{CryptoError, PublicKey, Rng, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_time::UnixTime;

const KID: &[u8] = b"ac1";

struct OsRng;

impl Rng for OsRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(buf))
            .map_err(|_| CryptoError::Rng)
    }
}

fn hex(s: &str) -> Vec<u8> {
    hex::decode(s.trim()).unwrap_or_else(|e| fail(&format!("bad hex: {e}")))
}

fn fail(msg: &str) -> ! {
    eprintln!("ace_token: {msg}");
    std::process::exit(2)
}

fn alg(name: &str) -> SignatureAlgorithm {
    SignatureAlgorithm::from_name(name).unwrap_or_else(|| fail("algorithm: ed25519 or p256"))
}

fn now(s: &str) -> UnixTime {
    UnixTime::from_secs(s.parse().unwrap_or_else(|_| fail("now: seconds")))
}

fn mac_key(s: &str) -> [u8; MAC_KEY_LEN] {
    hex(s)
        .try_into()
        .unwrap_or_else(|_| fail("32-byte MAC key"))
}

fn client_key(s: &str) -> PublicKey {
    PublicKey::from_bytes(SignatureAlgorithm::EcdsaP256, &hex(s))
        .unwrap_or_else(|e| fail(&e.to_string()))
}

fn stdin_hex() -> Vec<u8> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .unwrap_or_else(|e| fail(&format!("stdin: {e}")));
    hex(&s)
}

fn report(r: Result<sigil_ace::AccessToken<'_>, TokenError>) -> ExitCode {
    match r {
        Ok(t) => {
            println!("ok");
            println!("form {:?}", t.form);
            println!("aud {}", t.aud);
            println!("exp {}", t.exp.as_secs());
            for e in t.scope.iter() {
                println!("scope {} {}", e.object, e.permissions.0);
            }
            match t.pop_key() {
                Some(Confirmation::Symmetric { kid, key }) => {
                    println!("cnf symmetric {} {}", hex::encode(kid), hex::encode(key))
                }
                Some(Confirmation::PublicKey { key, .. }) => {
                    println!("cnf public {}", hex::encode(key.as_bytes()))
                }
                Some(Confirmation::KeyId(kid)) => println!("cnf kid {}", hex::encode(kid)),
                None => println!("cnf none"),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("refused {e:?}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out = [0u8; MAX_TOKEN_LEN];
    let mut scratch = [0u8; MAX_TOKEN_LEN];
    match a.as_slice() {
        ["sign", alg_name, secret, t, aud, topic, client] => {
            let alg = alg(alg_name);
            let key =
                SecretKey::from_bytes(alg, &hex(secret)).unwrap_or_else(|e| fail(&e.to_string()));
            let client = client_key(client);
            let entries = [ScopeEntry {
                object: topic,
                permissions: Permissions::READ,
            }];
            let claims = claims(
                now(t),
                aud,
                &entries,
                Confirmation::PublicKey {
                    kid: None,
                    key: client,
                },
            );
            let n = encode_signed(&claims, Some(KID), &key, &RustCrypto, &mut out)
                .unwrap_or_else(|e| fail(&e.to_string()));
            println!("{}", hex::encode(&out[..n]));
            ExitCode::SUCCESS
        }
        ["encrypt", shared, t, aud, topic, psk] => {
            let shared: [u8; 16] = hex(shared)
                .try_into()
                .unwrap_or_else(|_| fail("16-byte key"));
            let psk = hex(psk);
            let entries = [ScopeEntry {
                object: topic,
                permissions: Permissions::READ,
            }];
            let claims = claims(
                now(t),
                aud,
                &entries,
                Confirmation::Symmetric {
                    kid: b"c1",
                    key: &psk,
                },
            );
            let n = encode_encrypted(
                &claims,
                Some(KID),
                &shared,
                &RustCrypto,
                &mut OsRng,
                &mut out,
            )
            .unwrap_or_else(|e| fail(&e.to_string()));
            println!("{}", hex::encode(&out[..n]));
            ExitCode::SUCCESS
        }
        ["mac", key, t, aud, topic, client] => {
            let key = mac_key(key);
            let entries = [ScopeEntry {
                object: topic,
                permissions: Permissions::READ,
            }];
            let claims = claims(
                now(t),
                aud,
                &entries,
                Confirmation::PublicKey {
                    kid: None,
                    key: client_key(client),
                },
            );
            let n = encode_maced(&claims, Some(KID), &key, &RustCrypto, &mut out)
                .unwrap_or_else(|e| fail(&e.to_string()));
            println!("{}", hex::encode(&out[..n]));
            ExitCode::SUCCESS
        }
        ["check-signed", alg_name, public, t, aud] => {
            let key = PublicKey::from_bytes(alg(alg_name), &hex(public))
                .unwrap_or_else(|e| fail(&e.to_string()));
            let trust = AcTrust {
                signing: Some(AcSigningKey {
                    kid: Some(KID),
                    key,
                }),
                ..AcTrust::default()
            };
            report(validate(
                &stdin_hex(),
                now(t),
                aud,
                &trust,
                &RustCrypto,
                &mut scratch,
            ))
        }
        ["check-encrypted", shared, t, aud] => {
            let shared: [u8; 16] = hex(shared)
                .try_into()
                .unwrap_or_else(|_| fail("16-byte key"));
            let trust = AcTrust {
                shared: Some(AcSharedKey {
                    kid: Some(KID),
                    key: &shared,
                }),
                ..AcTrust::default()
            };
            report(validate(
                &stdin_hex(),
                now(t),
                aud,
                &trust,
                &RustCrypto,
                &mut scratch,
            ))
        }
        ["check-maced", key, t, aud] => {
            let key = mac_key(key);
            let trust = AcTrust {
                mac: Some(AcMacKey {
                    kid: Some(KID),
                    key: &key,
                }),
                ..AcTrust::default()
            };
            report(validate(
                &stdin_hex(),
                now(t),
                aud,
                &trust,
                &RustCrypto,
                &mut scratch,
            ))
        }
        _ => fail("usage: see the doc comment of examples/ace_token.rs"),
    }
}

fn claims<'a>(
    now: UnixTime,
    aud: &'a str,
    entries: &'a [ScopeEntry<'a>],
    cnf: Confirmation<'a>,
) -> Claims<'a> {
    Claims {
        iss: None,
        sub: None,
        aud: Some(aud),
        exp: Some(UnixTime::from_secs(now.as_secs() + 3600)),
        nbf: None,
        iat: Some(now),
        cti: Some(&[1, 2, 3, 4]),
        scope: Some(Scope::new(entries)),
        cnf: Some(cnf),
    }
}
