//! `sigil server`: the Resource Directory and broker, coap:// and coaps://, until SIGINT
//! (Ctrl-C) or SIGTERM (a service manager's stop): then it finishes the batch in hand, closes
//! the database (its WAL folded in) and prints its counters.

use crate::args::{read_certs, read_key, DtlsTimingArgs, TransmissionArgs};
use crate::util::resolve_addr;
use anyhow::{bail, Result};
use clap::Args;
use sigil_crypto::{CryptoProvider, RustCrypto};
use std::path::PathBuf;

#[derive(Args)]
pub struct ServerArgs {
    /// A TOML file of settings: each key is a flag's long name (`listen = "localhost:5683"`,
    /// `authorize-reads = true`); flags given on the command line override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The coap:// address to listen on: an IP address or a host name, with the port.
    #[arg(long, default_value = "127.0.0.1:5683")]
    pub listen: String,
    /// SQLite database file (created on first start, readable by its owner only).
    #[arg(long, default_value = "sigil.db")]
    pub db: PathBuf,
    /// Largest accepted jump above the highest sequence number seen (RFC 8387 §8.2 threshold).
    #[arg(long, default_value_t = 1000)]
    pub max_ahead: u64,
    /// Max-Age (seconds) of the 5.03 a reading gets while the database has no space: when a
    /// device sends it again (it keeps the reading meanwhile).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub retry_after_full: u32,
    #[command(flatten)]
    pub transmission: TransmissionArgs,
    /// DANGER: accept registrations from identities not on the list and add them to it.
    /// An attacker present at installation can then take a device's place (docs/security.md).
    #[arg(long)]
    pub danger_trust_on_first_use: bool,
    /// Serve readings only to coaps:// sessions of identities granted the sensor or its kit
    /// (`sigil provision grant`), and to the sensor itself: 4.01 without a session, 4.03
    /// without a grant.
    #[arg(long)]
    pub authorize_reads: bool,
    /// Seconds an access token from `/token` stays valid.
    #[arg(long, default_value_t = 3600)]
    pub token_lifetime: u32,
    /// Access tokens held for one subject at `/authz-info`; at the cap its oldest gives way.
    #[arg(long, default_value_t = sigil_server::authz::TOKENS_PER_SUBJECT)]
    pub tokens_per_subject: usize,
    /// `/token` requests one subject may make over all its sessions, as BURST,SECONDS: BURST
    /// at once, then one every SECONDS (each may cost an ECDSA signature).
    #[arg(long, default_value_t = sigil_server::authz::SUBJECT_RATE)]
    pub token_rate_subject: sigil_server::authz::Rate,
    /// `/token` requests one session may make, as BURST,SECONDS.
    #[arg(long, default_value_t = sigil_server::authz::SESSION_RATE)]
    pub token_rate_session: sigil_server::authz::Rate,
    /// The coaps:// (CoAP over DTLS) address to listen on: an IP address or a host name, with
    /// the port.
    #[arg(long, default_value = "127.0.0.1:5684")]
    pub dtls_listen: String,
    /// Delete readings received longer ago than this (e.g. `30d`, `12h`), except the latest of
    /// each sensor and topic: at start and every minute. Default: keep every reading.
    #[arg(long, value_parser = crate::args::parse_retention)]
    pub retain: Option<std::time::Duration>,
    /// Serve plain coap:// only.
    #[arg(long)]
    pub no_dtls: bool,
    /// Let raw-public-key clients stay anonymous (server-only authentication); they are then
    /// treated like plain-CoAP clients.
    #[arg(long)]
    pub dtls_anonymous_clients: bool,
    /// Most DTLS handshakes in progress.
    #[arg(long, default_value_t = 256)]
    pub dtls_max_handshakes: usize,
    /// Most DTLS handshakes in progress from one source host (IPv4 address or IPv6 /64).
    #[arg(long, default_value_t = 16)]
    pub dtls_max_handshakes_per_host: usize,
    /// DTLS handshakes one source host may start at once (each costs the server a key
    /// exchange, and with keys a signature) ...
    #[arg(long, default_value_t = 32)]
    pub dtls_handshake_burst: u32,
    /// ... and per second after that (a token bucket per host).
    #[arg(long, default_value_t = 8)]
    pub dtls_handshake_rate: u32,
    /// Most DTLS sessions (only idle ones are evicted when full).
    #[arg(long, default_value_t = 4096)]
    pub dtls_max_sessions: usize,
    /// Most DTLS sessions charged to one source host (a NAT'd site needs one per device).
    #[arg(long, default_value_t = 1024)]
    pub dtls_max_sessions_per_host: usize,
    /// Most DTLS sessions one authenticated identity holds at once, from any number of
    /// addresses; its least recently active session gives way to a new one.
    #[arg(long, default_value_t = 16)]
    pub dtls_max_sessions_per_identity: usize,
    /// X.509: the server's certificate chain (PEM, leaf first) for clients that use
    /// certificates (`--dtls cert`).
    #[arg(long, requires = "dtls_cert_key")]
    pub dtls_cert: Option<PathBuf>,
    /// X.509: the P-256 private key of --dtls-cert (PEM).
    #[arg(long, requires = "dtls_cert")]
    pub dtls_cert_key: Option<PathBuf>,
    /// X.509: trust anchors (PEM) for client certificates; the certified key's identity must
    /// also be on the authorized list.
    #[arg(long)]
    pub dtls_client_ca: Option<PathBuf>,
    /// Issue no session IDs (no resumption; 32 bytes less in every full handshake).
    #[arg(long)]
    pub dtls_no_resumption: bool,
    /// Observers of topics (CoAP Observe, RFC 7641) in all.
    #[arg(long, default_value_t = 4096)]
    pub max_observers: usize,
    /// Observers one source host (IPv4 address or IPv6 /64) may hold.
    #[arg(long, default_value_t = 64)]
    pub max_observers_per_host: usize,
    /// An observer nothing was sent to for this long is sent the current reading again (and
    /// the checks of its right to read are made again); notifications carry twice this as
    /// Max-Age, after which a client registers again. E.g. 2m, 30s.
    #[arg(long, default_value = "2m", value_parser = crate::args::parse_duration)]
    pub observe_refresh: std::time::Duration,
    #[command(flatten)]
    pub dtls_timing: DtlsTimingArgs,
}

pub async fn run(a: ServerArgs) -> Result<i32> {
    // Registered before anything else: a stop that comes while the server starts is a
    // clean stop too.
    let mut signals = crate::util::StopSignals::new()?;
    let listen = resolve_addr(&a.listen, "--listen")?;
    let mut config = sigil_server::ServerConfig::new(listen, a.db);
    config.retain = a.retain;
    config.service.freshness.max_ahead = a.max_ahead;
    config.service.retry_after_full_secs = a.retry_after_full;
    config.service.danger_trust_on_first_use = a.danger_trust_on_first_use;
    config.service.authorize_reads = a.authorize_reads;
    config.service.token_lifetime = a.token_lifetime.max(1);
    config.service.token_caps.per_subject = a.tokens_per_subject.max(1);
    config.service.token_caps.subject_rate = a.token_rate_subject;
    config.service.token_caps.session_rate = a.token_rate_session;
    config.transmission = a.transmission.parameters()?;
    if a.observe_refresh < std::time::Duration::from_secs(1) {
        bail!("--observe-refresh must be at least 1s");
    }
    config.observe.max_observers = a.max_observers;
    config.observe.max_per_host = a.max_observers_per_host;
    config.observe.refresh = a.observe_refresh;
    if !a.no_dtls {
        let mut d = sigil_server::DtlsConfig::new(resolve_addr(&a.dtls_listen, "--dtls-listen")?);
        d.dtls = a.dtls_timing.config()?;
        d.require_client_auth = !a.dtls_anonymous_clients;
        d.max_handshakes = a.dtls_max_handshakes.max(1);
        d.max_handshakes_per_host = a.dtls_max_handshakes_per_host.max(1);
        d.handshake_burst_per_host = a.dtls_handshake_burst.max(1);
        d.handshakes_per_host_per_sec = a.dtls_handshake_rate;
        d.max_sessions = a.dtls_max_sessions.max(1);
        d.max_sessions_per_host = a.dtls_max_sessions_per_host.max(1);
        d.max_sessions_per_identity = a.dtls_max_sessions_per_identity.max(1);
        d.resumption = !a.dtls_no_resumption;
        if let (Some(c), Some(k)) = (&a.dtls_cert, &a.dtls_cert_key) {
            d.certificate_chain = read_certs(c)?;
            let key = read_key(k)?;
            let leaf = sigil_dtls::x509::parse(&d.certificate_chain[0])
                .map_err(|e| anyhow::anyhow!("{}: {e}", c.display()))?;
            if leaf.key
                != RustCrypto
                    .public_key(&key)
                    .map_err(|e| anyhow::anyhow!("{e}"))?
            {
                bail!("--dtls-cert-key does not match the leaf of --dtls-cert");
            }
            d.certificate_key = Some(key);
        }
        if let Some(ca) = &a.dtls_client_ca {
            d.client_anchors = read_certs(ca)?;
        }
        config.dtls = Some(d);
    }
    if a.danger_trust_on_first_use {
        tracing::warn!("trust on first use is ON: unknown identities are added at registration");
    }
    let stats = sigil_server::Stats::default();
    let db = config.database.clone();
    let server = match sigil_server::Server::start(config, stats.clone()).await {
        Ok(s) => s,
        Err(sigil_server::StartError::Store(e)) => {
            anyhow::bail!("cannot open database {}: {e}", db.display())
        }
        Err(e @ sigil_server::StartError::Bind { .. }) => anyhow::bail!("{e}"),
        Err(e) => return Err(e.into()),
    };
    println!("sigil server listening on coap://{}", server.local_addr);
    let key = server.answer_key;
    println!(
        "sigil server key {}:{} (signs pairing messages, tokens and the answers sensors ask to have signed on coap://)",
        key.algorithm().name(),
        hex::encode(key.as_bytes())
    );
    if let Some(d) = &server.dtls {
        println!(
            "sigil server listening on coaps://{} (DTLS server identity {})",
            d.addr, d.identity
        );
    }
    warn_if_readable(&db);
    let signal = signals.recv().await;
    eprintln!("sigil server: {signal}: stopping (finishing the batch in hand)");
    tracing::info!(signal, "stopping");
    server.shutdown().await;
    eprintln!("{}", serde_json::to_string_pretty(&stats.snapshot())?);
    Ok(0)
}

/// Warns when the database (the server's private keys, every PSK in clear) or its WAL can be
/// read by group or others, naming the file and the fix.
fn warn_if_readable(db: &std::path::Path) {
    let mut names = vec![db.to_path_buf()];
    for suffix in ["-wal", "-shm"] {
        let mut n = db.as_os_str().to_owned();
        n.push(suffix);
        names.push(PathBuf::from(n));
    }
    for f in names {
        if let Some(mode) = crate::util::readable_by_others(&f) {
            eprintln!(
                "warning: {} is readable by group or others (mode {mode:o}) and holds the server's private keys and every PSK: run `chmod 600 {}`",
                f.display(),
                f.display()
            );
            tracing::warn!(file = %f.display(), mode = format!("{mode:o}"), "database readable by others");
        }
    }
}
