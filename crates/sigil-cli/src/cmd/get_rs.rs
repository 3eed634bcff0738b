//! `sigil get coaps://SENSOR/reading --token-file FILE --key-file KEY --rs-identity ID`: a reading
//! from a sensor that serves its own (an ACE resource server): the token to `/authz-info`
//! over coap:// on the same port, then the resource over a raw-public-key DTLS session with
//! the key the token is bound to, the sensor pinned by its identity; each reading verified end
//! to end against the key the handshake authenticated.

use crate::cmd::get::GetArgs;
use anyhow::{bail, Context, Result};
use sigil_client::parse_uri;
use sigil_client::sensor_rs as ace;
use sigil_identity::Identity;
use std::path::Path;

/// A token file: hex text or the bytes.
pub fn read_token(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read --token-file {}", path.display()))?;
    let token = match std::str::from_utf8(&bytes).ok().map(str::trim) {
        Some(t) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_hexdigit()) => hex::decode(t)
            .with_context(|| format!("--token-file {}: odd-length hex", path.display()))?,
        _ => bytes,
    };
    if token.len() > sigil_ace::MAX_TOKEN_LEN {
        bail!(
            "--token-file {}: {} bytes, longer than a token can be ({})",
            path.display(),
            token.len(),
            sigil_ace::MAX_TOKEN_LEN
        );
    }
    Ok(token)
}

pub async fn run(a: GetArgs, token: &Path) -> Result<i32> {
    let uri = parse_uri(&a.uri)?;
    if !uri.secure {
        bail!("--token-file reads over coaps://");
    }
    let rs = a
        .rs_identity
        .as_deref()
        .or(a.dtls.server_identity.as_deref())
        .context("--token-file needs --rs-identity (the sensor's identity)")?;
    let rs = Identity::parse(rs).map_err(|e| anyhow::anyhow!("--rs-identity: {e}"))?;
    let key_file = a
        .dtls
        .key_file
        .as_deref()
        .context("--token-file needs --key-file (the key the token is bound to)")?;
    let key = crate::args::load_or_make_key(key_file)?;
    let token = read_token(token)?;
    let dtls = a.dtls.timing.config()?;

    let posted = ace::post_token(uri.addr, &token).await?;
    match ace::refusal_reason(&posted.payload) {
        Some(reason) => eprintln!("authz-info: {} ({reason})", posted.code),
        None => eprintln!("authz-info: {}", posted.code),
    }
    let (r, rs_key) = ace::get_over_rpk(uri.addr, rs, key, &uri.path, dtls).await?;
    eprintln!("{}", r.code);
    if !r.code.is_success() {
        eprintln!("{}", String::from_utf8_lossy(&r.payload));
        return Ok(2);
    }
    let readings: Vec<(Option<u16>, Vec<u8>)> = if r.content_format == Some(60) {
        let mut d = sigil_objects::cbor::Decoder::new(&r.payload);
        let n = d.array().map_err(|e| anyhow::anyhow!("history: {e}"))?;
        (0..n)
            .map(|_| d.bytes().map(|b| (None, b.to_vec())))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("history: {e}"))?
    } else {
        vec![(r.content_format, r.payload.clone())]
    };
    let mut seqs = Vec::new();
    for (cf, reading) in &readings {
        seqs.push(ace::verify_served_reading(*cf, reading, &rs_key, &rs)?);
    }
    eprintln!(
        "verified {} reading(s) from {rs}: sequence {seqs:?}",
        readings.len()
    );
    let out = serde_json::json!({
        "code": r.code.to_string(),
        "sensor": rs.to_string(),
        "verified": seqs,
        "readings": readings.iter().map(|(_, b)| hex::encode(b)).collect::<Vec<_>>(),
    });
    println!("{out}");
    Ok(0)
}
