//! `sigil get`: one CoAP GET over coap:// or coaps://, printing the payload.

use crate::args::DtlsArgs;
use anyhow::Result;
use clap::Args;
use sigil_client::{parse_uri, CoapClient, Transport};

#[derive(Args)]
pub struct GetArgs {
    /// coap://host[:port]/path or coaps://host[:port]/path
    pub uri: String,
    #[command(flatten)]
    pub dtls: DtlsArgs,
}

pub async fn run(a: GetArgs) -> Result<i32> {
    let uri = parse_uri(&a.uri)?;
    let security = a.dtls.security(uri.secure, None)?;
    let config = a.dtls.timing.config()?;
    let t = Transport::open_over(uri.addr, security, config, a.dtls.dtls_carrier.into()).await?;
    let mut c = CoapClient::over(t, sigil_coap::TransmissionParameters::default());
    let r = c.get(&uri.path, &[]).await?;
    c.close().await;
    eprintln!("{}", r.code);
    use std::io::Write;
    std::io::stdout().write_all(&r.payload)?;
    println!();
    Ok(if r.code.is_success() { 0 } else { 2 })
}
