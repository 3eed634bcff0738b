//! docs/operations.md stays true: every ```sh block of the operator's guide is run, in order,
//! as one bash script (`set -euo pipefail`) in an empty directory with the `sigil` under test
//! first on PATH. The guide's ports 5683 and 5684 become free ones, so the run can go beside
//! other tests. ```console blocks are shown, not run (output, or commands for other machines).

mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GUIDE: &str = include_str!("../../../docs/operations.md");

/// The ```sh blocks, in order.
fn shell_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(b), l) => {
                b.push_str(l);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(current.is_none(), "an unterminated ```sh block");
    blocks
}

#[test]
fn the_operations_guide_runs_as_written() {
    let blocks = shell_blocks(GUIDE);
    assert!(blocks.len() >= 10, "only {} runnable blocks", blocks.len());
    // The guide covers what an operator does; each of these must be in a block that runs.
    let all = blocks.concat();
    for needed in [
        "sigil server --config",
        "sigil provision --db",
        " import ",
        " revoke ",
        " grant ",
        " psk-node",
        "sigil token",
        " pair ",
        "sigil backup",
        "sigil app",
        "sigil sensor",
    ] {
        assert!(all.contains(needed), "the guide runs no `{needed}`");
    }
    let (p1, p2) = (common::free_port(), common::free_port());
    let script = format!(
        "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT\n{}",
        all.replace("5683", &p1.to_string())
            .replace("5684", &p2.to_string())
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("guide.sh"), &script).unwrap();
    let bin = std::path::Path::new(common::SIGIL).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Its own process group, so that a guide stopped at the deadline takes the processes it
    // started in the background (a server) with it.
    let mut child = Command::new("bash")
        .process_group(0)
        .arg("guide.sh")
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().unwrap();
    // Shown with --nocapture: what an operator following the guide sees.
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the guide's commands failed ({:?})\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
