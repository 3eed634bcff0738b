//! `sigil diet`: one CryptoDiet node (`sigil-diet`) over real UDP. A configured neighbour list
//! stands in for the routing table (`iot-cryptodiet.md` §5.2); hellos are trusted when the
//! signing key's identity is on the identity list or is the one configured for that address.
//! Every `--interval` each established neighbour gets a message; received, verified messages
//! are printed. Keys and the epoch live in the state directory; the epoch goes up at each start
//! (docs/security.md, "The CryptoDiet scheme").

use crate::args::{parse_duration, parse_key};
use anyhow::{bail, Context, Result};
use clap::Args;
use sigil_client::os::OsRng;
use sigil_crypto::{PublicKey, RustCrypto, SignatureAlgorithm};
use sigil_diet::{Config, Error as DietError, Node, NodeKeys, Phase, Received};
use sigil_identity::Identity;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::net::UdpSocket;

/// Room in the neighbour table.
const TABLE: usize = 32;
/// The longest message text (one datagram, well under the IPv6 minimum MTU with overhead).
const MAX_MESSAGE: usize = 1024;
const KEYS_FILE: &str = "diet-keys";
const EPOCH_FILE: &str = "diet-epoch";

#[derive(Args)]
pub struct DietArgs {
    /// State directory: the node's two key pairs and its epoch (created on first use).
    #[arg(long)]
    pub state: PathBuf,
    /// Print this node's identity (the hash of its signing key) and exit.
    #[arg(long)]
    pub print_identity: bool,
    /// UDP address to listen on: an IP address or a host name, with the port.
    #[arg(long, default_value = "127.0.0.1:5700")]
    pub listen: String,
    /// A neighbour, `ADDR=IDENTITY` or `ADDR=p256:HEX` (its signing key); repeatable.
    #[arg(long = "neighbour")]
    pub neighbours: Vec<String>,
    /// A file of neighbours, one `ADDR=IDENTITY-or-key` per line (`#` starts a comment).
    #[arg(long)]
    pub neighbours_file: Option<PathBuf>,
    /// Identity list (as for `sigil app --trust`) of nodes whose hellos are accepted from any
    /// address.
    #[arg(long)]
    pub trust: Option<PathBuf>,
    /// Time between messages to each established neighbour.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Message text; each `%n` in it is replaced by the message number.
    #[arg(long, default_value = "message %n")]
    pub message: String,
    /// Stop after this long (default: run until killed).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// First hello retransmission timeout (doubling up to 32 s, 8 hellos).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub hello_timeout: Duration,
    /// One JSON object per line on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A configured neighbour: its address and the identity expected there.
struct Neighbour {
    addr: SocketAddr,
    identity: Identity,
}

fn parse_neighbour(spec: &str) -> Result<Neighbour> {
    let (addr, who) = spec
        .split_once('=')
        .with_context(|| format!("neighbour '{spec}': expected ADDR=IDENTITY or ADDR=p256:HEX"))?;
    let addr = crate::util::resolve_addr(addr.trim(), "neighbour")
        .with_context(|| format!("neighbour '{spec}'"))?;
    let who = who.trim();
    let identity = if who.contains(':') && who.starts_with(|c: char| c.is_ascii_alphabetic()) {
        let key = parse_key(who).with_context(|| format!("neighbour '{spec}'"))?;
        if key.algorithm() != SignatureAlgorithm::EcdsaP256 {
            bail!("neighbour '{spec}': CryptoDiet nodes sign with P-256 keys");
        }
        Identity::of_key(&RustCrypto, &key, b"").map_err(|e| anyhow::anyhow!("{e}"))?
    } else {
        Identity::parse(who).map_err(|e| anyhow::anyhow!("neighbour '{spec}': {e}"))?
    };
    Ok(Neighbour { addr, identity })
}

fn read_text(path: &Path, what: &str) -> Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

/// Everything the node needs, checked before any state is created.
struct Plan {
    listen: SocketAddr,
    neighbours: Vec<Neighbour>,
    trust: HashSet<Identity>,
}

fn plan(a: &DietArgs) -> Result<Plan> {
    let listen = crate::util::resolve_addr(&a.listen, "--listen")?;
    let mut specs: Vec<String> = a.neighbours.clone();
    if let Some(p) = &a.neighbours_file {
        for line in read_text(p, "neighbour file")?.lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.contains('=') {
                specs.push(line.to_string());
            } else if let Some((addr, who)) = line.split_once(char::is_whitespace) {
                specs.push(format!("{addr}={}", who.trim()));
            } else if !line.is_empty() {
                bail!(
                    "neighbour file {}: '{line}' is not ADDR=IDENTITY",
                    p.display()
                );
            }
        }
    }
    let neighbours: Vec<Neighbour> = specs
        .iter()
        .map(|s| parse_neighbour(s))
        .collect::<Result<_>>()?;
    if neighbours.len() > TABLE {
        bail!("{} neighbours; the table holds {TABLE}", neighbours.len());
    }
    let mut seen = HashSet::new();
    for n in &neighbours {
        if n.addr == listen {
            bail!("neighbour {} is this node's own address", n.addr);
        }
        if !seen.insert(n.addr) {
            bail!("neighbour {} is listed twice", n.addr);
        }
    }
    let trust = match &a.trust {
        Some(p) => sigil_client::app::load_trust(&read_text(p, "identity list")?)
            .with_context(|| format!("identity list {}", p.display()))?,
        None => HashSet::new(),
    };
    if neighbours.is_empty() && trust.is_empty() {
        bail!("give --neighbour, --neighbours-file or --trust: a node that trusts nobody talks to nobody");
    }
    if a.interval.is_zero() || a.hello_timeout.is_zero() {
        bail!("--interval and --hello-timeout must be above zero");
    }
    if a.message.len() > MAX_MESSAGE {
        bail!(
            "--message is {} bytes; at most {MAX_MESSAGE}",
            a.message.len()
        );
    }
    Ok(Plan {
        listen,
        neighbours,
        trust,
    })
}

fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut o = fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o
            .open(&tmp)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The node's keys from the state directory, made there on first use.
fn load_or_make_keys(dir: &Path) -> Result<NodeKeys> {
    crate::storage::create_private_dir(dir)?;
    let path = dir.join(KEYS_FILE);
    if path.exists() {
        let text = read_text(&path, "key file")?;
        let mut ecdh = None;
        let mut signing = None;
        for line in text.lines() {
            let (name, hex_text) = line
                .split_once(' ')
                .context("key file: expected NAME HEX lines")?;
            let bytes: [u8; 32] = hex::decode(hex_text.trim())
                .ok()
                .and_then(|b| b.try_into().ok())
                .context("key file: a key is 64 hex digits")?;
            match name {
                "ecdh" => ecdh = Some(bytes),
                "signing" => signing = Some(bytes),
                _ => bail!("key file: unknown line '{name}'"),
            }
        }
        let (Some(e), Some(s)) = (ecdh, signing) else {
            bail!(
                "key file {}: needs an ecdh and a signing line",
                path.display()
            );
        };
        return NodeKeys::from_secrets(&RustCrypto, &e, &s)
            .map_err(|e| anyhow::anyhow!("key file {}: {e}", path.display()));
    }
    let keys = NodeKeys::generate(&RustCrypto, &mut OsRng).map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = format!(
        "ecdh {}\nsigning {}\n",
        hex::encode(keys.ecdh.secret),
        hex::encode(keys.signing.secret)
    );
    write_private(&path, text.as_bytes())?;
    Ok(keys)
}

/// Raises the stored epoch and returns it: every run's keys differ from the last run's.
fn next_epoch(dir: &Path) -> Result<u32> {
    let path = dir.join(EPOCH_FILE);
    let old: u32 = match fs::read_to_string(&path) {
        Ok(s) => s
            .trim()
            .parse()
            .with_context(|| format!("{}: not a number", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let new = old
        .checked_add(1)
        .context("epoch exhausted: make new keys")?;
    write_private(&path, format!("{new}\n").as_bytes())?;
    Ok(new)
}

fn identity_of(key: &PublicKey) -> Identity {
    Identity::of_key(&RustCrypto, key, b"").expect("no other information")
}

fn reason(e: &DietError) -> &'static str {
    match e {
        DietError::Malformed => "malformed",
        DietError::Untrusted => "untrusted",
        DietError::Reflected => "reflected",
        DietError::BadSignature => "bad-signature",
        DietError::BadTag => "bad-tag",
        DietError::NoSession => "no-session",
        DietError::Replay => "replay",
        DietError::StaleHello => "stale-hello",
        DietError::TableFull => "table-full",
        DietError::Budget => "over-budget",
        _ => "other",
    }
}

pub async fn run(a: DietArgs) -> Result<i32> {
    // Registered first: a stop at any time after this ends the node cleanly.
    let mut signals =
        crate::util::StopSignals::new().context("cannot handle SIGINT and SIGTERM")?;
    if a.print_identity {
        let me = identity_of(&load_or_make_keys(&a.state)?.signing_key());
        if a.json {
            println!("{}", serde_json::json!({ "identity": me.to_string() }));
        } else {
            println!("{me}");
        }
        return Ok(0);
    }
    let plan = plan(&a)?;
    // One process per state directory: two would run under one epoch.
    let _lock = crate::storage::StateLock::take(&a.state)?;
    let keys = load_or_make_keys(&a.state)?;
    let me = identity_of(&keys.signing_key());
    let epoch = next_epoch(&a.state)?;
    let socket = UdpSocket::bind(plan.listen)
        .await
        .with_context(|| format!("cannot listen on {}", plan.listen))?;
    let config = Config {
        initial: a.hello_timeout,
        max: Duration::from_secs(32).max(a.hello_timeout),
        attempts: 8,
        ..Config::default()
    };
    let mut node: Node<RustCrypto, SocketAddr, TABLE> = Node::new(RustCrypto, keys, epoch, config);
    let expected: HashMap<SocketAddr, Identity> = plan
        .neighbours
        .iter()
        .map(|n| (n.addr, n.identity))
        .collect();
    let start = tokio::time::Instant::now();
    let now = || sigil_time::Instant::from_millis(start.elapsed().as_millis() as u64);
    for n in &plan.neighbours {
        node.add_neighbour(now(), n.addr)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let trusted = |from: &SocketAddr, key: &PublicKey| {
        let id = identity_of(key);
        match expected.get(from) {
            Some(want) => *want == id,
            None => plan.trust.contains(&id),
        }
    };
    let emit = |v: serde_json::Value, text: String| {
        if a.json {
            println!("{v}");
        } else {
            println!("{text}");
        }
    };
    emit(
        serde_json::json!({"event": "listening", "addr": socket.local_addr()?.to_string(), "identity": me.to_string(), "epoch": epoch}),
        format!("node {me} (epoch {epoch}) on {}", socket.local_addr()?),
    );
    let deadline = a.duration.map(|d| start + d);
    let mut next_message = start + a.interval;
    let mut sent = 0u64;
    let mut said: HashMap<&'static str, (Option<tokio::time::Instant>, u64)> = HashMap::new();
    let mut buf = vec![0u8; 2048];
    let mut out = vec![0u8; 2048];
    let mut plain = vec![0u8; 2048];
    loop {
        while let Some(t) = node.poll_transmit(now(), &mut out) {
            if let Err(e) = socket.send_to(&out[..t.len], t.to).await {
                tracing::warn!("send to {}: {e}", t.to);
            }
        }
        let wake = node
            .poll_timeout()
            .map(|t| start + Duration::from_millis(t.as_millis()))
            .unwrap_or(next_message)
            .min(next_message);
        let wake = deadline.map_or(wake, |d| wake.min(d));
        tokio::select! {
            r = socket.recv_from(&mut buf) => {
                let (len, from) = match r {
                    Ok(x) => x,
                    Err(e) => { tracing::warn!("receive: {e}"); continue; }
                };
                let before = node.phase(&from);
                match node.handle(now(), from, &buf[..len], trusted, &mut plain) {
                    Ok(Received::Message { len }) => {
                        let id = node.peer_key(&from).map(identity_of);
                        let text = String::from_utf8_lossy(&plain[..len]).into_owned();
                        let id = id.map(|i| i.to_string()).unwrap_or_default();
                        emit(serde_json::json!({"event": "message", "from": from.to_string(), "identity": id, "text": text}),
                             format!("{from} ({id}): {text}"));
                    }
                    // Answered with a challenge; counted, not printed (a replayer decides how
                    // often).
                    Ok(Received::Challenged) => {}
                    Ok(Received::Moved { .. }) => {
                        let id = node.peer_key(&from).map(identity_of).map(|i| i.to_string()).unwrap_or_default();
                        emit(serde_json::json!({"event": "moved", "peer": from.to_string(), "identity": id}),
                             format!("{id} moved to {from}"));
                    }
                    Ok(Received::Hello { .. }) => {
                        if before != Some(Phase::Established) {
                            let id = node.peer_key(&from).map(identity_of).map(|i| i.to_string()).unwrap_or_default();
                            emit(serde_json::json!({"event": "established", "peer": from.to_string(), "identity": id}),
                                 format!("established with {from} ({id})"));
                        }
                    }
                    // Refusals come from as many addresses as an attacker holds: one line a
                    // second per reason at most, with how many it stands for (all are counted).
                    Err(e) => {
                        tracing::debug!("refused a datagram from {from}: {e}");
                        let t = tokio::time::Instant::now();
                        let (said, quiet) = said.entry(reason(&e)).or_insert((None, 0));
                        *quiet += 1;
                        if said.is_none_or(|s| t >= s + Duration::from_secs(1)) {
                            *said = Some(t);
                            let n = std::mem::take(quiet);
                            let more = if n > 1 { format!(" ({n} since the last line)") } else { String::new() };
                            emit(serde_json::json!({"event": "refused", "from": from.to_string(), "reason": reason(&e), "count": n}),
                                 format!("refused from {from}: {e}{more}"));
                        }
                    }
                }
            }
            _ = tokio::time::sleep_until(wake) => {}
            name = signals.recv() => {
                tracing::info!(signal = name, "stopping");
                break;
            }
        }
        let t = tokio::time::Instant::now();
        if deadline.is_some_and(|d| t >= d) {
            break;
        }
        if t >= next_message {
            next_message = t + a.interval;
            let peers: Vec<SocketAddr> = node
                .neighbours()
                .filter(|(_, p)| *p == Phase::Established)
                .map(|(addr, _)| addr)
                .collect();
            for to in peers {
                sent += 1;
                // `%n`, or the older `{n}` (which clap's help cannot show: it reads it as a
                // line break).
                let text = a
                    .message
                    .replace("%n", &sent.to_string())
                    .replace("{n}", &sent.to_string());
                match node.seal(&to, text.as_bytes(), &mut out) {
                    Ok(n) => {
                        if let Err(e) = socket.send_to(&out[..n], to).await {
                            tracing::warn!("send to {to}: {e}");
                        }
                    }
                    Err(e) => tracing::warn!("cannot seal for {to}: {e}"),
                }
            }
        }
    }
    let c = node.counters();
    let established = node
        .neighbours()
        .filter(|(_, p)| *p == Phase::Established)
        .count();
    emit(
        serde_json::json!({"event": "summary", "established": established,
            "hellos_sent": c.hellos_sent, "hellos_accepted": c.hellos_accepted,
            "messages_sent": c.messages_sent, "messages_accepted": c.messages_accepted,
            "challenged": c.challenged, "challenges_sent": c.challenges_sent, "moved": c.moved,
            "refused": {"malformed": c.malformed, "untrusted": c.untrusted, "reflected": c.reflected,
                "bad_signature": c.bad_signature, "bad_tag": c.bad_tag, "no_session": c.no_session,
                "replay": c.replayed, "stale_hello": c.stale_hellos, "table_full": c.table_full,
                "over_budget": c.over_budget, "other": c.other}}),
        format!("{established} neighbours established; {} messages sent, {} accepted, {} datagrams refused", c.messages_sent, c.messages_accepted, c.refused()),
    );
    Ok(0)
}
