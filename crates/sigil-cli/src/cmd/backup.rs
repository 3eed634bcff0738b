//! `sigil backup`: a consistent copy of a server's database, also while the server runs
//! (SQLite's online backup, in one step under one read snapshot). The copy is created 0600,
//! like the database: it holds the server's private keys and every PSK. Stored DTLS sessions
//! are left out of it: a server restored from it would seal with write reservations the live
//! server has used since (AEAD nonce reuse); their clients make a new handshake.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct BackupArgs {
    /// The server's database (it may be in use by a running server).
    #[arg(long, default_value = "sigil.db")]
    pub db: PathBuf,
    /// The copy to write; a file that exists already is never overwritten.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
}

pub fn run(a: BackupArgs) -> Result<i32> {
    if !a.db.is_file() {
        anyhow::bail!("no database at {} (give the server's --db)", a.db.display());
    }
    if a.out.exists() {
        anyhow::bail!(
            "--out {} exists already; a backup never overwrites a file",
            a.out.display()
        );
    }
    let s = sigil_server::Store::backup_to(&a.db, &a.out).map_err(|e| {
        anyhow::anyhow!(
            "cannot back up {} to {}: {e}",
            a.db.display(),
            a.out.display()
        )
    })?;
    println!(
        "backed up {} to {}: {} readings, {} identities, {} pages; integrity check ok; \
         {} stored DTLS sessions left out (clients make a new handshake after a restore)",
        a.db.display(),
        a.out.display(),
        s.readings,
        s.identities,
        s.pages,
        s.dtls_sessions_left_out
    );
    Ok(0)
}
