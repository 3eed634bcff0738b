//! A client of an ACE resource server (RFC 9200) in the DTLS profile's raw-public-key mode
//! (RFC 9202 §3.2), such as a sensor serving its own readings: post the access token from the
//! AC to `/authz-info` over plain CoAP, then read a resource over a DTLS session authenticated
//! with the key the token is bound to (its `cnf`), the resource server pinned by its identity.
//! A reading is verified end to end, against the key the handshake authenticated.

use crate::coap::{ClientResponse, CoapClient, RequestSpec};
use crate::transport::{Security, Transport};
use anyhow::{bail, Context, Result};
use sigil_coap::message::Code;
use sigil_coap::TransmissionParameters;
use sigil_crypto::{PublicKey, RustCrypto, SecretKey};
use sigil_identity::Identity;
use sigil_objects::{ReadingFormat, SignedReading};
use std::net::SocketAddr;

/// POSTs `token` to `/authz-info` (RFC 9200 §5.10.1) on the resource server `rs` over plain
/// CoAP. 2.01 means accepted; a refusal carries its reason in an `application/ace+cbor` map.
/// A 5.03 with a Max-Age of a few seconds (the resource server's verifications of this second
/// are spent) is posted again after it, up to [`POST_TOKEN_TRIES`] times in all.
pub async fn post_token(rs: SocketAddr, token: &[u8]) -> Result<ClientResponse> {
    let mut c = CoapClient::connect(rs, TransmissionParameters::default()).await?;
    let spec = RequestSpec {
        path: "authz-info",
        content_format: Some(sigil_ace::CONTENT_FORMAT_ACE_CBOR),
        payload: token,
        ..Default::default()
    };
    let mut tries = 0;
    let r = loop {
        tries += 1;
        let r = c.request(Code::POST, &spec).await;
        let again = match &r {
            Ok(r) if r.code == Code::SERVICE_UNAVAILABLE && tries < POST_TOKEN_TRIES => {
                r.max_age.filter(|s| *s <= 10)
            }
            _ => None,
        };
        match again {
            Some(secs) => tokio::time::sleep(std::time::Duration::from_secs(secs.into())).await,
            None => break r,
        }
    };
    c.close().await;
    r
}

/// How many times [`post_token`] posts a token answered 5.03 with a short Max-Age.
pub const POST_TOKEN_TRIES: u32 = 5;

/// The reason in a refusal's `application/ace+cbor` error map (`error_description`), if any.
pub fn refusal_reason(payload: &[u8]) -> Option<String> {
    let e = sigil_ace::AceError::parse(payload).ok()?;
    Some(match e.description {
        Some(d) => format!("{}: {d}", e.code.name()),
        None => e.code.name().to_string(),
    })
}

/// A GET of `path` on the resource server `rs` (identity `rs_identity`, its key hashing to
/// it) over a DTLS session authenticated with `key`. Returns the response and the resource
/// server's key as the handshake authenticated it.
pub async fn get_over_rpk(
    rs: SocketAddr,
    rs_identity: Identity,
    key: SecretKey,
    path: &str,
    dtls: sigil_dtls::Config,
) -> Result<(ClientResponse, PublicKey)> {
    let security = Security::RawPublicKey {
        own: Some(key),
        server: rs_identity,
    };
    let t = Transport::open(rs, security, dtls).await?;
    let rs_key = t
        .peer_public_key()
        .context("the resource server's key is unknown after the handshake")?;
    let mut c = CoapClient::over(t, TransmissionParameters::default());
    let r = c.get(path, &[]).await;
    c.close().await;
    Ok((r?, rs_key))
}

/// Verifies a reading served by the sensor itself (RFC 8387 §7 step 3): its `kid` is the
/// sensor's identity and its signature verifies under the sensor's key. Returns the sequence
/// number. A reading in low-bits mode cannot be checked without the receiver's window and is
/// refused here.
pub fn verify_served_reading(
    content_format: Option<u16>,
    payload: &[u8],
    sensor_key: &PublicKey,
    sensor: &Identity,
) -> Result<u64> {
    let format = match content_format {
        None | Some(18) => ReadingFormat::Cose,
        Some(f) if f == sigil_coap::message::ContentFormat::JOSE_COMPACT.0 => ReadingFormat::Jws,
        Some(f) => bail!("content format {f} is not a signed reading"),
    };
    let r = SignedReading::parse(format, payload).map_err(|e| anyhow::anyhow!("reading: {e}"))?;
    let seq = r
        .full_seq()
        .context("reading carries only low bits of its sequence number")?;
    let mut scratch = vec![0u8; r.scratch_len()];
    r.verify_end_to_end(&RustCrypto, sensor_key, sensor, seq, &mut scratch)
        .map_err(|e| anyhow::anyhow!("reading does not verify: {e}"))?;
    Ok(seq)
}
