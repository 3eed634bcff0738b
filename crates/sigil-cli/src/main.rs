//! `sigil`: the Sigil command line. Argument parsing here; each command is a module of
//! `cmd/` and a thin driver around the library crates (see docs/architecture.md).

mod args;
mod attacks;
mod cmd;
mod demo;
mod demo_access;
mod refusals;
mod sensor;
mod serve;
mod soak;
mod storage;
mod util;

use clap::{Parser, Subcommand};

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
}

fn main() {
    util::exit_quietly_on_closed_stdout();
    let cli = Cli::parse();
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
