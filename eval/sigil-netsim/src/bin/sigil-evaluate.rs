//! Runs the evaluation (docs/evaluation.md's numbers) and writes them as JSON.
//!
//! Usage: sigil-evaluate [--quick] [--threads N] [--out FILE]
//! (`scripts/evaluate` runs it and then draws the plots and the page.)

use sigil_netsim::experiments::{run_all, Plan};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut quick = false;
    let mut out = String::from("target/evaluation/results.json");
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--out" => match args.next() {
                Some(f) => out = f,
                None => return usage("--out needs a file"),
            },
            "--threads" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) if n > 0 => threads = n,
                _ => return usage("--threads needs a positive number"),
            },
            "-h" | "--help" => {
                println!("usage: sigil-evaluate [--quick] [--threads N] [--out FILE]");
                return ExitCode::SUCCESS;
            }
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    let results = run_all(Plan { quick, threads });
    if let Some(dir) = std::path::Path::new(&out).parent() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("error: cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    let text = serde_json::to_string_pretty(&results).expect("JSON");
    if let Err(e) = std::fs::write(&out, text) {
        eprintln!("error: cannot write {out}: {e}");
        return ExitCode::FAILURE;
    }
    eprintln!("wrote {out}");
    ExitCode::SUCCESS
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("error: {msg}\nusage: sigil-evaluate [--quick] [--threads N] [--out FILE]");
    ExitCode::from(2)
}
