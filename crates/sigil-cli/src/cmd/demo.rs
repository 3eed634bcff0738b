//! `sigil demo`: the whole system with attacks on loopback (crate::demo runs it).

use crate::args::parse_duration;
use crate::demo;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct DemoArgs {
    /// Honest emulated sensors.
    #[arg(long, default_value_t = 20)]
    pub sensors: usize,
    /// How long the sensors publish while the attacks run.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Time between two readings of one sensor.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Keep the database and sensor states here instead of a temporary directory.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// How many sensors form a kit provisioned by its group identity.
    #[arg(long, default_value_t = 3)]
    pub kit: usize,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// No progress bar or narration, only the summary.
    #[arg(long)]
    pub quiet: bool,
}

pub async fn run(a: DemoArgs) -> Result<i32> {
    let summary = demo::run(demo::DemoOptions {
        sensors: a.sensors,
        duration: a.duration,
        interval: a.interval,
        dir: a.dir,
        kit: a.kit,
        quiet: a.quiet || a.json,
    })
    .await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        demo::print_summary(&summary);
    }
    let ok = summary.acknowledged_but_missing == 0
        && summary.readings_failed_verification == 0
        && summary.readings_pushed_to_follower > 0
        && summary.follower_failed == 0
        && summary.attacks.iter().all(|x| x.refused)
        && summary.readings_acknowledged > 0
        && summary.access.ok();
    if !ok {
        eprintln!("sigil demo: FAILED (an acknowledged reading is missing, a reading failed verification, the follower received nothing or a reading that failed, an attack was accepted, or an access-control step did not go as expected)");
    }
    Ok(if ok { 0 } else { 1 })
}
