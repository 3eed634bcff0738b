//! `sigil get`: one CoAP GET over coap:// or coaps://, printing the payload.

use crate::args::DtlsArgs;
use anyhow::Result;
use clap::Args;
use sigil_client::{parse_uri, CoapClient, Transport};

#[derive(Args)]
pub struct GetArgs {
    /// coap://host[:port]/path or coaps://host[:port]/path
    pub uri: String,
    /// Read through an access token (coaps:// only): ask the server's `/token` for `--scope`,
    /// post the token to `/authz-info`, and send the GET over a session keyed by the token's
    /// PoP key (RFC 9202).
    #[arg(long)]
    pub token: bool,
    /// What to ask the token for: a sensor's identity, or `rd` (repeatable; default `rd`).
    #[arg(long, requires = "token")]
    pub scope: Vec<String>,
    /// A token from the AC (hex or bytes) for a sensor serving its own readings: POSTed to its
    /// `/authz-info`, then the resource read over a session with --key-file (cmd::get_rs).
    #[arg(long, conflicts_with = "token")]
    pub token_file: Option<std::path::PathBuf>,
    /// With --token-file: the sensor's identity (its key must hash to it).
    #[arg(long, requires = "token_file")]
    pub rs_identity: Option<String>,
    #[command(flatten)]
    pub dtls: DtlsArgs,
}

pub async fn run(a: GetArgs) -> Result<i32> {
    if let Some(token) = a.token_file.clone() {
        return super::get_rs::run(a, &token).await;
    }
    let uri = parse_uri(&a.uri)?;
    let security = a.dtls.security(uri.secure, None)?;
    let config = a.dtls.timing.config()?;
    let carrier = a.dtls.dtls_carrier.into();
    let t = if a.token {
        if !uri.secure {
            anyhow::bail!("--token needs a coaps:// URI");
        }
        let objects = if a.scope.is_empty() {
            vec![sigil_ace::RD_OBJECT.to_string()]
        } else {
            a.scope.clone()
        };
        let scope: Vec<_> = objects
            .into_iter()
            .map(|o| (o, sigil_ace::Permissions::READ))
            .collect();
        let (ticket, t) =
            sigil_client::ace::open_with_token(uri.addr, security, config, carrier, &scope).await?;
        eprintln!("access token: {} B", ticket.token.len());
        t
    } else {
        Transport::open_over(uri.addr, security, config, carrier).await?
    };
    let mut c = CoapClient::over(t, sigil_coap::TransmissionParameters::default());
    let r = c.get(&uri.path, &[]).await?;
    c.close().await;
    eprintln!("{}", r.code);
    use std::io::Write;
    std::io::stdout().write_all(&r.payload)?;
    println!();
    Ok(if r.code.is_success() { 0 } else { 2 })
}
