//! Small pieces shared by the commands.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Bytes of log this process has written (what `sigil soak` reports against the log budget).
pub static LOG_BYTES: AtomicU64 = AtomicU64::new(0);
/// Count log bytes without writing them (`sigil soak` measures its log instead of showing it).
pub static LOG_COUNT_ONLY: AtomicBool = AtomicBool::new(false);

/// Standard error, counting into [`LOG_BYTES`].
struct CountingStderr;

impl std::io::Write for CountingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = if LOG_COUNT_ONLY.load(Ordering::Relaxed) {
            buf.len()
        } else {
            std::io::stderr().write(buf)?
        };
        LOG_BYTES.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

pub fn init_logging(level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SIGIL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| CountingStderr);
    if json {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
}

pub use sigil_client::os::since;

/// A reader that closes our stdout (`sigil sensor --print-identity | head -n 1`) ends the
/// process the way it ends every Unix filter: by SIGPIPE, quietly. Rust ignores SIGPIPE by
/// default, which turns the closed pipe into an error in `println!`, and that into a panic.
pub fn exit_quietly_on_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any other thread exists; restoring the
    // default disposition of one signal has no other effect on this process's state.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
