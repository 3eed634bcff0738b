//! Makes and checks MACed readings from the command line, hex in arguments and on stdout, for
//! the interop test (tests/interop/test_maced_readings.py) against pycose and cryptography.
//!
//! ```text
//! maced_reading key <psk-hex> <identity-hex>                            the reading key
//! maced_reading mac <psk-hex> <identity-hex> <seq> <senml-cbor-hex>     a COSE_Mac0 reading
//! maced_reading check <key-hex> <seq> <reading-hex>                     its SenML, or a refusal
//! ```
//!
//! `check` prints `ok`, then the identity (`kid`) and the SenML-CBOR payload in hex; a refusal
//! prints `refused <reason>` and exits with status 1.

use std::process::ExitCode;

use sigil_crypto::RustCrypto;
use sigil_identity::Identity;
use sigil_objects::mac::{mac_reading, MAC_KEY_LEN};
use sigil_objects::{Freshness, MacedReading, ReadingKey};

fn hex(s: &str) -> Result<Vec<u8>, String> {
    hex::decode(s).map_err(|e| format!("not hex: {e}"))
}

fn identity(s: &str) -> Result<Identity, String> {
    Identity::from_slice(&hex(s)?).ok_or_else(|| "identity is not 16 bytes".into())
}

fn number(s: &str) -> Result<u64, String> {
    s.parse().map_err(|_| format!("not a number: {s}"))
}

fn run(args: &[String]) -> Result<String, String> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["key", psk, id] => {
            let key = ReadingKey::derive(&RustCrypto, &hex(psk)?, &identity(id)?);
            Ok(hex::encode(key.as_bytes()))
        }
        ["mac", psk, id, seq, senml] => {
            let id = identity(id)?;
            let key = ReadingKey::derive(&RustCrypto, &hex(psk)?, &id);
            let fresh = Freshness {
                seq: number(seq)?,
                lsb_bits: None,
                timestamp: None,
            };
            let senml = hex(senml)?;
            let mut out = vec![0u8; senml.len() + 64];
            let n = mac_reading(&RustCrypto, &key, &id, &fresh, &senml, &mut out)
                .map_err(|e| e.to_string())?;
            Ok(hex::encode(&out[..n]))
        }
        ["check", key, seq, reading] => {
            let key: [u8; MAC_KEY_LEN] = hex(key)?
                .try_into()
                .map_err(|_| "key is not 32 bytes".to_string())?;
            let key = ReadingKey::from_bytes(key);
            let raw = hex(reading)?;
            let r = MacedReading::parse(&raw).map_err(|e| format!("refused {}", e.reason()))?;
            r.verify(&RustCrypto, &key, number(seq)?)
                .map_err(|e| format!("refused {}", e.reason()))?;
            Ok(format!(
                "ok\n{}\n{}",
                hex::encode(r.kid.as_bytes()),
                hex::encode(r.senml())
            ))
        }
        _ => Err("usage: maced_reading key|mac|check ... (see the source)".into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{e}");
            ExitCode::FAILURE
        }
    }
}
