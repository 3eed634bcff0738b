//! `sigil provision`: the authorized identity list of a server's database, and DTLS
//! pre-shared keys.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
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
    /// Let READER read the readings of OBJECT: a device, or every device of a group (kit).
    /// Enforced by a server started with --authorize-reads, for coaps:// sessions of READER.
    Grant { reader: String, object: String },
    /// Withdraw a grant.
    Ungrant { reader: String, object: String },
    /// List the read grants (reader, then what it may read).
    Grants,
}

fn parse(text: &str) -> Result<Identity> {
    Identity::parse(text).map_err(|e| anyhow::anyhow!("{e}"))
}

pub fn run(a: ProvisionArgs) -> Result<i32> {
    // Validate the input before the database is opened (or created): a refused identity,
    // list or key leaves no file behind. Only `add` and `import` create a missing database.
    let creates = match &a.action {
        ProvisionAction::Add { identity, .. } => {
            Identity::parse(identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            true
        }
        ProvisionAction::Import { file } => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            for e in sigil_identity::list::entries(&text) {
                e.map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            }
            true
        }
        ProvisionAction::Psk { identity, key } => {
            Identity::parse(identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            if let Some(h) = key {
                let k = hex::decode(h.trim()).context("--key is not hex")?;
                sigil_server::provision::check_psk(&k)?;
            }
            false
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
        ProvisionAction::List { .. } | ProvisionAction::Grants => false,
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
            let key = match key {
                Some(h) => hex::decode(h.trim()).context("--key is not hex")?,
                None => {
                    let mut k = vec![0u8; 16];
                    getrandom::fill(&mut k).map_err(|e| anyhow::anyhow!("{e}"))?;
                    k
                }
            };
            sigil_server::provision::set_psk(&store, &id, &key, now)?;
            println!("{}", hex::encode(&key));
        }
        ProvisionAction::Revoke { identity } => {
            let id = Identity::parse(&identity).map_err(|e| anyhow::anyhow!("{e}"))?;
            if !store.revoke_identity(&id, now)? {
                bail!("{id} is not an active identity");
            }
            println!("revoked {id}");
        }
        ProvisionAction::Grant { reader, object } => {
            let (reader, object) = (parse(&reader)?, parse(&object)?);
            let authorized = store.authorized()?;
            for id in [&reader, &object] {
                if !authorized.contains_key(id) {
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
    }
    Ok(0)
}
