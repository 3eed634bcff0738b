//! `sigil-bench`: Sigil's benchmarks, apart from the product (docs/benchmarks.md).
//!
//! - `wire`: bytes on the wire for one signed reading, against the 802.15.4 budget.
//! - `server`: end-to-end verified readings per second over loopback, beside the raw verify
//!   rate; the server runs as a child process (`serve`) so its CPU time is read apart.
//! - `dtls`: handshake bytes and datagrams per suite and mode beside OpenSSL 3 measured in the
//!   same run, record overhead, server handshakes per core-second.
//! - `observe`: CoAP Observe on one topic against polling it at the same freshness: latency
//!   to the reader's verification and the server's CPU per reading delivered, at 1, 100 and
//!   1,000 observers (`sigil server` as its own process).

mod dtls;
mod observe;
mod readings;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sigil-bench",
    about = "Measure what Sigil's security costs (docs/benchmarks.md)"
)]
struct Cli {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// DTLS handshake bytes and datagrams per suite and mode beside OpenSSL 3 measured in the
    /// same run, record overhead, and server handshakes per core-second.
    Dtls {
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long)]
        json: bool,
    },
    /// Bytes on the wire for one signed temperature reading, against the 802.15.4 budget.
    Wire {
        #[arg(long)]
        json: bool,
    },
    /// End-to-end verified readings per second over loopback, beside the raw verify rate.
    Server {
        #[arg(long, default_value_t = 64)]
        sensors: usize,
        #[arg(long, default_value_t = 200)]
        readings: usize,
        /// Repeat and report every run (quote the median).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        #[arg(long)]
        json: bool,
    },
    /// CoAP Observe on one topic against polling it at the same freshness: latency from the
    /// PUT to the reader's verification, and `sigil server`'s CPU per reading delivered.
    Observe {
        /// Observers (and polling readers) per phase.
        #[arg(long, value_delimiter = ',', default_values_t = [1, 100, 1000])]
        observers: Vec<usize>,
        /// Readings published per second.
        #[arg(long, default_value_t = 5.0)]
        rate: f64,
        /// Readings published per phase.
        #[arg(long, default_value_t = 20)]
        publications: usize,
        /// Repeat and report every run (quote the medians).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The `sigil` binary (default: beside this one, target/release/sigil).
        #[arg(long)]
        sigil: Option<std::path::PathBuf>,
        /// An argument for `sigil server` (repeatable), e.g. `--server-arg=--ack-timeout
        /// --server-arg=200ms`.
        #[arg(long, allow_hyphen_values = true)]
        server_arg: Vec<String>,
        /// Observers acknowledge Confirmable notifications this many milliseconds after they
        /// arrive (a slow link's round trip).
        #[arg(long, default_value_t = 0)]
        ack_delay_ms: u64,
        #[arg(long)]
        json: bool,
    },
    /// The server under measurement (started by `server` as a child process).
    #[command(hide = true)]
    Serve {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        db: std::path::PathBuf,
    },
}

#[tokio::main]
async fn main() -> Result<()> {
    match Cli::parse().what {
        What::Dtls { runs, json } => {
            let r = dtls::run(runs)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                dtls::print(&r);
            }
        }
        What::Wire { json } => {
            let rows = readings::wire()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                readings::print_wire(&rows);
            }
        }
        What::Server {
            sensors,
            readings: per_sensor,
            runs,
            json,
        } => {
            let mut results = Vec::new();
            for i in 0..runs.max(1) {
                let r = readings::server(sensors, per_sensor, json).await?;
                if !json {
                    println!(
                        "run {}: {:.0} readings/s end to end ({} in {:.2}s, load generator on the same cores); server {:.1} µs CPU per reading = {:.0} readings per core-second; raw verify {:.0}/s on 1 thread ({:.0}/s on {} threads); per-core ratio {:.2}",
                        i + 1, r.end_to_end_per_second, r.acknowledged, r.seconds, r.server_cpu_us_per_reading, r.server_readings_per_core_second, r.raw_verify_per_second_one_thread, r.raw_verify_per_second_all_threads, r.threads, r.ratio_per_core
                    );
                }
                results.push(r);
            }
            let mut ratios: Vec<f64> = results.iter().map(|r| r.ratio_per_core).collect();
            ratios.sort_by(f64::total_cmp);
            let median = ratios[ratios.len() / 2];
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"runs": results, "median_ratio_per_core": median})
                    )?
                );
            } else {
                println!("median per-core ratio (server readings per CPU-second / raw verifications per CPU-second): {median:.2}");
            }
        }
        What::Observe {
            observers,
            rate,
            publications,
            runs,
            sigil,
            server_arg,
            ack_delay_ms,
            json,
        } => {
            anyhow::ensure!(
                rate > 0.0 && publications > 0,
                "--rate and --publications must be positive"
            );
            let o = observe::Options {
                observers,
                rate,
                publications,
                runs: runs.max(1),
                sigil,
                server_args: server_arg,
                ack_delay: std::time::Duration::from_millis(ack_delay_ms),
            };
            let mut all = Vec::new();
            for run in 1..=o.runs {
                all.push(observe::run_once(&o, run).await?);
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&all)?);
            } else {
                observe::print(&all, &o);
            }
        }
        What::Serve { listen, db } => {
            let stats = sigil_server::Stats::default();
            let server =
                sigil_server::Server::start(sigil_server::ServerConfig::new(listen, db), stats)
                    .await?;
            tokio::signal::ctrl_c().await?;
            server.shutdown().await;
        }
    }
    Ok(())
}
