//! Small pieces shared by the commands.

use anyhow::{bail, Context, Result};
use sigil_crypto::{CryptoError, Rng};
use std::net::{SocketAddr, ToSocketAddrs};

/// The operating system's CSPRNG.
pub struct OsRng;

impl Rng for OsRng {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        getrandom::fill(buf).map_err(|_| CryptoError::Rng)
    }
}

pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    u32::from_be_bytes(b)
}

/// Parses `coap://host[:port]` (or a bare `host:port`) into a socket address.
pub fn parse_coap_uri(uri: &str) -> Result<SocketAddr> {
    let rest = uri
        .strip_prefix("coap://")
        .unwrap_or(uri)
        .trim_end_matches('/');
    if rest.contains("://") {
        bail!("only coap:// URIs are supported here: {uri}");
    }
    let with_port = if rest.starts_with('[') {
        if rest.contains("]:") {
            rest.to_string()
        } else {
            format!("{rest}:5683")
        }
    } else if rest.matches(':').count() == 1 {
        rest.to_string()
    } else {
        format!("{rest}:5683")
    };
    with_port
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {uri}"))?
        .next()
        .with_context(|| format!("no address for {uri}"))
}

pub fn init_logging(level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SIGIL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
}

pub fn now_ms(start: std::time::Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coap_uris() {
        assert_eq!(parse_coap_uri("coap://127.0.0.1").unwrap().port(), 5683);
        assert_eq!(
            parse_coap_uri("coap://127.0.0.1:9999/").unwrap().port(),
            9999
        );
        assert_eq!(parse_coap_uri("127.0.0.1:7").unwrap().port(), 7);
        assert!(parse_coap_uri("coap://[::1]").unwrap().is_ipv6());
        assert!(parse_coap_uri("http://x").is_err());
    }
}
