//! `sigil verify`: one signed reading from a file, against a key and identity.

use crate::args::{parse_format, parse_key};
use anyhow::{Context, Result};
use clap::Args;
use sigil_crypto::RustCrypto;
use sigil_identity::Identity;
use sigil_objects::ReadingFormat;
use std::path::PathBuf;

#[derive(Args)]
pub struct VerifyArgs {
    /// File with the signed reading.
    pub file: PathBuf,
    /// The reading's format: cose (COSE_Sign1) or jws.
    #[arg(long, default_value = "cose", value_parser = parse_format)]
    pub format: ReadingFormat,
    /// The signer's public key, `alg:hex`.
    #[arg(long)]
    pub key: String,
    /// Expected identity; default: computed from the key.
    #[arg(long)]
    pub identity: Option<String>,
    /// Full sequence number (needed for low-bits readings).
    #[arg(long)]
    pub seq: Option<u64>,
}

pub fn run(a: VerifyArgs) -> Result<i32> {
    let bytes =
        std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    let key = parse_key(&a.key)?;
    let id = match &a.identity {
        Some(i) => Identity::parse(i).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => Identity::of_key(&RustCrypto, &key, b"").map_err(|e| anyhow::anyhow!("{e}"))?,
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
