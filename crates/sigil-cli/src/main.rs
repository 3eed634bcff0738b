//! `sigil`: the Sigil command line. Argument parsing here; each command is a module of
//! `cmd/` and a thin driver around the library crates (see docs/architecture.md).

mod args;
mod attacks;
mod cmd;
mod config;
mod demo;
mod demo_access;
mod refusals;
mod sensor;
mod serve;
mod soak;
mod storage;
mod util;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "sigil",
    version,
    about = "Secure identities, signed SenML readings and their verification for constrained devices (RFC 8387)"
)]
struct Cli {
    /// Log level (error, warn, info, debug, trace); SIGIL_LOG overrides. Default: warn
    /// (error for the demo, whose refusals are expected and summarised at the end).
    #[arg(long, global = true)]
    log: Option<String>,
    /// Structured JSON logs on stderr.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Resource Directory and publish-subscribe broker.
    #[command(args_override_self = true)]
    Server(cmd::server::ServerArgs),
    /// Run an emulated sensor.
    Sensor(cmd::sensor::SensorArgs),
    /// Look sensors up, fetch their readings and verify each one end to end.
    App(cmd::app::AppArgs),
    /// Compute identities, group identities and label forms.
    Identity(cmd::identity::IdentityArgs),
    /// Manage the authorized identity list of a server's database.
    Provision(cmd::provision::ProvisionArgs),
    /// Run the whole system with attacks on loopback and print a summary.
    Demo(cmd::demo::DemoArgs),
    /// Honest sensors beside every control-plane attack at once, for a bounded time; checks
    /// that nothing acknowledged is lost and that memory stays within its budgets.
    Soak(cmd::soak::SoakArgs),
    /// Run a CryptoDiet node over UDP: signed hellos with configured neighbours, then
    /// encrypted, signed messages.
    Diet(cmd::diet::DietArgs),
    /// Verify one signed reading from a file against a key and identity.
    Verify(cmd::verify::VerifyArgs),
    /// One CoAP GET over coap:// or coaps:// (prints the payload).
    Get(cmd::get::GetArgs),
    /// Ask the server's access-control endpoint for an access token (RFC 9200).
    Token(cmd::token::TokenArgs),
    /// Copy a server's database consistently, also while the server runs.
    Backup(cmd::backup::BackupArgs),
}

/// The command line, with `server --config FILE`'s settings in front of the server's flags
/// (crate::config), parsed.
fn parse_command_line() -> Cli {
    let command = Cli::command();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let args = match command.find_subcommand("server") {
        Some(server) => match config::expand(args, server) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("sigil server: {e:#}");
                std::process::exit(2);
            }
        },
        None => args,
    };
    let matches = command.get_matches_from(args);
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() {
    util::exit_quietly_on_closed_stdout();
    let cli = parse_command_line();
    let default_level = if matches!(cli.command, Command::Demo(_)) {
        "error"
    } else {
        "warn"
    };
    util::init_logging(cli.log.as_deref().unwrap_or(default_level), cli.log_json);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sigil: cannot start runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Server(a) => cmd::server::run(a).await,
            Command::Sensor(a) => cmd::sensor::run(a).await,
            Command::App(a) => cmd::app::run(a).await,
            Command::Get(a) => cmd::get::run(a).await,
            Command::Token(a) => cmd::token::run(a).await,
            Command::Demo(a) => cmd::demo::run(a).await,
            Command::Soak(a) => cmd::soak::run(a).await,
            Command::Diet(a) => cmd::diet::run(a).await,
            Command::Identity(a) => cmd::identity::run(a),
            Command::Provision(a) => cmd::provision::run(a),
            Command::Verify(a) => cmd::verify::run(a),
            Command::Backup(a) => cmd::backup::run(a),
        }
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("sigil: {e:#}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command and subcommand says what it does, and every argument a user can see has
    /// a help text.
    #[test]
    fn every_help_entry_has_text() {
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in c.get_subcommands() {
                let p = format!("{path} {}", sub.get_name());
                if sub
                    .get_about()
                    .is_none_or(|a| a.to_string().trim().is_empty())
                {
                    missing.push(format!("{p}: no about"));
                }
                walk(sub, &p, missing);
            }
            for a in c.get_arguments() {
                if a.is_hide_set() || matches!(a.get_id().as_str(), "help" | "version") {
                    continue;
                }
                if a.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    missing.push(format!("{path} --{}: no help", a.get_id()));
                }
            }
        }
        let cli = Cli::command();
        cli.clone().debug_assert();
        let mut missing = Vec::new();
        walk(&cli, "sigil", &mut missing);
        assert!(
            missing.is_empty(),
            "help entries without text:\n{}",
            missing.join("\n")
        );
    }
}
