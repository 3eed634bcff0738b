//! `sigil token`: ask the server's access-control endpoint (`POST /token`, RFC 9200 §5.8) for
//! an access token over a coaps:// session with this client's credentials, and write it out.
//! For the server itself the token comes with a symmetric PoP key (or binds the client's raw
//! public key); for a sensor that serves its own readings (`--audience <sensor identity>`) it
//! binds the client's raw public key and names the sensor's key (`rs_cnf`).

use crate::args::DtlsArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use sigil_ace::Permissions;
use sigil_client::{ace, parse_uri, CoapClient, Transport};
use std::path::PathBuf;

#[derive(Args)]
pub struct TokenArgs {
    /// The access-control server: coaps://host[:port]
    #[arg(long, default_value = "coaps://127.0.0.1:5684")]
    pub server: String,
    /// The resource server the token is for: a sensor's identity (default: the server itself).
    #[arg(long)]
    pub audience: Option<String>,
    /// What to read: a sensor's identity, its kit's, or `rd` (repeatable).
    #[arg(long, required = true)]
    pub scope: Vec<String>,
    /// Also ask to publish to these objects (a device's own topic).
    #[arg(long)]
    pub publish: Vec<String>,
    /// Bind the token to this key's public half (`alg:hex` secret key file, as `--key-file`):
    /// the client then opens its session with that raw public key (RFC 9202 §3.2). Needed
    /// for a sensor audience when the session is PSK. The request carries the key's signature
    /// over this client's identity (`req_cnf_pop`), which the server asks for.
    #[arg(long)]
    pub bind_key: Option<PathBuf>,
    /// Where to write the token (the CWT as it goes to `/authz-info`).
    #[arg(long)]
    pub out: PathBuf,
    /// Give up when the server has not answered for this long (the DTLS handshake, or the
    /// request), e.g. 10s, 500ms; a handshake given up says where it stopped and why.
    #[arg(long, default_value = "10s", value_parser = crate::args::parse_duration)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub dtls: DtlsArgs,
}

pub async fn run(a: TokenArgs) -> Result<i32> {
    let uri = parse_uri(&a.server)?;
    if !uri.secure {
        bail!("/token is served over coaps:// only");
    }
    a.dtls.check(true)?;
    let bind_key = match &a.bind_key {
        Some(p) => Some(crate::args::read_key_file(p).context("--bind-key")?),
        None => None,
    };
    let security = a.dtls.security(true, None)?;
    // The bound key signs the identity this session authenticates (`req_cnf_pop`): the AC
    // binds no key its client has not proven it holds.
    let bind = match &bind_key {
        Some(key) => Some(ace::BindKey {
            key,
            client: ace::session_identity(&security)
                .context("--bind-key needs the client's own identity (a PSK identity or key)")?,
        }),
        None => None,
    };
    let config = a.dtls.timing.config()?;
    if a.timeout.is_zero() {
        bail!("--timeout must be above zero");
    }
    let carrier = a.dtls.dtls_carrier.into();
    let t = Transport::open_within(uri.addr, security, config, carrier, a.timeout).await?;
    let mut c =
        CoapClient::with_timeout(t, sigil_coap::TransmissionParameters::default(), a.timeout);
    let mut scope: Vec<(String, Permissions)> = Vec::new();
    for o in &a.scope {
        let p = if a.publish.contains(o) {
            Permissions::READ_PUBLISH
        } else {
            Permissions::READ
        };
        scope.push((o.clone(), p));
    }
    for o in a.publish.iter().filter(|o| !a.scope.contains(o)) {
        scope.push((o.clone(), Permissions::PUBLISH));
    }
    let ticket = ace::request_token(&mut c, a.audience.as_deref(), &scope, bind).await;
    c.close().await;
    let ticket = ticket.context("POST /token")?;
    sigil_client::transport::write_atomically(&a.out, &ticket.token)
        .with_context(|| format!("cannot write {}", a.out.display()))?;
    let summary = serde_json::json!({
        "token_bytes": ticket.token.len(),
        "request_bytes": ticket.request_bytes,
        "response_bytes": ticket.response_bytes,
        "expires_in": ticket.expires_in,
        "pop": if ticket.pop.is_some() { "symmetric (PSK)" } else { "public key" },
        "rs_key": ticket.rs_key.map(|k| hex::encode(k.as_bytes())),
        "out": a.out.display().to_string(),
    });
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(0)
}
