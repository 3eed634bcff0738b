//! No command panics when its reader goes away (`sigil sensor --print-identity | head -n 1`).

use std::io::Read;
use std::process::{Command, Stdio};

#[test]
fn print_identity_into_a_closed_pipe_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("s");
    // First boot makes the key, so every later run only prints.
    let first = Command::new(env!("CARGO_BIN_EXE_sigil"))
        .args(["sensor", "--print-identity", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(first.status.success());
    for _ in 0..40 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sigil"))
            .args(["sensor", "--print-identity", "--state"])
            .arg(&state)
            .env("RUST_BACKTRACE", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before the child writes: every write then meets a closed pipe.
        drop(child.stdout.take());
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = child.wait().unwrap();
        assert!(!err.contains("panicked"), "stderr: {err}");
        assert!(
            status.success() || {
                use std::os::unix::process::ExitStatusExt;
                status.signal() == Some(libc::SIGPIPE)
            },
            "{status:?}: {err}"
        );
    }
}
