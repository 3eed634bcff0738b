//! Makes and opens pairing messages from the command line, hex on stdin and stdout, for the
//! interop test (tests/interop/test_pairing.py) against pycose.
//!
//! ```text
//! pairing_message seal <device-public-hex> <ed25519|p256> <server-secret-hex> <serial>
//! pairing_message open <device-secret-hex>                          (message hex on stdin)
//! ```
//!
//! A device key is P-256 (an uncompressed point, a scalar) unless written `ed25519:<hex>`.
//!
//! Messages made here name group 33..33, subscriber 44..44 and server URI `coap://[::1]`. `open`
//! prints `ok`, then `serial`, `server`, `group`, `subscriber` and `uri` lines; a refusal
//! prints `refused <reason>` and exits with status 1.

use std::io::Read;
use std::process::ExitCode;

use sigil_ace::{open_pairing, seal_pairing, PairingContent, MAX_PAIRING_LEN};
use sigil_crypto::{
    CryptoError, CryptoProvider, PublicKey, Rng, RustCrypto, SecretKey, SignatureAlgorithm,
};
use sigil_identity::Identity;

struct OsRng;

impl Rng for OsRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(buf))
            .map_err(|_| CryptoError::Rng)
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("pairing_message: {msg}");
    std::process::exit(2)
}

fn hex(s: &str) -> Vec<u8> {
    hex::decode(s.trim()).unwrap_or_else(|e| fail(&format!("bad hex: {e}")))
}

/// The device key's algorithm and bytes: `ed25519:<hex>`, or P-256 hex.
fn device_arg(arg: &str) -> (SignatureAlgorithm, Vec<u8>) {
    match arg.strip_prefix("ed25519:") {
        Some(h) => (SignatureAlgorithm::Ed25519, hex(h)),
        None => (SignatureAlgorithm::EcdsaP256, hex(arg)),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["seal", device, alg, secret, serial] => {
            let (device_alg, device) = device_arg(device);
            let device = PublicKey::from_bytes(device_alg, &device)
                .unwrap_or_else(|e| fail(&format!("device key: {e}")));
            let alg = SignatureAlgorithm::from_name(alg)
                .unwrap_or_else(|| fail("algorithm: ed25519 or p256"));
            let server = SecretKey::from_bytes(alg, &hex(secret))
                .unwrap_or_else(|e| fail(&format!("server key: {e}")));
            let server_public = RustCrypto
                .public_key(&server)
                .unwrap_or_else(|e| fail(&format!("server key: {e}")));
            let content = PairingContent {
                device: Identity::of_key(&RustCrypto, &device, b"")
                    .unwrap_or_else(|e| fail(&format!("{e}"))),
                serial: serial.parse().unwrap_or_else(|_| fail("serial: a number")),
                server: Identity::of_key(&RustCrypto, &server_public, b"")
                    .unwrap_or_else(|e| fail(&format!("{e}"))),
                server_other: b"",
                server_uri: Some("coap://[::1]"),
                group: Identity::from_bytes([0x33; 16]),
                subscriber: Identity::from_bytes([0x44; 16]),
            };
            let mut out = [0u8; MAX_PAIRING_LEN];
            let n = seal_pairing(&content, &device, &server, &RustCrypto, &mut OsRng, &mut out)
                .unwrap_or_else(|e| fail(&format!("{e}")));
            println!("{}", hex::encode(&out[..n]));
            ExitCode::SUCCESS
        }
        ["open", secret] => {
            let (device_alg, secret) = device_arg(secret);
            let key = SecretKey::from_bytes(device_alg, &secret)
                .unwrap_or_else(|e| fail(&format!("device key: {e}")));
            let public = RustCrypto
                .public_key(&key)
                .unwrap_or_else(|e| fail(&format!("device key: {e}")));
            let device = Identity::of_key(&RustCrypto, &public, b"")
                .unwrap_or_else(|e| fail(&format!("{e}")));
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .unwrap_or_else(|e| fail(&format!("stdin: {e}")));
            match open_pairing(&hex(&input), &key, &device, None, &RustCrypto) {
                Ok(p) => {
                    println!("ok");
                    println!("serial {}", p.serial);
                    println!("server {}", p.server);
                    println!("group {}", p.group);
                    println!("subscriber {}", p.subscriber);
                    println!("uri {}", p.server_uri().unwrap_or("-"));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("refused {e}");
                    ExitCode::from(1)
                }
            }
        }
        _ => fail("usage: pairing_message seal DEVICE-POINT ALG SERVER-SECRET SERIAL | open DEVICE-SECRET"),
    }
}
