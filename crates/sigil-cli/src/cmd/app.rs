//! `sigil app`: the verifying application (sigil_client::app) with a table or JSON.

use crate::args::DtlsArgs;
use anyhow::{Context, Result};
use clap::Args;
use sigil_ace::Permissions;
use sigil_client::app::{self, AppReport};
use sigil_client::{parse_uri, Transport};
use sigil_identity::Identity;
use std::path::PathBuf;

#[derive(Args)]
#[command(
    after_help = "Exit status: 0 every selected sensor was read and every reading verified \
(session readings are reported, not verified); 1 nothing could be read (no answer from the server \
within --timeout, the lookup refused, or no sensor readable); 2 some reading failed verification; \
3 some sensors could not be read (not granted, not in the directory, the server busy or failing \
for that topic, or no answer for it within --timeout) and everything shown verified. Without \
--trust the identities are the directory's, unchecked: the table and the JSON \
(`\"identities\": \"directory, unchecked\"`) say so."
)]
pub struct AppArgs {
    /// The server: coap://host[:port] or coaps://host[:port] (with --dtls).
    #[arg(long, default_value = "coap://127.0.0.1:5683")]
    pub server: String,
    /// The application's own list of trusted identities (same format as `provision import`);
    /// `<identity> psk-node` names a node with only a pre-shared key, whose MACed or
    /// session readings are taken only when listed so. Without it, readings are verified
    /// against the identities the directory announces, unchecked.
    #[arg(long)]
    pub trust: Option<PathBuf>,
    /// Fetch only the newest N readings per sensor (default: all). N is at most the broker's
    /// limit per request (100 for `sigil server`, docs/wire-formats.md).
    #[arg(long)]
    pub history: Option<u32>,
    /// Only this sensor (its identity; repeatable). A selected sensor the directory does not
    /// announce is reported as not readable.
    #[arg(long = "sensor", value_name = "ID")]
    pub sensors: Vec<String>,
    /// Give up when the server has not answered for this long (the DTLS handshake, or any
    /// one request), e.g. 10s, 500ms.
    #[arg(long, default_value = "10s", value_parser = crate::args::parse_duration)]
    pub timeout: std::time::Duration,
    /// The report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Read through an access token (coaps:// only): over a session with these credentials,
    /// look the sensors up, ask the server's `/token` for reading them and the RD, post the
    /// token to `/authz-info`, and read over a session keyed by the token's PoP key (RFC 9202).
    /// The server grants the sensors this reader may read; the others are listed as not
    /// readable.
    #[arg(long)]
    pub token: bool,
    /// Follow the readings as they are published: observe every topic this reader may read
    /// (CoAP Observe, RFC 7641) and print each reading as it arrives, verified end to end
    /// (`--json`: one JSON object per line). Runs until Ctrl-C, --count or --for; registers
    /// again after the server restarts.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: stop after this many readings.
    #[arg(long, requires = "follow")]
    pub count: Option<usize>,
    /// With --follow: stop after this long, e.g. 10m.
    #[arg(long = "for", requires = "follow", value_parser = crate::args::parse_duration)]
    pub for_: Option<std::time::Duration>,
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
    let select = if a.sensors.is_empty() {
        None
    } else {
        Some(
            a.sensors
                .iter()
                .map(|s| Identity::parse(s).map_err(|e| anyhow::anyhow!("--sensor {s}: {e}")))
                .collect::<Result<Vec<_>>>()?,
        )
    };
    if a.timeout.is_zero() {
        anyhow::bail!("--timeout must be above zero");
    }
    a.dtls.check(uri.secure)?;
    let security = a.dtls.security(uri.secure, None)?;
    let config = a.dtls.timing.config()?;
    if a.token && !uri.secure {
        anyhow::bail!("--token needs a coaps:// server URI");
    }
    let reader = sigil_client::transport::own_identity(&security);
    let carrier = a.dtls.dtls_carrier.into();
    let connect = async {
        if a.token {
            let sensors = app::look_up(uri.addr, security.clone(), config, carrier).await?;
            let mut scope = vec![(sigil_ace::RD_OBJECT.to_string(), Permissions::READ)];
            scope.extend(sensors.into_iter().map(|ep| (ep, Permissions::READ)));
            let (ticket, t) =
                sigil_client::ace::open_with_token(uri.addr, security, config, carrier, &scope)
                    .await?;
            eprintln!(
                "access token: {} B (POST /token {} B, answer {} B), valid {} s",
                ticket.token.len(),
                ticket.request_bytes,
                ticket.response_bytes,
                ticket.expires_in.unwrap_or(0)
            );
            Ok(t)
        } else {
            Transport::open_within(uri.addr, security, config, carrier, a.timeout).await
        }
    };
    // The token's exchanges together get --timeout; a session of its own gives up inside
    // its handshake after --timeout, saying whether the server was silent or stalled (so the
    // outer limit, twice as long, is only a backstop there).
    let limit = if a.token {
        a.timeout
    } else {
        a.timeout.saturating_mul(2)
    };
    let t = tokio::time::timeout(limit, connect)
        .await
        .map_err(|_| sigil_client::transport::no_answer(uri.addr, uri.secure, a.timeout))??;
    let options = app::Options {
        history: a.history,
        select,
        reader,
        timeout: Some(a.timeout),
    };
    if a.follow {
        return follow(t, trust.as_ref(), &psk_nodes, options, &a).await;
    }
    let report = app::run_with(t, trust.as_ref(), &psk_nodes, &options).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(report.exit_code())
}

/// The human-readable table, then why each sensor could not be read and why readings failed.
pub fn print_table(report: &AppReport) {
    use sigil_client::app::Protection;
    let unchecked = report.identities == app::IDENTITIES_UNCHECKED;
    if unchecked {
        println!("identities: from the directory, unchecked (no --trust list): \"verified\" means signed by the key the directory announced");
    }
    println!(
        "{:<10} {:<10} {:<8} {:<8} {:>8} {:>6} {:>8} {:>10} {:>8}",
        "sensor", "topic", "alg", "proof", "verified", "failed", "last seq", "temp °C", "hum %RH"
    );
    for s in &report.sensors {
        if !s.readable {
            println!(
                "{:<10} {:<10} {:<8} {:<8} {:>8} {:>6} {:>8} {:>10} {:>8}  NOT READABLE",
                s.label,
                if s.topic.is_empty() { "-" } else { &s.topic },
                s.algorithm.as_deref().unwrap_or("-"),
                "-",
                "-",
                "-",
                "-",
                "-",
                "-"
            );
            continue;
        }
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
    for s in report.sensors.iter().filter(|s| !s.readable) {
        println!(
            "{} not readable: {}",
            s.label,
            s.refused.as_deref().unwrap_or("refused")
        );
    }
    for s in &report.sensors {
        for p in &s.problems {
            println!(
                "{} {} reading{} failed: {}",
                s.label,
                p.readings,
                if p.readings == 1 { "" } else { "s" },
                p.reason
            );
        }
    }
    let unverifiable = report.unverifiable();
    let unreadable = report.unreadable();
    println!(
        "{} readings verified end to end{}, {} failed{}{}",
        report.verified(),
        if unchecked {
            " (against identities from the directory, unchecked)"
        } else {
            ""
        },
        report.failed(),
        if unverifiable > 0 {
            format!(
                ", {unverifiable} taken on the broker's word (sent over the node's DTLS session)"
            )
        } else {
            String::new()
        },
        if unreadable > 0 {
            format!(
                "; {unreadable} of {} sensors not readable",
                report.sensors.len()
            )
        } else {
            String::new()
        }
    );
}

/// `--follow`: each event as it happens, until Ctrl-C, `--count` or `--for`. Exit code 0 when
/// every reading verified, 2 if one failed (as `sigil app`).
async fn follow(
    t: sigil_client::transport::Transport,
    trust: Option<&std::collections::HashSet<Identity>>,
    psk_nodes: &std::collections::HashSet<Identity>,
    base: app::Options,
    a: &AppArgs,
) -> Result<i32> {
    use sigil_client::follow::{FollowOptions, Followed};
    let options = FollowOptions {
        base,
        count: a.count,
        duration: a.for_,
        ..Default::default()
    };
    let mut failed = 0usize;
    let json = a.json;
    let run = sigil_client::follow::follow(t, trust, psk_nodes, &options, |e| {
        if let Followed::Reading { reading, .. } = e {
            if reading.error.is_some() {
                failed += 1;
            }
        }
        if json {
            if let Ok(line) = serde_json::to_string(e) {
                println!("{line}");
            }
        } else {
            println!("{}", followed_line(e));
        }
    });
    tokio::select! {
        r = run => { r?; }
        _ = tokio::signal::ctrl_c() => {}
    }
    // As `sigil app`: 2 when some reading failed verification.
    Ok(if failed > 0 { 2 } else { 0 })
}

/// One line of `--follow` output.
fn followed_line(e: &sigil_client::follow::Followed) -> String {
    use sigil_client::follow::Followed;
    match e {
        Followed::Observing { sensor, again } => format!(
            "{} {}: observing{}",
            sensor.label,
            sensor.topic,
            if *again { " again" } else { "" }
        ),
        Followed::Refused { sensor, why } => {
            format!("{} {}: not followed: {why}", sensor.label, sensor.topic)
        }
        Followed::Reading { sensor, reading } => {
            let values: Vec<String> = reading
                .values
                .iter()
                .map(|(n, v, u)| format!("{n}={v:.2}{}", u.as_deref().unwrap_or("")))
                .collect();
            let status = match (&reading.error, reading.verified) {
                (Some(e), _) => format!("FAILED: {e}"),
                (None, true) => "verified end to end".to_string(),
                (None, false) => "taken on the broker's word (session)".to_string(),
            };
            let proof = match reading.protection {
                sigil_client::app::Protection::Signed => "signed",
                sigil_client::app::Protection::Mac => "mac",
                sigil_client::app::Protection::Session => "session",
            };
            format!(
                "{} {} seq {}: {} ({proof}, {status})",
                sensor.label,
                sensor.topic,
                reading.seq,
                values.join(" "),
            )
        }
    }
}
