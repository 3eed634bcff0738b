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

/// SIGINT and SIGTERM (what Ctrl-C and service managers send), registered when made: a
/// signal that arrives after [`StopSignals::new`] is never the default "terminate now".
pub struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Registers both handlers; needs a running tokio runtime.
    pub fn new() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the next SIGINT or SIGTERM and names it.
    pub async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }

    /// Sets `stop` to true at the first SIGINT or SIGTERM (logged at info), from a task.
    pub fn forward_to(mut self, stop: tokio::sync::watch::Sender<bool>) {
        tokio::spawn(async move {
            let name = self.recv().await;
            tracing::info!(signal = name, "stopping");
            let _ = stop.send(true);
        });
    }
}

/// One socket address for `text`: a literal (`127.0.0.1:5683`, `[::1]:5683`) or a host name
/// with a port (`localhost:5683`), resolved once, now; the first address the resolver gives.
pub fn resolve_addr(text: &str, what: &str) -> anyhow::Result<std::net::SocketAddr> {
    use anyhow::Context;
    use std::net::ToSocketAddrs;
    if let Ok(a) = text.parse() {
        return Ok(a);
    }
    let (host, port) = text.rsplit_once(':').with_context(|| {
        format!("{what} {text}: expected HOST:PORT (e.g. localhost:5683 or 127.0.0.1:5683)")
    })?;
    port.parse::<u16>()
        .with_context(|| format!("{what} {text}: the port '{port}' is not a number"))?;
    text.to_socket_addrs()
        .map_err(|e| anyhow::anyhow!("{what} {text}: cannot resolve host '{host}': {e}"))?
        .next()
        .with_context(|| format!("{what} {text}: host '{host}' has no address"))
}

/// Whether a file holding secrets can be read by group or others; `Some(mode)` if so.
#[cfg(unix)]
pub fn readable_by_others(path: &std::path::Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then_some(mode)
}

#[cfg(not(unix))]
pub fn readable_by_others(_: &std::path::Path) -> Option<u32> {
    None
}
