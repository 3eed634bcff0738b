//! `sigil`: the Sigil command line. Every subcommand is a thin driver around the library
//! crates; see docs/architecture.md.

mod app;
mod attacks;
mod bench;
mod bench_dtls;
mod client;
mod demo;
mod sensor;
mod storage;
mod transport;
mod util;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, DeviceStorage};
use sigil_identity::Identity;
use sigil_objects::ReadingFormat;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "sigil",
    version,
    about = "Secure identities, signed SenML readings and their verification for constrained devices (RFC 8387)"
)]
struct Cli {
    /// Log level (error, warn, info, debug, trace); SIGIL_LOG overrides. Default: warn
    /// (error for the demo, whose refusals are expected and summarised at the end).
    #[arg(long, global = true)]
    log: Option<String>,
    /// Structured JSON logs on stderr.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Resource Directory and publish-subscribe broker.
    Server(ServerArgs),
    /// Run an emulated sensor.
    Sensor(SensorArgs),
    /// Look sensors up, fetch their readings and verify each one end to end.
    App(AppArgs),
    /// Compute identities, group identities and label forms.
    Identity(IdentityArgs),
    /// Manage the authorized identity list of a server's database.
    Provision(ProvisionArgs),
    /// Run the whole system with attacks on loopback and print a summary.
    Demo(DemoArgs),
    /// Verify one signed reading from a file against a key and identity.
    Verify(VerifyArgs),
    /// One CoAP GET over coap:// or coaps:// (prints the payload).
    Get(GetArgs),
    /// Measure bytes on the wire and server throughput (docs/benchmarks.md).
    Bench(BenchArgs),
}

#[derive(Args)]
struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Subcommand)]
enum BenchWhat {
    /// DTLS handshake bytes and datagrams per suite and mode beside OpenSSL 3 measured in the
    /// same run, record overhead, and server handshakes per core-second.
    Dtls {
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long)]
        json: bool,
    },
    /// Bytes on the wire for one signed temperature reading, against the 802.15.4 budget.
    Wire {
        #[arg(long)]
        json: bool,
    },
    /// End-to-end verified readings per second over loopback, beside the raw verify rate.
    Server {
        #[arg(long, default_value_t = 64)]
        sensors: usize,
        #[arg(long, default_value_t = 200)]
        readings: usize,
        /// Repeat and report every run (quote the median).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long)]
        json: bool,
    },
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let v: f64 = num.parse().map_err(|_| format!("bad duration '{s}'"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" | "" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("bad duration unit in '{s}' (ms, s, m, h)")),
    };
    if !(0.0..=1e7).contains(&secs) {
        return Err(format!("duration out of range: '{s}'"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_alg(s: &str) -> Result<SignatureAlgorithm, String> {
    SignatureAlgorithm::from_name(s)
        .ok_or_else(|| format!("unknown algorithm '{s}' (ed25519, p256)"))
}

fn parse_format(s: &str) -> Result<ReadingFormat, String> {
    match s {
        "cose" => Ok(ReadingFormat::Cose),
        "jws" | "jose" => Ok(ReadingFormat::Jws),
        _ => Err(format!("unknown format '{s}' (cose, jws)")),
    }
}

#[derive(Args)]
struct ServerArgs {
    #[arg(long, default_value = "127.0.0.1:5683")]
    listen: std::net::SocketAddr,
    /// SQLite database file (created on first start).
    #[arg(long, default_value = "sigil.db")]
    db: PathBuf,
    /// Largest accepted jump above the highest sequence number seen (RFC 8387 §8.2 threshold).
    #[arg(long, default_value_t = 1000)]
    max_ahead: u64,
    #[command(flatten)]
    transmission: TransmissionArgs,
    /// DANGER: accept registrations from identities not on the list and add them to it.
    /// An attacker present at installation can then take a device's place (docs/security.md).
    #[arg(long)]
    danger_trust_on_first_use: bool,
    /// CoAP over DTLS (coaps://) socket.
    #[arg(long, default_value = "127.0.0.1:5684")]
    dtls_listen: std::net::SocketAddr,
    /// Serve plain coap:// only.
    #[arg(long)]
    no_dtls: bool,
    /// Let raw-public-key clients stay anonymous (server-only authentication); they are then
    /// treated like plain-CoAP clients.
    #[arg(long)]
    dtls_anonymous_clients: bool,
    /// Most DTLS handshakes in progress.
    #[arg(long, default_value_t = 256)]
    dtls_max_handshakes: usize,
    /// Most DTLS sessions (only idle ones are evicted when full).
    #[arg(long, default_value_t = 4096)]
    dtls_max_sessions: usize,
    /// X.509: the server's certificate chain (PEM, leaf first) for clients that use
    /// certificates (`--dtls cert`).
    #[arg(long, requires = "dtls_cert_key")]
    dtls_cert: Option<PathBuf>,
    /// X.509: the P-256 private key of --dtls-cert (PEM).
    #[arg(long, requires = "dtls_cert")]
    dtls_cert_key: Option<PathBuf>,
    /// X.509: trust anchors (PEM) for client certificates; the certified key's identity must
    /// also be on the authorized list.
    #[arg(long)]
    dtls_client_ca: Option<PathBuf>,
    /// Issue no session IDs (no resumption; 32 bytes less in every full handshake).
    #[arg(long)]
    dtls_no_resumption: bool,
    #[command(flatten)]
    dtls_timing: DtlsTimingArgs,
}

/// DTLS retransmission timing (RFC 6347 §4.2.4; RFC 7925 §11 for constrained links).
#[derive(Args, Clone)]
struct DtlsTimingArgs {
    /// Initial DTLS retransmission timeout (RFC 6347: 1 s; constrained links: e.g. 5 s).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    dtls_timeout: Duration,
    /// Path MTU for DTLS records (handshake messages are fragmented to fit).
    #[arg(long, default_value_t = 1152)]
    dtls_mtu: usize,
    /// With rpk or cert: offer AES-128-GCM instead of CCM-8 (for comparison).
    #[arg(long)]
    dtls_gcm: bool,
    /// Ask for an RFC 9146 connection ID, so the session survives an address change.
    #[arg(long)]
    dtls_connection_id: bool,
}

impl DtlsTimingArgs {
    fn config(&self) -> Result<sigil_dtls::connection::Config> {
        if !(128..=1400).contains(&self.dtls_mtu) || self.dtls_timeout.is_zero() {
            bail!("--dtls-mtu must be 128-1400 and --dtls-timeout above zero");
        }
        Ok(sigil_dtls::connection::Config {
            initial_timeout_ms: self.dtls_timeout.as_millis() as u64,
            pmtu: self.dtls_mtu,
            gcm: self.dtls_gcm,
            connection_id: self.dtls_connection_id,
            ..Default::default()
        })
    }
}

/// Client credentials for coaps://.
#[derive(Args, Clone)]
struct DtlsArgs {
    /// DTLS mode for a coaps:// server: psk (pre-shared key), ecdhe-psk (pre-shared key with
    /// forward secrecy), rpk (raw public keys) or cert (X.509 certificates).
    #[arg(long, value_parser = ["psk", "ecdhe-psk", "rpk", "cert"])]
    dtls: Option<String>,
    /// cert: this client's certificate chain (PEM, leaf first). A sensor's certificate must
    /// certify its own device key.
    #[arg(long)]
    cert: Option<PathBuf>,
    /// cert: the private key of --cert (PEM; not for sensors, which use their device key).
    #[arg(long)]
    cert_key: Option<PathBuf>,
    /// cert: trust anchors (PEM) for the server's certificate.
    #[arg(long)]
    ca: Option<PathBuf>,
    /// The pre-shared key in hex (as printed by `sigil provision psk`).
    #[arg(long)]
    psk: Option<String>,
    /// A file holding the pre-shared key in hex.
    #[arg(long)]
    psk_file: Option<PathBuf>,
    /// PSK identity (default: the client's own identity).
    #[arg(long)]
    psk_identity: Option<String>,
    /// rpk: the identity of the server's key, as printed by `sigil server`.
    #[arg(long)]
    server_identity: Option<String>,
    /// rpk: the client's key file (`alg:hex` secret; P-256 made if missing). A sensor uses its
    /// own device key instead.
    #[arg(long)]
    key_file: Option<PathBuf>,
    #[command(flatten)]
    timing: DtlsTimingArgs,
}

impl DtlsArgs {
    /// The credentials for `uri`; `own` is the client's identity and key when it has one.
    fn security(
        &self,
        secure: bool,
        own: Option<(Identity, SecretKey)>,
    ) -> Result<transport::Security> {
        use transport::Security;
        let mode = match (&self.dtls, secure) {
            (None, false) => return Ok(Security::None),
            (Some(_), false) => bail!("--dtls needs a coaps:// server URI"),
            (None, true) => bail!("a coaps:// server needs --dtls psk|ecdhe-psk|rpk|cert"),
            (Some(m), true) => m.as_str(),
        };
        match mode {
            "psk" | "ecdhe-psk" => {
                let hex_text = match (&self.psk, &self.psk_file) {
                    (Some(h), None) => h.clone(),
                    (None, Some(f)) => std::fs::read_to_string(f)
                        .with_context(|| format!("cannot read {}", f.display()))?,
                    _ => bail!("--dtls psk needs exactly one of --psk or --psk-file"),
                };
                let key = hex::decode(hex_text.trim()).context("PSK is not hex")?;
                if !(16..=64).contains(&key.len()) {
                    bail!("a PSK has 16 to 64 bytes");
                }
                let identity = match (&self.psk_identity, &own) {
                    (Some(i), _) => i.clone(),
                    (None, Some((id, _))) => id.to_string(),
                    (None, None) => bail!("--dtls psk needs --psk-identity"),
                };
                Ok(Security::Psk {
                    identity: identity.into_bytes(),
                    key,
                    ecdhe: mode == "ecdhe-psk",
                })
            }
            "cert" => {
                let ca = self
                    .ca
                    .as_ref()
                    .context("--dtls cert needs --ca (trust anchors, PEM)")?;
                let anchors = read_certs(ca)?;
                let own = match (&self.cert, &self.cert_key, own) {
                    (None, _, _) => None,
                    (Some(c), Some(k), _) => Some((read_certs(c)?, read_key(k)?)),
                    (Some(c), None, Some((_, device_key))) => {
                        let chain = read_certs(c)?;
                        let leaf = sigil_dtls::x509::parse(&chain[0])
                            .map_err(|e| anyhow::anyhow!("{}: {e}", c.display()))?;
                        let public = RustCrypto
                            .public_key(&device_key)
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                        if leaf.key != public {
                            bail!(
                                "{}: the certificate is not for this device's key",
                                c.display()
                            );
                        }
                        Some((chain, device_key))
                    }
                    (Some(_), None, None) => bail!("--cert needs --cert-key"),
                };
                Ok(Security::Certificate { own, anchors })
            }
            _ => {
                let server = self
                    .server_identity
                    .as_deref()
                    .context("--dtls rpk needs --server-identity (printed by `sigil server`)")?;
                let server = Identity::parse(server).map_err(|e| anyhow::anyhow!("{e}"))?;
                let own = match (own, &self.key_file) {
                    (_, Some(f)) => Some(load_or_make_key(f)?),
                    (Some((_, k)), None) => Some(k),
                    (None, None) => None,
                };
                Ok(Security::RawPublicKey { own, server })
            }
        }
    }
}

/// The certificates of a PEM file, in order (at least one).
fn read_certs(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let certs = sigil_server::pem::blocks(&text, "CERTIFICATE")
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no CERTIFICATE block", path.display());
    }
    Ok(certs)
}

/// A P-256 private key from a PEM file.
fn read_key(path: &std::path::Path) -> Result<SecretKey> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    sigil_server::pem::p256_key(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Reads an `alg:hex` secret key file, or makes a P-256 key there (and says its identity).
fn load_or_make_key(path: &std::path::Path) -> Result<SecretKey> {
    if let Ok(text) = std::fs::read_to_string(path) {
        let (alg, hex_text) = text
            .trim()
            .split_once(':')
            .context("key file: expected alg:hex")?;
        let alg = parse_alg(alg).map_err(|e| anyhow::anyhow!(e))?;
        let bytes = hex::decode(hex_text).context("key file: not hex")?;
        return SecretKey::from_bytes(alg, &bytes).map_err(|e| anyhow::anyhow!("key file: {e}"));
    }
    let key = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut util::OsRng)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = format!("p256:{}\n", hex::encode(key.to_bytes()));
    {
        use std::io::Write;
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        o.open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let public = RustCrypto
        .public_key(&key)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let id = Identity::of_key(&RustCrypto, &public, b"").map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "new DTLS client key in {}; its identity (provision it): {id}",
        path.display()
    );
    Ok(key)
}

#[derive(Args)]
struct GetArgs {
    /// coap://host[:port]/path or coaps://host[:port]/path
    uri: String,
    #[command(flatten)]
    dtls: DtlsArgs,
}

#[derive(Args)]
struct SensorArgs {
    /// The server, coap://host[:port].
    #[arg(long, default_value = "coap://127.0.0.1:5683")]
    server: String,
    /// Directory holding the device's key and sequence reservation.
    #[arg(long)]
    state: PathBuf,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    interval: Duration,
    /// Stop after this many readings.
    #[arg(long)]
    count: Option<u64>,
    /// Signature algorithm for a key generated at first boot.
    #[arg(long, default_value = "ed25519", value_parser = parse_alg)]
    alg: SignatureAlgorithm,
    /// Wire form of readings.
    #[arg(long, default_value = "cose", value_parser = parse_format)]
    format: ReadingFormat,
    /// Send only this many low bits of the sequence number (COSE only).
    #[arg(long)]
    lsb_bits: Option<u8>,
    /// Publish every n-th reading as Confirmable (1: all, 0: none).
    #[arg(long, default_value_t = 1)]
    confirm_every: u32,
    /// Registration lifetime in seconds.
    #[arg(long, default_value_t = 300)]
    lifetime: u32,
    /// Forget the key and sequence state first: a new key pair and a new identity.
    #[arg(long)]
    factory_reset: bool,
    /// Print the identity (after first boot) and exit.
    #[arg(long)]
    print_identity: bool,
    /// Public keys of the other devices of this device's kit, one `alg:hex` per line.
    #[arg(long)]
    kit: Option<PathBuf>,
    /// Other information O in I = h(P|O).
    #[arg(long, default_value = "")]
    other: String,
    #[command(flatten)]
    transmission: TransmissionArgs,
    #[command(flatten)]
    dtls: DtlsArgs,
}

/// CoAP transmission parameters (RFC 7252 §4.8).
#[derive(Args)]
struct TransmissionArgs {
    /// ACK_TIMEOUT.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    ack_timeout: Duration,
    /// ACK_RANDOM_FACTOR (at least 1.0).
    #[arg(long, default_value_t = 1.5)]
    ack_random_factor: f64,
    /// MAX_RETRANSMIT.
    #[arg(long, default_value_t = 4)]
    max_retransmit: u8,
}

impl TransmissionArgs {
    fn parameters(&self) -> Result<sigil_coap::TransmissionParameters> {
        if !(1.0..=10.0).contains(&self.ack_random_factor)
            || self.max_retransmit > 20
            || self.ack_timeout.is_zero()
        {
            bail!("transmission parameters out of range (ACK_RANDOM_FACTOR 1-10, MAX_RETRANSMIT 0-20, ACK_TIMEOUT > 0)");
        }
        Ok(sigil_coap::TransmissionParameters {
            ack_timeout_ms: u32::try_from(self.ack_timeout.as_millis()).unwrap_or(u32::MAX),
            ack_random_factor_milli: (self.ack_random_factor * 1000.0) as u32,
            max_retransmit: self.max_retransmit,
        })
    }
}

#[derive(Args)]
struct AppArgs {
    #[arg(long, default_value = "coap://127.0.0.1:5683")]
    server: String,
    /// The application's own list of trusted identities (same format as `provision import`).
    #[arg(long)]
    trust: Option<PathBuf>,
    /// Fetch only the newest N readings per sensor (default: all).
    #[arg(long)]
    history: Option<u32>,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    dtls: DtlsArgs,
}

#[derive(Args)]
struct IdentityArgs {
    /// Public key(s) as `alg:hex` (alg: ed25519 or p256). One key: a device identity; with
    /// --group: the group identity of all keys, and each member's kit-bound identity.
    #[arg(long = "key")]
    keys: Vec<String>,
    /// A sensor state directory instead of --key.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Compute the group identity of the keys (RFC 8387 §4.1).
    #[arg(long)]
    group: bool,
    /// Other information O, as text.
    #[arg(long, default_value = "")]
    other: String,
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ProvisionArgs {
    #[arg(long, default_value = "sigil.db")]
    db: PathBuf,
    #[command(subcommand)]
    action: ProvisionAction,
}

#[derive(Subcommand)]
enum ProvisionAction {
    /// Add one identity (any label form).
    Add {
        identity: String,
        /// It is a group (kit) identity.
        #[arg(long)]
        group: bool,
        #[arg(long, default_value = "")]
        label: String,
    },
    /// Import identities from a text file as scanned from labels or a kit's box.
    Import { file: PathBuf },
    /// List the authorized identities.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke an identity: nothing from it is accepted any more.
    Revoke { identity: String },
    /// Give an authorized identity a DTLS pre-shared key (coaps:// with --dtls psk); prints
    /// the key. The PSK identity is the identity's text.
    Psk {
        identity: String,
        /// The key in hex (16-64 bytes); default: 16 random bytes.
        #[arg(long)]
        key: Option<String>,
    },
}

#[derive(Args)]
struct DemoArgs {
    #[arg(long, default_value_t = 20)]
    sensors: usize,
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    interval: Duration,
    /// Keep the database and sensor states here instead of a temporary directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// How many sensors form a kit provisioned by its group identity.
    #[arg(long, default_value_t = 3)]
    kit: usize,
    #[arg(long)]
    json: bool,
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct VerifyArgs {
    /// File with the signed reading.
    file: PathBuf,
    #[arg(long, default_value = "cose", value_parser = parse_format)]
    format: ReadingFormat,
    /// The signer's public key, `alg:hex`.
    #[arg(long)]
    key: String,
    /// Expected identity; default: computed from the key.
    #[arg(long)]
    identity: Option<String>,
    /// Full sequence number (needed for low-bits readings).
    #[arg(long)]
    seq: Option<u64>,
}

fn parse_key(s: &str) -> Result<PublicKey> {
    let (alg, hex_key) = s
        .split_once(':')
        .context("a key is alg:hex, e.g. ed25519:d75a98...")?;
    let alg = parse_alg(alg).map_err(anyhow::Error::msg)?;
    PublicKey::from_bytes(alg, &hex::decode(hex_key.trim()).context("key is not hex")?)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

fn main() {
    let cli = Cli::parse();
    let default_level = if matches!(cli.command, Command::Demo(_)) {
        "error"
    } else {
        "warn"
    };
    util::init_logging(cli.log.as_deref().unwrap_or(default_level), cli.log_json);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sigil: cannot start runtime: {e}");
            std::process::exit(1);
        }
    };
    match rt.block_on(run(cli.command)) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("sigil: {e:#}");
            std::process::exit(1);
        }
    }
}

async fn run(cmd: Command) -> Result<i32> {
    match cmd {
        Command::Server(a) => {
            let mut config = sigil_server::ServerConfig::new(a.listen, a.db);
            config.service.freshness.max_ahead = a.max_ahead;
            config.service.danger_trust_on_first_use = a.danger_trust_on_first_use;
            config.transmission = a.transmission.parameters()?;
            if !a.no_dtls {
                let mut d = sigil_server::DtlsConfig::new(a.dtls_listen);
                d.dtls = a.dtls_timing.config()?;
                d.require_client_auth = !a.dtls_anonymous_clients;
                d.max_handshakes = a.dtls_max_handshakes.max(1);
                d.max_sessions = a.dtls_max_sessions.max(1);
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
                tracing::warn!(
                    "trust on first use is ON: unknown identities are added at registration"
                );
            }
            let stats = sigil_server::Stats::default();
            let server = sigil_server::Server::start(config, stats.clone()).await?;
            println!("sigil server listening on coap://{}", server.local_addr);
            if let Some(d) = &server.dtls {
                println!(
                    "sigil server listening on coaps://{} (DTLS server identity {})",
                    d.addr, d.identity
                );
            }
            tokio::signal::ctrl_c().await?;
            server.shutdown().await;
            eprintln!("{}", serde_json::to_string_pretty(&stats.snapshot())?);
            Ok(0)
        }
        Command::Sensor(a) => run_sensor(a).await,
        Command::Get(a) => {
            let uri = transport::parse_uri(&a.uri)?;
            let security = a.dtls.security(uri.secure, None)?;
            let t = transport::Transport::open(uri.addr, security, a.dtls.timing.config()?).await?;
            let mut c = client::CoapClient::over(t, sigil_coap::TransmissionParameters::default());
            let r = c.get(&uri.path, &[]).await?;
            c.close().await;
            eprintln!("{}", r.code);
            use std::io::Write;
            std::io::stdout().write_all(&r.payload)?;
            println!();
            Ok(if r.code.is_success() { 0 } else { 2 })
        }
        Command::App(a) => {
            let uri = transport::parse_uri(&a.server)?;
            let security = a.dtls.security(uri.secure, None)?;
            let t = transport::Transport::open(uri.addr, security, a.dtls.timing.config()?).await?;
            let trust = match &a.trust {
                Some(p) => Some(app::load_trust(
                    &std::fs::read_to_string(p)
                        .with_context(|| format!("cannot read {}", p.display()))?,
                )?),
                None => None,
            };
            let report = app::run(t, trust.as_ref(), a.history).await?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                app::print_table(&report);
            }
            Ok(if report.failed() > 0 { 2 } else { 0 })
        }
        Command::Identity(a) => identity_cmd(a),
        Command::Provision(a) => provision_cmd(a),
        Command::Demo(a) => {
            let summary = demo::run(demo::DemoOptions {
                sensors: a.sensors,
                duration: a.duration,
                interval: a.interval,
                dir: a.dir,
                kit: a.kit,
                quiet: a.quiet || a.json,
            })
            .await?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                demo::print_summary(&summary);
            }
            let ok = summary.acknowledged_but_missing == 0
                && summary.readings_failed_verification == 0
                && summary.attacks.iter().all(|x| x.refused)
                && summary.readings_acknowledged > 0;
            if !ok {
                eprintln!("sigil demo: FAILED (an acknowledged reading is missing, a reading failed verification, or an attack was accepted)");
            }
            Ok(if ok { 0 } else { 1 })
        }
        Command::Bench(b) => match b.what {
            BenchWhat::Dtls { runs, json } => {
                let r = bench_dtls::run(runs)?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&r)?);
                } else {
                    bench_dtls::print(&r);
                }
                Ok(0)
            }
            BenchWhat::Wire { json } => {
                let rows = bench::wire()?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&rows)?);
                } else {
                    bench::print_wire(&rows);
                }
                Ok(0)
            }
            BenchWhat::Server {
                sensors,
                readings,
                runs,
                json,
            } => {
                let mut results = Vec::new();
                for i in 0..runs.max(1) {
                    let r = bench::server(sensors, readings, json).await?;
                    if !json {
                        println!(
                            "run {}: {:.0} readings/s end to end ({} in {:.2}s, load generator on the same cores); server {:.1} µs CPU per reading = {:.0} readings per core-second; raw verify {:.0}/s on 1 thread ({:.0}/s on {} threads); per-core ratio {:.2}",
                            i + 1, r.end_to_end_per_second, r.acknowledged, r.seconds, r.server_cpu_us_per_reading, r.server_readings_per_core_second, r.raw_verify_per_second_one_thread, r.raw_verify_per_second_all_threads, r.threads, r.ratio_per_core
                        );
                    }
                    results.push(r);
                }
                let mut ratios: Vec<f64> = results.iter().map(|r| r.ratio_per_core).collect();
                ratios.sort_by(f64::total_cmp);
                let median = ratios[ratios.len() / 2];
                if json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(
                            &serde_json::json!({"runs": results, "median_ratio_per_core": median})
                        )?
                    );
                } else {
                    println!("median per-core ratio (server readings per CPU-second / raw verifications per CPU-second): {median:.2}");
                }
                Ok(0)
            }
        },
        Command::Verify(a) => {
            let bytes = std::fs::read(&a.file)
                .with_context(|| format!("cannot read {}", a.file.display()))?;
            let key = parse_key(&a.key)?;
            let id = match &a.identity {
                Some(i) => Identity::parse(i).map_err(|e| anyhow::anyhow!("{e}"))?,
                None => {
                    Identity::of_key(&RustCrypto, &key, b"").map_err(|e| anyhow::anyhow!("{e}"))?
                }
            };
            let r = sigil_objects::SignedReading::parse(a.format, &bytes)
                .map_err(|e| anyhow::anyhow!("not a signed reading: {e}"))?;
            let seq = a
                .seq
                .or(r.full_seq())
                .context("low-bits reading: give --seq")?;
            let mut scratch = vec![0u8; r.scratch_len()];
            match r.verify_end_to_end(&RustCrypto, &key, &id, seq, &mut scratch) {
                Ok(()) => {
                    println!("verified: kid {} seq {seq}", r.kid);
                    Ok(0)
                }
                Err(e) => {
                    println!("REJECTED: {e}");
                    Ok(3)
                }
            }
        }
    }
}

async fn run_sensor(a: SensorArgs) -> Result<i32> {
    // Validate every argument before touching the device's state.
    let transmission = a.transmission.parameters()?;
    if a.lsb_bits.is_some() && a.format == ReadingFormat::Jws {
        bail!("--lsb-bits works with --format cose only");
    }
    if a.lsb_bits.is_some_and(|k| !(1..=32).contains(&k)) {
        bail!("--lsb-bits must be between 1 and 32");
    }
    let mut storage = storage::FileStorage::open(&a.state)?;
    if a.factory_reset {
        storage.erase().map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!("factory reset: key and sequence state erased; a new identity follows");
    }
    let kit: Vec<PublicKey> = match &a.kit {
        Some(p) => std::fs::read_to_string(p)?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(parse_key)
            .collect::<Result<_>>()?,
        None => vec![],
    };
    let config = DeviceConfig {
        algorithm: a.alg,
        format: a.format,
        lifetime_s: a.lifetime,
        lsb_bits: a.lsb_bits,
        confirm_every: a.confirm_every,
        transmission,
        ..Default::default()
    };
    let device = Device::boot(
        RustCrypto,
        config,
        &mut storage,
        &mut util::OsRng,
        &kit,
        a.other.as_bytes(),
    )
    .map_err(|e| anyhow::anyhow!("boot: {e}"))?;
    let id = *device.identity();
    if a.print_identity {
        let public = device.public_key();
        println!(
            "{id}\n{}\n{}\n{}:{}",
            id.label(),
            id.short_label(),
            public.algorithm().name(),
            hex::encode(public.as_bytes())
        );
        return Ok(0);
    }
    eprintln!(
        "sensor {} ({}) starting",
        id.label(),
        device.public_key().algorithm().name()
    );
    let uri = transport::parse_uri(&a.server)?;
    let security = a
        .dtls
        .security(uri.secure, Some((id, storage_key(&mut storage)?)))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop_tx.send(true);
    });
    let run = sensor::SensorRun {
        server: uri.addr,
        interval: a.interval,
        readings: a.count,
        phase: f64::from(id.as_bytes()[0]) / 40.0,
        security,
        dtls: a.dtls.timing.config()?,
    };
    let report = sensor::run(device, storage, run, stop_rx, |ev| {
        tracing::info!(?ev, "device event")
    })
    .await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(
        if report.rejected.is_empty() && report.timed_out.is_empty() {
            0
        } else {
            2
        },
    )
}

/// The device's own signing key (its DTLS raw public key credential).
fn storage_key(storage: &mut storage::FileStorage) -> Result<SecretKey> {
    storage
        .load_key()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .context("no device key")
}

fn identity_cmd(a: IdentityArgs) -> Result<i32> {
    let mut keys: Vec<PublicKey> = a.keys.iter().map(|k| parse_key(k)).collect::<Result<_>>()?;
    if let Some(dir) = &a.state {
        let mut s = storage::FileStorage::open(dir)?;
        let sk: SecretKey = s
            .load_key()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .context("no key in that state directory (boot the sensor once)")?;
        keys.push(
            RustCrypto
                .public_key(&sk)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        );
    }
    if keys.is_empty() {
        bail!("give --key alg:hex (repeatable) or --state DIR");
    }
    let mut rows = Vec::new();
    if a.group {
        let g = Identity::of_group(&RustCrypto, &keys).map_err(|e| anyhow::anyhow!("{e}"))?;
        rows.push(("group".to_string(), g));
        for (i, k) in keys.iter().enumerate() {
            let others = demo::kit_members_except(&keys, i);
            rows.push((
                format!("member {i}"),
                Identity::of_member(&RustCrypto, k, &others).map_err(|e| anyhow::anyhow!("{e}"))?,
            ));
        }
    } else {
        for (i, k) in keys.iter().enumerate() {
            rows.push((
                format!("device {i}"),
                Identity::of_key(&RustCrypto, k, a.other.as_bytes())
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ));
        }
    }
    if a.json {
        let v: Vec<_> = rows.iter().map(|(what, id)| serde_json::json!({"what": what, "identity": id.to_string(), "label": id.label().to_string(), "short": id.short_label().to_string()})).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (what, id) in rows {
            println!("{what:<10} {id}  {}  {}", id.label(), id.short_label());
        }
    }
    Ok(0)
}

fn provision_cmd(a: ProvisionArgs) -> Result<i32> {
    let store = sigil_server::Store::open(&a.db)
        .with_context(|| format!("cannot open database {}", a.db.display()))?;
    let now = sigil_server::unix_now();
    match a.action {
        ProvisionAction::Add {
            identity,
            group,
            label,
        } => {
            let id = Identity::parse(&identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            let kind = if group {
                sigil_server::store::IdentityKind::Group
            } else {
                sigil_server::store::IdentityKind::Device
            };
            let added = store.add_identity(&id, kind, &label, now)?;
            println!(
                "{} {id} ({})",
                if added { "added" } else { "already authorized" },
                kind.as_str()
            );
        }
        ProvisionAction::Import { file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let (added, present) = sigil_server::provision::import(&store, &text, now)?;
            println!("imported {added} identities ({present} already authorized)");
        }
        ProvisionAction::List { json } => {
            let rows = store.list_identities()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for r in rows {
                    let id = Identity::parse(&r.identity).map_err(|e| anyhow::anyhow!("{e}"))?;
                    println!(
                        "{}  {:<6} {:<8} {}",
                        id.label(),
                        r.kind.as_str(),
                        if r.revoked_at.is_some() {
                            "revoked"
                        } else {
                            "active"
                        },
                        r.label
                    );
                }
            }
        }
        ProvisionAction::Psk { identity, key } => {
            let id = Identity::parse(&identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            if !store.authorized()?.contains_key(&id) {
                bail!("{id} is not an active identity: add it first");
            }
            let key = match key {
                Some(h) => hex::decode(h.trim()).context("--key is not hex")?,
                None => {
                    let mut k = vec![0u8; 16];
                    getrandom::fill(&mut k).map_err(|e| anyhow::anyhow!("{e}"))?;
                    k
                }
            };
            if !(16..=64).contains(&key.len()) {
                bail!("a PSK has 16 to 64 bytes");
            }
            store.set_psk(&id, &key, now)?;
            println!("{}", hex::encode(&key));
        }
        ProvisionAction::Revoke { identity } => {
            let id = Identity::parse(&identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            if !store.revoke_identity(&id, now)? {
                bail!("{id} is not an active identity");
            }
            println!("revoked {id}");
        }
    }
    Ok(0)
}
