//! The WAL's bounds: `journal_size_limit` and `wal_autocheckpoint` (set when the store opens),
//! and explicit `wal_checkpoint(TRUNCATE)` runs after a failed transaction and every
//! [`CHECKPOINT_EVERY`] commits, so that a WAL never keeps the space a full disk needs back.

use super::{Store, StoreError};

/// The WAL file is truncated to at most this many bytes after a checkpoint
/// (`PRAGMA journal_size_limit`).
pub const WAL_LIMIT_BYTES: i64 = 1024 * 1024;

/// Pages in the WAL after which a commit runs an automatic checkpoint.
pub(super) const WAL_AUTOCHECKPOINT_PAGES: i64 = 200;

/// Every this many committed transactions the store runs `wal_checkpoint(TRUNCATE)`.
const CHECKPOINT_EVERY: u32 = 64;

impl Store {
    /// Copies the WAL into the database and truncates it to zero bytes. Failures (e.g. the
    /// disk is still full, or a reader holds a snapshot) are left for the next attempt.
    pub fn checkpoint(&self) {
        self.commits.set(0);
        // Never wait for another connection's reader or writer here (TRUNCATE would otherwise
        // wait up to the busy timeout): what cannot be done now is done next time.
        let _ = self.conn.busy_timeout(std::time::Duration::ZERO);
        let r = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            });
        let _ = self.conn.busy_timeout(super::BUSY_TIMEOUT);
        match r {
            Ok((0, _, _)) => {}
            Ok((busy, log, done)) => {
                tracing::debug!(busy, log, done, "WAL checkpoint incomplete; retried later")
            }
            Err(e) => tracing::warn!(error = %e, "WAL checkpoint failed; retried later"),
        }
    }

    /// Caps the database at `pages` pages (`PRAGMA max_page_count`, for this connection):
    /// writes beyond it fail as if the disk were full. Returns the cap now in force.
    #[doc(hidden)]
    pub fn set_max_page_count(&self, pages: u64) -> Result<u64, StoreError> {
        Ok(self
            .conn
            .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                r.get::<_, i64>(0)
            })? as u64)
    }

    /// After a commit: a periodic checkpoint. After a failed transaction: an immediate one,
    /// so that the WAL does not keep the space a full disk needs back.
    pub(super) fn after_transaction<T>(&self, r: &Result<T, StoreError>) {
        match r {
            Ok(_) => {
                let n = self.commits.get() + 1;
                self.commits.set(n);
                if n >= CHECKPOINT_EVERY {
                    self.checkpoint();
                }
            }
            Err(_) => self.checkpoint(),
        }
    }
}
