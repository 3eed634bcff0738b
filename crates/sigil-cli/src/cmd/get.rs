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
    /// Give up when the server has not answered for this long (the DTLS handshake, or the
    /// request), e.g. 10s, 500ms.
    #[arg(long, default_value = "10s", value_parser = crate::args::parse_duration)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub dtls: DtlsArgs,
}

pub async fn run(a: GetArgs) -> Result<i32> {
    if let Some(token) = a.token_file.clone() {
        return super::get_rs::run(a, &token).await;
    }
    let uri = parse_uri(&a.uri)?;
    if a.timeout.is_zero() {
        anyhow::bail!("--timeout must be above zero");
    }
    let security = a.dtls.security(uri.secure, None)?;
    let mut config = a.dtls.timing.config()?;
    if a.token {
        // The token's sessions are opened without a limit of their own: their flights give up
        // after the retransmissions that fit in --timeout, saying where they stopped.
        config.max_retransmissions =
            sigil_client::transport::retransmissions_within(&config, a.timeout);
    }
    let carrier = a.dtls.dtls_carrier.into();
    let connect = async {
        if a.token {
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
                sigil_client::ace::open_with_token(uri.addr, security, config, carrier, &scope)
                    .await?;
            eprintln!("access token: {} B", ticket.token.len());
            Ok(t)
        } else {
            Transport::open_within(uri.addr, security, config, carrier, a.timeout).await
        }
    };
    // The token's exchanges together get --timeout; a session of its own gives up inside
    // its handshake after --timeout, saying whether the server was silent or stalled (so the
    // outer limit, twice as long, is only a backstop there).
    let limit = if a.token {
        a.timeout
    } else {
        a.timeout.saturating_mul(2)
    };
    let t = tokio::time::timeout(limit, connect)
        .await
        .map_err(|_| sigil_client::transport::no_answer(uri.addr, uri.secure, a.timeout))??;
    let mut c =
        CoapClient::with_timeout(t, sigil_coap::TransmissionParameters::default(), a.timeout);
    let r = c.get(&uri.path, &[]).await?;
    c.close().await;
    eprintln!("{}", r.code);
    write_payload(
        &r.payload,
        std::io::IsTerminal::is_terminal(&std::io::stdout()),
    )?;
    Ok(if r.code.is_success() { 0 } else { 2 })
}

/// The payload as it came, so that `sigil get … > reading.cose` keeps the bytes; a newline
/// after it only for UTF-8 text shown on a terminal.
fn write_payload(payload: &[u8], terminal: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(payload)?;
    if terminal && std::str::from_utf8(payload).is_ok() && !payload.ends_with(b"\n") {
        out.write_all(b"\n")?;
    }
    out.flush()
}
