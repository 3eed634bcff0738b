//! `sigil identity`: identities, group identities and label forms (RFC 8387 §4, §4.1).

use crate::args::parse_key;
use crate::storage::FileStorage;
use anyhow::{bail, Context, Result};
use clap::Args;
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey};
use sigil_device::DeviceStorage;
use sigil_identity::Identity;
use std::path::PathBuf;

#[derive(Args)]
pub struct IdentityArgs {
    /// Public key(s) as `alg:hex` (alg: ed25519 or p256). One key: a device identity; with
    /// --group: the group identity of all keys, and each member's kit-bound identity.
    #[arg(long = "key")]
    pub keys: Vec<String>,
    /// A sensor state directory instead of --key.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Compute the group identity of the keys (RFC 8387 §4.1).
    #[arg(long)]
    pub group: bool,
    /// Other information O, as text.
    #[arg(long, default_value = "")]
    pub other: String,
    /// As JSON (what, identity, label, short label).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: IdentityArgs) -> Result<i32> {
    let mut keys: Vec<PublicKey> = a
        .keys
        .iter()
        .map(|k| parse_key(k).with_context(|| format!("--key {k}")))
        .collect::<Result<_>>()?;
    if let Some(dir) = &a.state {
        let mut s = FileStorage::open(dir)?;
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
            let others = crate::demo::kit_members_except(&keys, i);
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
