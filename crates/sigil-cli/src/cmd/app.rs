//! `sigil app`: the verifying application (sigil_client::app) with a table or JSON.

use crate::args::DtlsArgs;
use anyhow::{Context, Result};
use clap::Args;
use sigil_ace::Permissions;
use sigil_client::app::{self, AppReport};
use sigil_client::{parse_uri, Transport};
use std::path::PathBuf;

#[derive(Args)]
pub struct AppArgs {
    #[arg(long, default_value = "coap://127.0.0.1:5683")]
    pub server: String,
    /// The application's own list of trusted identities (same format as `provision import`);
    /// `<identity> psk-node` names a node with only a pre-shared key, whose MACed or
    /// session readings are taken only when listed so.
    #[arg(long)]
    pub trust: Option<PathBuf>,
    /// Fetch only the newest N readings per sensor (default: all). N is at most the broker's
    /// limit per request (100 for `sigil server`, docs/wire-formats.md).
    #[arg(long)]
    pub history: Option<u32>,
    #[arg(long)]
    pub json: bool,
    /// Read through an access token (coaps:// only): over a session with these credentials,
    /// look the sensors up, ask the server's `/token` for reading them and the RD, post the
    /// token to `/authz-info`, and read over a session keyed by the token's PoP key (RFC 9202).
    #[arg(long)]
    pub token: bool,
    #[command(flatten)]
    pub dtls: DtlsArgs,
}

pub async fn run(a: AppArgs) -> Result<i32> {
    // Every argument is checked before the first datagram.
    let uri = parse_uri(&a.server)?;
    let (trust, psk_nodes) = match &a.trust {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            let trust =
                app::load_trust(&text).with_context(|| format!("--trust {}", p.display()))?;
            (Some(trust), app::load_psk_nodes(&text)?)
        }
        None => (None, Default::default()),
    };
    a.dtls.check(uri.secure)?;
    let security = a.dtls.security(uri.secure, None)?;
    let config = a.dtls.timing.config()?;
    if a.token && !uri.secure {
        anyhow::bail!("--token needs a coaps:// server URI");
    }
    let carrier = a.dtls.dtls_carrier.into();
    let t = if a.token {
        let sensors = app::look_up(uri.addr, security.clone(), config, carrier).await?;
        let mut scope = vec![(sigil_ace::RD_OBJECT.to_string(), Permissions::READ)];
        scope.extend(sensors.into_iter().map(|ep| (ep, Permissions::READ)));
        let (ticket, t) =
            sigil_client::ace::open_with_token(uri.addr, security, config, carrier, &scope).await?;
        eprintln!(
            "access token: {} B (POST /token {} B, answer {} B), valid {} s",
            ticket.token.len(),
            ticket.request_bytes,
            ticket.response_bytes,
            ticket.expires_in.unwrap_or(0)
        );
        t
    } else {
        Transport::open_over(uri.addr, security, config, carrier).await?
    };
    let report = app::run(t, trust.as_ref(), &psk_nodes, a.history).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(if report.failed() > 0 { 2 } else { 0 })
}

/// The human-readable table.
pub fn print_table(report: &AppReport) {
    use sigil_client::app::Protection;
    println!(
        "{:<10} {:<10} {:<8} {:<8} {:>8} {:>6} {:>8} {:>10} {:>8}",
        "sensor", "topic", "alg", "proof", "verified", "failed", "last seq", "temp °C", "hum %RH"
    );
    for s in &report.sensors {
        let last = s
            .readings
            .iter()
            .rev()
            .find(|r| r.verified || (r.protection == Protection::Session && r.error.is_none()));
        let val = |name: &str| {
            last.and_then(|r| r.values.iter().find(|v| v.0 == name))
                .map(|v| format!("{:.2}", v.1))
                .unwrap_or_else(|| "-".into())
        };
        let proof = match s.protection {
            Protection::Signed => "signed",
            Protection::Mac => "mac",
            Protection::Session => "session",
        };
        println!(
            "{:<10} {:<10} {:<8} {:<8} {:>8} {:>6} {:>8} {:>10} {:>8}{}",
            s.label,
            s.topic,
            s.algorithm.as_deref().unwrap_or("-"),
            proof,
            s.verified,
            s.failed,
            last.map(|r| r.seq.to_string())
                .unwrap_or_else(|| "-".into()),
            val("t"),
            val("h"),
            match (s.protection, s.key_matches_identity, s.trusted) {
                (_, _, Some(false)) => "  NOT ON TRUST LIST",
                (Protection::Signed, false, _) => "  KEY DOES NOT MATCH IDENTITY",
                (Protection::Session, _, _) => "  (transport-authenticated only)",
                _ => "",
            }
        );
    }
    let unverifiable = report.unverifiable();
    println!(
        "{} readings verified end to end, {} failed{}",
        report.verified(),
        report.failed(),
        if unverifiable > 0 {
            format!(
                ", {unverifiable} taken on the broker's word (sent over the node's DTLS session)"
            )
        } else {
            String::new()
        }
    );
}
