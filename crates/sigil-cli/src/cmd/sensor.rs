//! `sigil sensor`: an emulated sensor with its state in a directory (crate::sensor drives it).

use crate::args::{
    parse_alg, parse_duration, parse_format, parse_key, DtlsArgs, DtlsMode, TransmissionArgs,
};
use crate::sensor;
use crate::storage::{FileStorage, StateLock};
use anyhow::{bail, Context, Result};
use clap::Args;
use sigil_client::os::OsRng;
use sigil_client::parse_uri;
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, DeviceStorage, PairingRefusal};
use sigil_identity::Identity;
use sigil_objects::ReadingFormat;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct SensorArgs {
    /// The server, coap://host[:port] or coaps://host[:port] (with --dtls). Default: the
    /// server URI of the sensor's pairing (the one --pairing applies, or the stored one), else
    /// coap://127.0.0.1:5683. Given beside a pairing that names another URI, it is used and a
    /// warning says so (the pairing's server identity is still pinned). Every argument is
    /// checked before the state directory is created or the device boots.
    #[arg(long)]
    pub server: Option<String>,
    /// Directory holding the device's key and sequence reservation.
    #[arg(long)]
    pub state: PathBuf,
    /// Time between readings (above zero).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Stop after this many readings.
    #[arg(long)]
    pub count: Option<u64>,
    /// Signature algorithm for a key generated at first boot.
    #[arg(long, default_value = "ed25519", value_parser = parse_alg)]
    pub alg: SignatureAlgorithm,
    /// Wire form of readings.
    #[arg(long, default_value = "cose", value_parser = parse_format)]
    pub format: ReadingFormat,
    /// Send only this many low bits of the sequence number (COSE only).
    #[arg(long)]
    pub lsb_bits: Option<u8>,
    /// Publish every n-th reading as Confirmable (1: all, 0: none).
    #[arg(long, default_value_t = 1)]
    pub confirm_every: u32,
    /// Registration lifetime in seconds (at least 60).
    #[arg(long, default_value_t = 300)]
    pub lifetime: u32,
    /// Forget the key and sequence state first: a new key pair and a new identity.
    #[arg(long)]
    pub factory_reset: bool,
    /// Print the identity (after first boot) and exit.
    #[arg(long)]
    pub print_identity: bool,
    /// Public keys of the other devices of this device's kit, one `alg:hex` per line.
    #[arg(long)]
    pub kit: Option<PathBuf>,
    /// Other information O in I = h(P|O).
    #[arg(long, default_value = "")]
    pub other: String,
    /// Apply this pairing message (RFC 8387 §4.1; binary, or hex as `sigil provision pair`
    /// prints it) at start: the device then trusts the server it names, and uses its server
    /// URI when --server is not given (with `--dtls rpk` by default for a coaps:// URI). Applied
    /// once; given again after that, the device says it was applied already and goes on.
    #[arg(long)]
    pub pairing: Option<PathBuf>,
    /// Also serve the readings as an ACE resource server on this UDP address: coaps://
    /// `/reading` and `/history` (raw public keys; a token from the AC bound to the client's
    /// key), plain coap:// `POST /authz-info` on the same port (crate::serve). An IP address
    /// or a host name, with the port.
    #[arg(long, value_parser = crate::args::parse_socket_addr)]
    pub serve: Option<std::net::SocketAddr>,
    /// Run as a node with only a pre-shared key (no key pair; docs/security.md, "Nodes
    /// without public-key crypto"): `mac` publishes COSE_Mac0 readings under the reading key
    /// derived from the PSK, `session` plain SenML over its own DTLS session. Needs a
    /// coaps:// server, `--dtls psk` (or ecdhe-psk), the PSK and `--node-identity`, as
    /// `sigil provision psk-node` printed them.
    #[arg(long, value_enum)]
    pub psk_only: Option<PskOnly>,
    /// The trusted server's public key (`alg:hex`, as `sigil server` prints it) when the
    /// sensor is not paired: on coap:// the sensor then requires answers signed with it (a
    /// paired sensor uses the key of its pairing). With --server-identity, the key must hash
    /// to it.
    #[arg(long, value_parser = parse_key)]
    pub server_key: Option<PublicKey>,
    /// On coap://, act on unsigned answers even with a trusted server (paired, or
    /// --server-key): registration answers and Resets are then taken on anyone's word.
    #[arg(long)]
    pub unsigned_answers: bool,
    /// The identity a PSK-only node was given at provisioning.
    #[arg(long, requires = "psk_only")]
    pub node_identity: Option<String>,
    #[command(flatten)]
    pub transmission: TransmissionArgs,
    #[command(flatten)]
    pub dtls: DtlsArgs,
}

/// `--psk-only`: how a PSK-only node protects its readings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PskOnly {
    /// COSE_Mac0 under the reading key (verifiable by the key's holders).
    Mac,
    /// Plain SenML over the node's DTLS session (transport-authenticated only).
    Session,
}

pub async fn run(mut a: SensorArgs) -> Result<i32> {
    // Validate every argument before touching the device's state: a refused argument
    // creates no state directory, no key and no sequence reservation.
    let transmission = a.transmission.parameters()?;
    if let Some(mode) = a.psk_only {
        return run_psk_only(a, mode, transmission).await;
    }
    if a.lsb_bits.is_some() && a.format == ReadingFormat::Jws {
        bail!("--lsb-bits works with --format cose only");
    }
    if a.lsb_bits.is_some_and(|k| !(1..=32).contains(&k)) {
        bail!("--lsb-bits must be between 1 and 32");
    }
    check_reading_args(&a)?;
    if a.serve.is_some() && (a.kit.is_some() || !a.other.is_empty()) {
        bail!("--serve needs the identity of the device key alone (clients pin it): no --kit or --other");
    }
    let kit: Vec<PublicKey> = match &a.kit {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("cannot read --kit {}", p.display()))?
            .lines()
            .enumerate()
            .map(|(i, l)| (i, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .map(|(i, l)| parse_key(l).with_context(|| format!("{} line {}", p.display(), i + 1)))
            .collect::<Result<_>>()?,
        None => vec![],
    };
    let pairing = match &a.pairing {
        Some(p) => Some(read_pairing(p)?),
        None => None,
    };
    // The pairing this start will have (a factory reset forgets the stored one).
    let paired = match a.factory_reset {
        true => None,
        false => paired_with(&a.state, pairing.as_deref(), &kit, a.other.as_bytes())?,
    };
    let server = server_uri(a.server.as_deref(), paired.as_ref())?;
    let uri = parse_uri(&server).with_context(|| format!("--server {server}"))?;
    if let (Some(_), true, None) = (&paired, uri.secure, a.dtls.dtls) {
        // The pairing pinned the server's key: a raw-public-key session is the one it fits.
        a.dtls.dtls = Some(DtlsMode::Rpk);
    }
    if matches!(a.dtls.dtls, Some(DtlsMode::Rpk)) {
        // A paired sensor pins the server it was paired with (RFC 8387 §4.1).
        if let Some(server) = paired.as_ref().map(|p| p.server) {
            match &a.dtls.server_identity {
                None => a.dtls.server_identity = Some(server.to_string()),
                Some(given) if Identity::parse(given).ok() == Some(server) => {}
                Some(given) => bail!(
                    "--server-identity {given} is not the server this sensor is paired with ({server})"
                ),
            }
        }
    }
    a.dtls.check(uri.secure)?;
    if let (Some(key), Some(server)) = (&a.server_key, &a.dtls.server_identity) {
        let given =
            Identity::parse(server).map_err(|e| anyhow::anyhow!("--server-identity: {e}"))?;
        if Identity::of_key(&RustCrypto, key, b"").ok() != Some(given) {
            bail!("--server-key does not hash to --server-identity {server}");
        }
    }
    let dtls = a.dtls.timing.config()?;
    if let (Some(DtlsMode::Cert), Some(cert), None, false) = (
        a.dtls.dtls,
        &a.dtls.cert,
        &a.dtls.cert_key,
        a.print_identity,
    ) {
        // The sensor's certificate must certify its device key: with no key yet (first boot
        // or --factory-reset), no certificate can, so refuse before one is made.
        let key = match a.factory_reset {
            true => None,
            false => FileStorage::existing_key(&a.state)?,
        };
        let Some(key) = key else {
            bail!(
                "{}: a sensor's certificate must certify its device key, and this sensor has none yet (make it with --print-identity, then have it certified)",
                cert.display()
            );
        };
        a.dtls.check_own_certificate(&key)?;
    }
    // One process per state directory: two would share its sequence reservation and its
    // kept DTLS association.
    let _lock = StateLock::take(&a.state)?;
    let mut storage = FileStorage::open(&a.state)?;
    if a.factory_reset {
        storage.erase().map_err(|e| anyhow::anyhow!("{e}"))?;
        eprintln!("factory reset: key and sequence state erased; a new identity follows");
    }
    let config = DeviceConfig {
        algorithm: a.alg,
        format: a.format,
        lifetime: Duration::from_secs(u64::from(a.lifetime)),
        lsb_bits: a.lsb_bits,
        confirm_every: a.confirm_every,
        transmission,
        ..Default::default()
    };
    let mut device = Device::boot(
        RustCrypto,
        config,
        &mut storage,
        &mut OsRng,
        &kit,
        a.other.as_bytes(),
    )
    .map_err(|e| anyhow::anyhow!("boot: {e}"))?;
    let id = *device.identity();
    device
        .restore_pairing(&mut storage)
        .map_err(|e| anyhow::anyhow!("pairing state: {e}"))?;
    if let Some(message) = &pairing {
        match device.apply_pairing(&mut storage, message, None) {
            Ok(p) => eprintln!(
                "paired (pairing {}): server {}{}, group {}, subscriber {}",
                p.serial,
                p.server,
                p.server_uri()
                    .map(|u| format!(" at {u}"))
                    .unwrap_or_default(),
                p.group,
                p.subscriber
            ),
            Err(PairingRefusal::Replayed { serial }) => {
                eprintln!("pairing {serial} was applied already")
            }
            Err(e) => bail!("pairing message refused: {e}"),
        }
    } else if let Some(p) = device.pairing() {
        eprintln!("paired with server {} (pairing {})", p.server, p.serial);
    }
    let trusted = match (a.server_key, device.pairing()) {
        (Some(k), Some(p)) if k != p.server_key => {
            bail!(
                "--server-key is not the key of the paired server {}",
                p.server
            )
        }
        (Some(k), _) => Some(k),
        (None, p) => p.map(|p| p.server_key),
    };
    if let (Some(key), false, false) = (trusted, uri.secure, a.unsigned_answers) {
        // RFC 8387 §4.1 on coap://: only the trusted server's signed answers change state.
        device.trust_server_key(key);
        device.set_require_signed_answers(true);
    }
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
        "sensor {} ({}) starting{}",
        id.label(),
        device.public_key().algorithm().name(),
        if device.requires_signed_answers() {
            "; answers must be signed by the trusted server"
        } else {
            ""
        }
    );
    let device_key = storage_key(&mut storage)?;
    let security = a
        .dtls
        .security(uri.secure, Some((id, device_key.clone())))?;
    // The kept DTLS association's MAC key: only this device (holding its key) can have
    // written a file it takes up, and only under the same credentials (a changed --cert,
    // --ca, PSK or pinned server makes a new handshake).
    let association = uri.secure.then(|| {
        (
            a.state.join("dtls-association"),
            RustCrypto.hmac_sha256(
                &device_key.to_bytes(),
                &[b"sigil sensor dtls association", &security.binding()],
            ),
        )
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let tap = a.serve.map(|_| crate::serve::Tap::default());
    let serving = match (a.serve, &tap) {
        (Some(listen), Some(tap)) => {
            let start = crate::serve::ServeStart {
                listen,
                state: a.state.clone(),
                identity: id,
                key: device_key,
                pairing: device.pairing().copied(),
                server_identity: a
                    .dtls
                    .server_identity
                    .as_deref()
                    .map(Identity::parse)
                    .transpose()
                    .map_err(|e| anyhow::anyhow!("--server-identity: {e}"))?,
                tap: tap.clone(),
                dtls,
            };
            Some(tokio::spawn(crate::serve::serve(start, stop_rx.clone())))
        }
        _ => None,
    };
    stop_on_signal(stop_tx)?;
    let run = sensor_run(&a, uri.addr, &id, security, dtls, association, tap);
    let report = sensor::run(device, storage, run, stop_rx, |ev| {
        tracing::info!(?ev, "device event")
    })
    .await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if let Some(serving) = serving {
        // The readings stay served after the last one was published, until stopped.
        let served = serving.await.context("serve task")??;
        eprintln!("served: {}", serde_json::to_string(&served)?);
    }
    Ok(exit_code(&report))
}

/// SIGINT (Ctrl-C) or SIGTERM stops the sensor: it settles what is in flight first, prints
/// its report, and keeps its DTLS association for the next start.
fn stop_on_signal(stop_tx: tokio::sync::watch::Sender<bool>) -> Result<()> {
    crate::util::StopSignals::new()
        .context("cannot handle SIGINT and SIGTERM")?
        .forward_to(stop_tx);
    Ok(())
}

/// The loop's settings from the arguments.
fn sensor_run(
    a: &SensorArgs,
    server: std::net::SocketAddr,
    id: &Identity,
    security: sigil_client::transport::Security,
    dtls: sigil_dtls::Config,
    association: Option<(PathBuf, [u8; 32])>,
    tap: Option<crate::serve::Tap>,
) -> sensor::SensorRun {
    sensor::SensorRun {
        server,
        interval: a.interval,
        readings: a.count,
        phase: f64::from(id.as_bytes()[0]) / 40.0,
        security,
        // A kept association is taken up from a new source port: the server follows it by
        // its connection ID (RFC 9146).
        dtls: sigil_dtls::Config {
            connection_id: true,
            ..dtls
        },
        association,
        carrier: a.dtls.dtls_carrier.into(),
        tap,
    }
}

/// 0 when every reading settled as acknowledged or sent, 2 otherwise.
fn exit_code(report: &sensor::SensorReport) -> i32 {
    if report.rejected.is_empty() && report.timed_out.is_empty() {
        0
    } else {
        2
    }
}

/// Checks the common reading arguments of both kinds of sensor.
fn check_reading_args(a: &SensorArgs) -> Result<()> {
    if a.interval.is_zero() {
        bail!("--interval must be above zero");
    }
    if a.lifetime < 60 {
        bail!("--lifetime must be at least 60 seconds (RFC 9176)");
    }
    if a.count == Some(0) {
        bail!("--count must be at least 1");
    }
    Ok(())
}

/// `--psk-only`: the node has its identity and PSK from provisioning, no key pair; it
/// registers and publishes over its own coaps:// PSK session (`sigil_device::PskNode`).
async fn run_psk_only(
    a: SensorArgs,
    mode: PskOnly,
    transmission: sigil_coap::TransmissionParameters,
) -> Result<i32> {
    check_reading_args(&a)?;
    let refused = [
        (a.serve.is_some(), "--serve"),
        (a.pairing.is_some(), "--pairing"),
        (a.kit.is_some(), "--kit"),
        (!a.other.is_empty(), "--other"),
        (a.print_identity, "--print-identity"),
        (a.lsb_bits.is_some(), "--lsb-bits"),
        (a.format != ReadingFormat::Cose, "--format"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(given, _)| *given) {
        bail!("{flag} needs a key pair; a --psk-only node has none");
    }
    let server = a.server.as_deref().unwrap_or(DEFAULT_SERVER);
    let uri = parse_uri(server).with_context(|| format!("--server {server}"))?;
    if !uri.secure || !matches!(a.dtls.dtls, Some(DtlsMode::Psk | DtlsMode::EcdhePsk)) {
        bail!("a --psk-only node registers over its own PSK session: give a coaps:// --server and --dtls psk (or ecdhe-psk)");
    }
    let id = a
        .node_identity
        .as_deref()
        .context("--psk-only needs --node-identity (as `sigil provision psk-node` printed it)")
        .and_then(|t| Identity::parse(t).map_err(|e| anyhow::anyhow!("--node-identity: {e}")))?;
    if a.dtls
        .psk_identity
        .as_deref()
        .is_some_and(|p| p != id.to_string())
    {
        bail!("--psk-identity must be the node identity's text ({id}) or left out");
    }
    let psk = a.dtls.psk_key()?;
    a.dtls.check(uri.secure)?;
    let dtls = a.dtls.timing.config()?;
    // The PSK identity is the node identity's text, as the server looks it up.
    let security = sigil_client::transport::Security::Psk {
        identity: id.to_string().into_bytes(),
        key: psk.clone(),
        ecdhe: a.dtls.dtls == Some(DtlsMode::EcdhePsk),
    };
    let _lock = StateLock::take(&a.state)?;
    let mut storage = FileStorage::open(&a.state)?;
    if a.factory_reset {
        storage.erase().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let config = sigil_device::PskConfig {
        mode: match mode {
            PskOnly::Mac => sigil_device::PskMode::Mac,
            PskOnly::Session => sigil_device::PskMode::Session,
        },
        lifetime: Duration::from_secs(u64::from(a.lifetime)),
        confirm_every: a.confirm_every,
        transmission,
        ..Default::default()
    };
    let node = sigil_device::PskNode::boot(RustCrypto, config, id, &psk, &mut storage, &mut OsRng)
        .map_err(|e| anyhow::anyhow!("boot: {e}"))?;
    eprintln!(
        "PSK-only node {} ({}) starting",
        id.label(),
        match mode {
            PskOnly::Mac => "MACed readings",
            PskOnly::Session => "readings protected by its DTLS session only",
        }
    );
    // The kept association is MACed under a key only this node (holding the PSK) derives,
    // bound to its credentials as a signing sensor's is.
    let association = Some((
        a.state.join("dtls-association"),
        RustCrypto.hmac_sha256(
            &psk,
            &[b"sigil psk node dtls association", &security.binding()],
        ),
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    stop_on_signal(stop_tx)?;
    let run = sensor_run(&a, uri.addr, &id, security, dtls, association, None);
    let report = sensor::run(sensor::PskSensor::new(node), storage, run, stop_rx, |ev| {
        tracing::info!(?ev, "node event")
    })
    .await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(exit_code(&report))
}

/// The server URI of a sensor without `--server`.
const DEFAULT_SERVER: &str = "coap://127.0.0.1:5683";

/// The server URI to use: `--server`, else the pairing's, else [`DEFAULT_SERVER`]. A
/// `--server` that names another address than the pairing's is used, with a warning: the URI
/// only locates the server, the pinned identity (or key) is what the sensor trusts.
fn server_uri(given: Option<&str>, paired: Option<&sigil_ace::Pairing>) -> Result<String> {
    let from_pairing = paired.and_then(|p| p.server_uri());
    Ok(match (given, from_pairing) {
        (Some(given), Some(paired_uri)) => {
            let same = match (parse_uri(given), parse_uri(paired_uri)) {
                (Ok(g), Ok(p)) => g.addr == p.addr && g.secure == p.secure,
                _ => given == paired_uri,
            };
            if !same {
                eprintln!(
                    "warning: --server {given} overrides the server URI of this sensor's pairing ({paired_uri}); the paired server's identity is still the one trusted"
                );
            }
            given.to_string()
        }
        (Some(given), None) => given.to_string(),
        (None, Some(paired_uri)) => {
            eprintln!("server {paired_uri} (from the pairing)");
            paired_uri.to_string()
        }
        (None, None) => DEFAULT_SERVER.to_string(),
    })
}

/// The pairing a sensor has, read without changing its state: the stored pairing, or else
/// the one `message` would apply (opened with the key already in `state`).
fn paired_with(
    state: &std::path::Path,
    message: Option<&[u8]>,
    kit: &[PublicKey],
    other: &[u8],
) -> Result<Option<sigil_ace::Pairing>> {
    if let Some(p) = FileStorage::existing_pairing(state)? {
        return Ok(Some(p));
    }
    let (Some(message), Some(key)) = (message, FileStorage::existing_key(state)?) else {
        return Ok(None);
    };
    let public = RustCrypto
        .public_key(&key)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let identity = if kit.is_empty() {
        Identity::of_key(&RustCrypto, &public, other)
    } else {
        Identity::of_member(&RustCrypto, &public, kit)
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let pairing = sigil_ace::open_pairing(message, &key, &identity, None, &RustCrypto)
        .map_err(|e| anyhow::anyhow!("pairing message refused: {e}"))?;
    Ok(Some(pairing))
}

/// A pairing message file: hex text (as `sigil provision pair` prints it) or the bytes.
fn read_pairing(path: &std::path::Path) -> Result<Vec<u8>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("cannot read --pairing {}", path.display()))?;
    let message = match std::str::from_utf8(&bytes).ok().map(str::trim) {
        Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit()) => {
            hex::decode(text)
                .with_context(|| format!("--pairing {}: odd-length hex", path.display()))?
        }
        _ => bytes,
    };
    if message.len() > sigil_ace::MAX_PAIRING_LEN {
        bail!(
            "--pairing {}: {} bytes, longer than a pairing message can be ({})",
            path.display(),
            message.len(),
            sigil_ace::MAX_PAIRING_LEN
        );
    }
    Ok(message)
}

/// The device's own signing key (its DTLS raw public key credential).
pub fn storage_key(storage: &mut FileStorage) -> Result<SecretKey> {
    storage
        .load_key()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .context("no device key")
}
