//! `sigil provision`: the authorized identity list of a server's database, DTLS pre-shared
//! keys, and pairing messages for freshly labelled devices (RFC 8387 §4.1).

use crate::args::{parse_key, read_key_file};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use sigil_ace::{seal_pairing, PairingContent, MAX_PAIRING_LEN};
use sigil_client::os::OsRng;
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_identity::Identity;
use std::path::PathBuf;

#[derive(Args)]
pub struct ProvisionArgs {
    /// The server's database. `add` and `import` create it if it does not exist; the other
    /// actions refuse a path where there is none. Input is checked before the database is
    /// opened, so a refused command creates nothing.
    #[arg(long, default_value = "sigil.db")]
    pub db: PathBuf,
    #[command(subcommand)]
    pub action: ProvisionAction,
}

#[derive(Subcommand)]
pub enum ProvisionAction {
    /// Add one identity (any label form). A revoked identity stays revoked unless
    /// --reinstate is given.
    Add {
        /// The identity, in any label form (hex, base32 label, short label).
        identity: String,
        /// It is a group (kit) identity.
        #[arg(long)]
        group: bool,
        /// A name for the operator, shown by `list`.
        #[arg(long, default_value = "")]
        label: String,
        /// Re-activate the identity if it was revoked.
        #[arg(long)]
        reinstate: bool,
    },
    /// Import identities from a text file as scanned from labels or a kit's box. Revoked
    /// identities it names are skipped (and listed) unless --reinstate is given.
    Import {
        /// The text file: one identity a line, optionally `device` or `group` and a label
        /// after it; `#` starts a comment.
        file: PathBuf,
        /// Re-activate the revoked identities the file names.
        #[arg(long)]
        reinstate: bool,
    },
    /// List the authorized identities.
    List {
        /// As JSON (identity, kind, label, added and revoked times).
        #[arg(long)]
        json: bool,
    },
    /// Revoke an identity: nothing from it is accepted any more, a running server ends its
    /// coaps:// sessions and no longer lists or serves its readings. `add` and `import` do not
    /// re-activate it; `add --reinstate` does. An identity not on the list (a kit member) is
    /// recorded as revoked, so its kit no longer vouches for it.
    Revoke {
        /// The identity to revoke, in any label form.
        identity: String,
    },
    /// Give an authorized identity a DTLS pre-shared key (coaps:// with --dtls psk); prints
    /// the key. The PSK identity is the identity's text.
    Psk {
        /// The authorized identity that gets the key, in any label form.
        identity: String,
        /// The key in hex (16-64 bytes); default: 16 random bytes.
        #[arg(long)]
        key: Option<String>,
    },
    /// Add a node that has only a pre-shared key (no key pair, so no I = h(P|O)): a random
    /// identity, authorized, with a random PSK (or --key). Prints `IDENTITY PSK` (hex); give
    /// both to the node (`sigil sensor --psk-only`). It registers over its own coaps://
    /// session and publishes MACed or session-protected readings (docs/security.md).
    PskNode {
        /// A name for the operator, shown by `list`.
        #[arg(long, default_value = "")]
        label: String,
        /// The key in hex (16-64 bytes); default: 16 random bytes.
        #[arg(long)]
        key: Option<String>,
    },
    /// Let READER read the readings of OBJECT: a device, or every device of a group (kit).
    /// Enforced by a server started with --authorize-reads, for coaps:// sessions of READER.
    Grant {
        /// The reader's identity (its DTLS session's identity).
        reader: String,
        /// The device or group (kit) identity it may read.
        object: String,
    },
    /// Withdraw a grant.
    Ungrant {
        /// The reader's identity.
        reader: String,
        /// The device or group identity it may no longer read.
        object: String,
    },
    /// List the read grants (reader, then what it may read).
    Grants,
    /// Make a pairing message (RFC 8387 §4.1) for a freshly labelled device: its trusted
    /// server, group and default subscriber, signed with the server's key and encrypted to the
    /// device's (P-256 or Ed25519); `sigil sensor --pairing FILE` applies it once. Records
    /// the pairing in --db, which must exist (it is never created here): the subscriber is
    /// granted read of the device, and readers granted the group read the device.
    Pair(PairArgs),
    /// List the pairings made with `pair` (the latest per device): device, serial, group,
    /// subscriber and server URI.
    Pairings,
}

/// Checks a `--key` argument before any database is touched.
fn check_key_arg(key: Option<&str>) -> Result<()> {
    if let Some(h) = key {
        let k = hex::decode(h.trim()).context("--key is not hex")?;
        sigil_server::provision::check_psk(&k)?;
    }
    Ok(())
}

/// The `--key` given, or 16 random bytes.
fn key_or_random(key: Option<&str>) -> Result<Vec<u8>> {
    Ok(match key {
        Some(h) => hex::decode(h.trim()).context("--key is not hex")?,
        None => {
            let mut k = vec![0u8; 16];
            getrandom::fill(&mut k).map_err(|e| anyhow::anyhow!("{e}"))?;
            k
        }
    })
}

/// The one-line report of an import: how many were added, already there, and which revoked
/// identities were skipped or reinstated.
fn import_summary(r: &sigil_server::provision::Imported) -> String {
    let ids = |v: &[Identity]| {
        v.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut s = format!(
        "imported {} identities ({} already authorized",
        r.added, r.present
    );
    if !r.reinstated.is_empty() {
        s += &format!(
            "; {} reinstated: {}",
            r.reinstated.len(),
            ids(&r.reinstated)
        );
    }
    if !r.skipped_revoked.is_empty() {
        s += &format!(
            "; {} revoked, skipped: use --reinstate to re-activate: {}",
            r.skipped_revoked.len(),
            ids(&r.skipped_revoked)
        );
    }
    s + ")"
}

/// Unix seconds as an RFC 3339 UTC time.
fn utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn parse(text: &str) -> Result<Identity> {
    Identity::parse(text).map_err(|e| anyhow::anyhow!("{e}"))
}

#[derive(Args)]
pub struct PairArgs {
    /// The device's identity from its label (any label form); checked against --device-key.
    pub identity: String,
    /// The device's public key as `p256:hex` or `ed25519:hex` (`sigil sensor
    /// --print-identity` shows it). The message is encrypted to it: ECDH on P-256, or X25519
    /// with an Ed25519 key's Montgomery form.
    #[arg(long)]
    pub device_key: String,
    /// Other information O of the device's identity I = h(P|O), as text.
    #[arg(long, default_value = "")]
    pub device_other: String,
    /// The server's secret key file (`alg:hex`, ed25519 or p256): it signs the message, and
    /// the device will trust the identity of its public key. Default: the server's own DTLS
    /// key from --db (made at its first start), so the paired device pins the identity
    /// `--server-identity` would name.
    #[arg(long)]
    pub server_key: Option<PathBuf>,
    /// Other information O of the server's identity, as text.
    #[arg(long, default_value = "")]
    pub server_other: String,
    /// The server's URI to give the device (at most 64 bytes).
    #[arg(long)]
    pub server_uri: Option<String>,
    /// The group identity the device joins: readers granted the group (`grant READER GROUP`)
    /// read this device, as they read a kit's members.
    #[arg(long)]
    pub group: String,
    /// The identity of the device's default subscriber: granted read of the device in --db
    /// now (as `grant SUBSCRIBER DEVICE`; `ungrant` withdraws it).
    #[arg(long)]
    pub subscriber: String,
    /// The pairing serial; default: the current Unix time in seconds.
    #[arg(long)]
    pub serial: Option<u64>,
    /// Write the message to this file (binary); default: hex on standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

fn pair(db: &std::path::Path, a: PairArgs) -> Result<i32> {
    let identity = Identity::parse(&a.identity).map_err(|e| anyhow::anyhow!("{e}"))?;
    let device_key = parse_key(&a.device_key).context("--device-key")?;
    let computed = Identity::of_key(&RustCrypto, &device_key, a.device_other.as_bytes())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if computed != identity {
        bail!("--device-key does not hash to {identity} (with --device-other {:?}): check the label and the key", a.device_other);
    }
    let group = Identity::parse(&a.group)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("--group")?;
    let subscriber = Identity::parse(&a.subscriber)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("--subscriber")?;
    // The pairing is recorded in the server's database: its subscriber's grant and its group
    // take effect there. The database is never created here.
    if !db.exists() {
        bail!(
            "no database at {} to record the pairing in (its subscriber is granted there, its group recorded): give the server's --db",
            db.display()
        );
    }
    let store = sigil_server::Store::open(db)
        .with_context(|| format!("cannot open database {}", db.display()))?;
    for (who, id) in [
        ("device", &identity),
        ("subscriber", &subscriber),
        ("group", &group),
    ] {
        if let Some(at) = store.revoked_at(id)? {
            bail!("the {who} {id} was revoked at {}: a pairing would not take effect (`sigil provision add {id} --reinstate` re-activates it)", utc(at));
        }
    }
    let server_key = match &a.server_key {
        Some(path) => read_key_file(path).context("--server-key")?,
        None => database_server_key(db)?,
    };
    let server_public = RustCrypto
        .public_key(&server_key)
        .map_err(|e| anyhow::anyhow!("--server-key: {e}"))?;
    let server = Identity::of_key(&RustCrypto, &server_public, a.server_other.as_bytes())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let serial = match a.serial {
        Some(s) => s,
        None => u64::try_from(sigil_client::os::unix_now().as_secs())
            .context("the clock is before 1970")?,
    };
    let content = PairingContent {
        device: identity,
        serial,
        server,
        server_other: a.server_other.as_bytes(),
        server_uri: a.server_uri.as_deref(),
        group,
        subscriber,
    };
    let mut out = [0u8; MAX_PAIRING_LEN];
    let n = seal_pairing(
        &content,
        &device_key,
        &server_key,
        &RustCrypto,
        &mut OsRng,
        &mut out,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let new_grant = store.record_pairing(&sigil_server::store::PairingRow {
        device: identity,
        serial,
        group,
        subscriber,
        server_uri: a.server_uri.clone(),
        paired_at: sigil_client::os::unix_now().as_secs(),
    })?;
    match &a.out {
        Some(path) => {
            std::fs::write(path, &out[..n])
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!(
                "pairing message {serial} for {identity} ({n} bytes) in {}; server {server}",
                path.display()
            );
        }
        None => println!("{}", hex::encode(&out[..n])),
    }
    eprintln!(
        "recorded in {}: subscriber {subscriber} {} read {identity}; {identity} is in group {group} for read grants",
        db.display(),
        if new_grant { "may now" } else { "already could" }
    );
    Ok(0)
}

/// The server's DTLS key as `sigil server` keeps it in its database (never created here).
fn database_server_key(db: &std::path::Path) -> Result<SecretKey> {
    if !db.exists() {
        bail!(
            "no database at {} to take the server's key from: give --server-key FILE, or start `sigil server` once",
            db.display()
        );
    }
    let store = sigil_server::Store::open(db)
        .with_context(|| format!("cannot open database {}", db.display()))?;
    let (alg, secret) = store.server_key("dtls")?.with_context(|| {
        format!(
            "{} holds no server key yet: start `sigil server --dtls-listen …` once, or give --server-key FILE",
            db.display()
        )
    })?;
    let alg = SignatureAlgorithm::from_cose(alg)
        .context("the database's server key: unknown algorithm")?;
    SecretKey::from_bytes(alg, &secret)
        .map_err(|e| anyhow::anyhow!("the database's server key: {e}"))
}

pub fn run(a: ProvisionArgs) -> Result<i32> {
    let a = match a.action {
        ProvisionAction::Pair(p) => return pair(&a.db, p),
        action => ProvisionArgs { db: a.db, action },
    };
    // Validate the input before the database is opened (or created): a refused identity,
    // list or key leaves no file behind. Only `add` and `import` create a missing database.
    let creates = match &a.action {
        ProvisionAction::Add { identity, .. } => {
            Identity::parse(identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            true
        }
        ProvisionAction::Import { file, .. } => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            for e in sigil_identity::list::entries(&text) {
                e.map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            }
            true
        }
        ProvisionAction::Psk { identity, key } => {
            Identity::parse(identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            check_key_arg(key.as_deref())?;
            false
        }
        ProvisionAction::PskNode { key, .. } => {
            check_key_arg(key.as_deref())?;
            true
        }
        ProvisionAction::Revoke { identity } => {
            Identity::parse(identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            false
        }
        ProvisionAction::Grant { reader, object } | ProvisionAction::Ungrant { reader, object } => {
            for id in [reader, object] {
                Identity::parse(id).map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            false
        }
        ProvisionAction::List { .. } | ProvisionAction::Grants | ProvisionAction::Pairings => false,
        // Taken before any database is looked for (above).
        ProvisionAction::Pair(_) => false,
    };
    if !creates && !a.db.exists() {
        bail!(
            "no database at {} (`sigil provision add` or `import` creates one)",
            a.db.display()
        );
    }
    let store = sigil_server::Store::open(&a.db)
        .with_context(|| format!("cannot open database {}", a.db.display()))?;
    let now = sigil_client::os::unix_now().as_secs();
    match a.action {
        ProvisionAction::Add {
            identity,
            group,
            label,
            reinstate,
        } => {
            use sigil_server::provision::Added;
            let id = Identity::parse(&identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            let kind = if group {
                sigil_server::store::IdentityKind::Group
            } else {
                sigil_server::store::IdentityKind::Device
            };
            let entry = sigil_server::provision::Entry {
                identity: id,
                kind,
                label,
            };
            let kind = kind.as_str();
            match sigil_server::provision::add(&store, &entry, now, reinstate)? {
                Added::New => println!("added {id} ({kind})"),
                Added::Present => println!("already authorized {id} ({kind})"),
                Added::Reinstated => println!("reinstated {id} ({kind}): it is active again"),
                Added::Revoked { at } => bail!(
                    "{id} was revoked at {} and stays revoked: use --reinstate to re-activate it",
                    utc(at)
                ),
            }
        }
        ProvisionAction::Import { file, reinstate } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let r = sigil_server::provision::import(&store, &text, now, reinstate)?;
            println!("{}", import_summary(&r));
        }
        ProvisionAction::List { json } => {
            let rows = store.list_identities()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                for r in rows {
                    let id = Identity::parse(&r.identity).map_err(|e| anyhow::anyhow!("{e}"))?;
                    let state = match r.revoked_at {
                        Some(at) => format!("revoked {}", utc(at)),
                        None => "active".to_string(),
                    };
                    println!(
                        "{}  {:<6} {:<8} {}",
                        id.label(),
                        r.kind.as_str(),
                        state,
                        r.label
                    );
                }
            }
        }
        ProvisionAction::Psk { identity, key } => {
            let id = Identity::parse(&identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            let key = key_or_random(key.as_deref())?;
            sigil_server::provision::set_psk(&store, &id, &key, now)?;
            println!("{}", hex::encode(&key));
        }
        ProvisionAction::PskNode { label, key } => {
            let key = key_or_random(key.as_deref())?;
            let id = sigil_server::provision::add_psk_node(&store, &label, &key, now, &mut OsRng)?;
            println!("{id} {}", hex::encode(&key));
        }
        ProvisionAction::Revoke { identity } => {
            let id = Identity::parse(&identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            if store.revoke_identity(&id, now)? {
                println!("revoked {id}");
            } else if let Some(at) = store.revoked_at(&id)? {
                bail!("{id} was already revoked at {}", utc(at));
            } else if store.revoke_unlisted(&id, now)? {
                println!("revoked {id} (it was not on the list: recorded as revoked, so it is refused even through a kit that lists it)");
            } else {
                bail!("{id} could not be revoked");
            }
        }
        ProvisionAction::Grant { reader, object } => {
            let (reader, object) = (parse(&reader)?, parse(&object)?);
            let authorized = store.authorized()?;
            for id in [&reader, &object] {
                if !authorized.contains_key(id) {
                    if store.revoked_at(id)?.is_some() {
                        bail!("{id} is revoked: a grant would not take effect (`sigil provision add {id} --reinstate` re-activates it)");
                    }
                    bail!("{id} is not an active identity (`sigil provision add` it first)");
                }
            }
            store.grant_read(&reader, &object, now)?;
            println!("{reader} may read {object}");
        }
        ProvisionAction::Ungrant { reader, object } => {
            let (reader, object) = (parse(&reader)?, parse(&object)?);
            if !store.revoke_read(&reader, &object)? {
                bail!("{reader} had no grant for {object}");
            }
            println!("{reader} may no longer read {object}");
        }
        ProvisionAction::Grants => {
            for (reader, object) in store.read_grants()? {
                println!("{reader}  {object}");
            }
        }
        ProvisionAction::Pairings => {
            for p in store.pairings()? {
                println!(
                    "{}  serial {}  group {}  subscriber {}  {}",
                    p.device,
                    p.serial,
                    p.group,
                    p.subscriber,
                    p.server_uri.as_deref().unwrap_or("-")
                );
            }
        }
        ProvisionAction::Pair(p) => return pair(&a.db, p),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revocation_times_are_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc(951_825_600), "2000-02-29T12:00:00Z");
    }
}
