//! `sigil app`: the application of RFC 8387 §7. It finds sensors in the Resource Directory,
//! fetches their readings from the broker, and verifies every reading end to end itself: the
//! signature under the registered key, over the exact bytes, and that key hashing to an
//! identity on its own trust list. It does not trust the broker or the directory.
//!
//! A node with only a pre-shared key (docs/security.md, "Nodes without public-key crypto")
//! publishes MACed readings, checked under the reading key the server discloses to this
//! application's session (`GET /keys/<identity>`), or plain SenML over its own DTLS session,
//! which nobody can verify afterwards: those are reported as `session`, neither verified nor
//! failed. Such readings are taken only from identities the application's own list names as
//! `psk-node`: the directory's `ct` alone cannot turn a signing sensor into one whose
//! readings need no signature.

use crate::coap::CoapClient;
use anyhow::{Context, Result};
use sigil_coap::{link, Code, ContentFormat, TransmissionParameters};
use sigil_crypto::{PublicKey, RustCrypto};
use sigil_identity::{Binding, Identity, KeyAnnouncement};
use sigil_objects::cbor::Decoder;
use sigil_objects::cose::SeqField;
use sigil_objects::mac::{MacedReading, ReadingKey};
use sigil_objects::senml::{self, OwnedValue};
use sigil_objects::{ReadingFormat, SignedReading};
use std::collections::HashSet;

/// Most readings the application fetches from one topic when asked for all of them.
pub const MAX_HISTORY: usize = 100_000;

/// One sensor resource as announced by the Resource Directory.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Announced {
    pub ep: String,
    pub href: String,
    pub content_format: Option<u16>,
    #[serde(skip)]
    pub key: Option<PublicKey>,
    #[serde(skip)]
    pub group: Vec<PublicKey>,
    #[serde(skip)]
    pub other: Vec<u8>,
}

/// How a reading is protected, as the application sees it (the broker stores the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protection {
    /// COSE_Sign1 or JWS: verified here under the registered key.
    Signed,
    /// COSE_Mac0: verified here under the reading key the server disclosed; any holder of
    /// that key (the node, the server, other granted readers) could have made it.
    Mac,
    /// Plain SenML the node sent over its own DTLS session: the broker vouches for it, the
    /// application cannot check it.
    Session,
}

impl Protection {
    /// The protection a topic's content format means.
    pub fn of_content_format(cf: Option<u16>) -> Self {
        match cf {
            Some(17) => Self::Mac,
            Some(110) | Some(112) => Self::Session,
            _ => Self::Signed,
        }
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct CheckedReading {
    pub seq: u64,
    pub timestamp: Option<u64>,
    pub values: Vec<(String, f64, Option<String>)>,
    pub protection: Protection,
    /// The signature or tag verified here (always false for `session` readings).
    pub verified: bool,
    pub error: Option<String>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct SensorView {
    pub ep: String,
    pub label: String,
    pub topic: String,
    pub algorithm: Option<String>,
    /// What the topic's readings carry: `signed`, `mac` or `session`.
    pub protection: Protection,
    /// The registered key hashes to `ep` (or to a group on the trust list); false for a
    /// PSK-only node, which has no key.
    pub key_matches_identity: bool,
    /// `ep` (or its group) is on the application's trust list; `None` without a list.
    pub trusted: Option<bool>,
    /// Whether the broker let this application read the sensor's topic.
    pub readable: bool,
    /// Why not, with the fix (e.g. `not granted (4.03 no read grant): ask the operator for
    /// ...`); `None` when readable.
    pub refused: Option<String>,
    pub verified: usize,
    pub failed: usize,
    /// `session` readings: taken on the broker's word, neither verified nor failed.
    pub unverifiable: usize,
    /// Why readings failed: each distinct reason once, with how many readings it failed.
    pub problems: Vec<Problem>,
    pub readings: Vec<CheckedReading>,
}

/// One reason readings of a sensor failed, and how many.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub reason: String,
    pub readings: usize,
}

/// Where the identities readings were verified against came from.
pub const IDENTITIES_TRUST_LIST: &str = "trust list";
/// Without a trust list: the identities the directory announced, which nobody checked
/// against a list of this application's own (a reading "verified" under such an identity
/// proves only that the directory's key signed it).
pub const IDENTITIES_UNCHECKED: &str = "directory, unchecked";

#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AppReport {
    /// [`IDENTITIES_TRUST_LIST`] or [`IDENTITIES_UNCHECKED`].
    pub identities: &'static str,
    pub sensors: Vec<SensorView>,
}

/// `sigil app`'s exit status: every shown reading verified, every sensor readable.
pub const EXIT_OK: i32 = 0;
/// Nothing could be read: the server did not answer or refused the lookup (any error), or
/// no (selected) sensor was readable.
pub const EXIT_NOTHING_READ: i32 = 1;
/// Some reading failed verification.
pub const EXIT_FAILED: i32 = 2;
/// Some sensors could not be read (refused, or not in the directory); all shown verified.
pub const EXIT_SOME_UNREADABLE: i32 = 3;

impl AppReport {
    /// Sensors that could not be read.
    pub fn unreadable(&self) -> usize {
        self.sensors.iter().filter(|s| !s.readable).count()
    }

    /// The exit status: [`EXIT_FAILED`] before [`EXIT_NOTHING_READ`] before
    /// [`EXIT_SOME_UNREADABLE`].
    pub fn exit_code(&self) -> i32 {
        if self.failed() > 0 {
            EXIT_FAILED
        } else if self.sensors.iter().all(|s| !s.readable) {
            EXIT_NOTHING_READ
        } else if self.unreadable() > 0 {
            EXIT_SOME_UNREADABLE
        } else {
            EXIT_OK
        }
    }

    pub fn verified(&self) -> usize {
        self.sensors.iter().map(|s| s.verified).sum()
    }
    pub fn failed(&self) -> usize {
        self.sensors.iter().map(|s| s.failed).sum()
    }
    pub fn unverifiable(&self) -> usize {
        self.sensors.iter().map(|s| s.unverifiable).sum()
    }
}

/// The path of a lookup target. The directory answers absolute URIs (RFC 9176 §6:
/// `coap://host:port/ps/N/m`); the application fetches the path over its own connection to
/// the broker, so a directory cannot send it elsewhere.
fn target_path(target: &str) -> &str {
    match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    }
}

/// Parses an RD resource lookup answer (RFC 9176 §6).
pub fn parse_lookup(text: &str) -> Result<Vec<Announced>> {
    let mut out = Vec::new();
    for l in link::parse(text)
        .map_err(|e| anyhow::anyhow!("directory sent malformed link format: {e}"))?
    {
        let l = l.map_err(|e| anyhow::anyhow!("{e}"))?;
        let Some(ep) = l.attr("ep") else { continue };
        // A malformed announcement leaves the sensor without a usable key: its readings are
        // reported as unverifiable, not dropped.
        let announced = KeyAnnouncement::parse(l.attrs().map(|a| (a.name, a.value)))
            .ok()
            .flatten();
        out.push(Announced {
            ep: ep.to_string(),
            href: target_path(l.target).to_string(),
            content_format: l.attr("ct").and_then(|c| c.parse().ok()),
            key: announced.map(|a| *a.key()),
            group: announced.map(|a| a.group().collect()).unwrap_or_default(),
            other: announced
                .map(|a| a.other_info().to_vec())
                .unwrap_or_default(),
        });
    }
    Ok(out)
}

/// The trust list: identities (device, group or PSK-only node) the application accepts.
pub fn load_trust(text: &str) -> Result<HashSet<Identity>> {
    sigil_identity::list::entries(text)
        .map(|e| e.map(|e| e.identity).map_err(|e| anyhow::anyhow!("{e}")))
        .collect()
}

/// The identities a trust list names as PSK-only nodes (`<identity> psk-node [label]`): the
/// only ones whose MACed or session readings the application takes.
pub fn load_psk_nodes(text: &str) -> Result<HashSet<Identity>> {
    let mut out = HashSet::new();
    for e in sigil_identity::list::entries(text) {
        let e = e.map_err(|e| anyhow::anyhow!("{e}"))?;
        if e.kind == sigil_identity::list::ListedKind::PskNode {
            out.insert(e.identity);
        }
    }
    Ok(out)
}

/// Checks one announced sensor's key against its identity and the trust list
/// (`sigil_identity::binding`, the same check the directory made at registration).
pub(crate) fn bind_key(
    a: &Announced,
    trust: Option<&HashSet<Identity>>,
) -> (Option<Identity>, bool, Option<bool>) {
    let Ok(ep) = Identity::parse(&a.ep) else {
        return (None, false, Some(false));
    };
    let binding = a
        .key
        .and_then(|key| Binding::check(&RustCrypto, &ep, &key, &a.group, &a.other).ok());
    let Some(binding) = binding else {
        return (Some(ep), false, trust.map(|_| false));
    };
    let trusted = trust.map(|t| binding.authorized_by(|i| t.contains(i)).is_some());
    (Some(ep), true, trusted)
}

/// Verifies a list of readings (oldest first) of one sensor. `key_ok` says the sensor's
/// identity checked out (its key binds to it, or for a PSK-only node it is trusted);
/// `reading_key` is the key a MACed topic's readings are checked under, if the server
/// disclosed it.
pub fn verify_readings(
    a: &Announced,
    raws: &[Vec<u8>],
    key_ok: bool,
    reading_key: Option<&ReadingKey>,
) -> Vec<CheckedReading> {
    verify_readings_after(a, raws, key_ok, reading_key, 0)
}

/// [`verify_readings`] of readings that follow one numbered `highest` already taken: each
/// must be numbered above it (and low-bits numbers are reconstructed from it).
pub fn verify_readings_after(
    a: &Announced,
    raws: &[Vec<u8>],
    key_ok: bool,
    reading_key: Option<&ReadingKey>,
    mut highest: u64,
) -> Vec<CheckedReading> {
    let protection = Protection::of_content_format(a.content_format);
    let format = match a.content_format {
        Some(110) => ReadingFormat::Jws,
        cf => cf
            .and_then(ReadingFormat::from_content_format)
            .unwrap_or(ReadingFormat::Cose),
    };
    let ep = Identity::parse(&a.ep).ok();
    raws.iter()
        .enumerate()
        .map(|(i, raw)| {
            let mut out = CheckedReading {
                seq: 0,
                timestamp: None,
                values: vec![],
                protection,
                verified: false,
                error: None,
            };
            let result = (|| -> Result<(), String> {
                let bytes = match protection {
                    Protection::Session => {
                        // No number of its own: the position in what the broker sent.
                        out.seq = i as u64 + 1;
                        if !key_ok {
                            return Err("not a listed psk-node".into());
                        }
                        raw.clone()
                    }
                    Protection::Mac => {
                        let r = MacedReading::parse(raw).map_err(|e| e.to_string())?;
                        let seq = full_seq(r.seq, highest)?;
                        out.seq = seq;
                        out.timestamp = r.timestamp;
                        if ep != Some(r.kid) {
                            return Err("kid is not the sensor's identity".into());
                        }
                        let key = reading_key.ok_or("the server disclosed no reading key")?;
                        if !key_ok {
                            return Err("the sensor is not on the trust list".into());
                        }
                        r.verify(&RustCrypto, key, seq).map_err(|e| e.to_string())?;
                        check_order(seq, &mut highest)?;
                        r.senml().to_vec()
                    }
                    Protection::Signed => {
                        let r = SignedReading::parse(format, raw).map_err(|e| e.to_string())?;
                        let seq = full_seq(r.seq, highest)?;
                        out.seq = seq;
                        out.timestamp = r.timestamp;
                        let (Some(key), Some(ep)) = (a.key, ep) else {
                            return Err("no usable key in the directory".into());
                        };
                        if !key_ok {
                            return Err("registered key does not hash to the identity".into());
                        }
                        let mut scratch = vec![0u8; r.scratch_len()];
                        r.verify_end_to_end(&RustCrypto, &key, &ep, seq, &mut scratch)
                            .map_err(|e| e.to_string())?;
                        check_order(seq, &mut highest)?;
                        let mut buf = vec![0u8; r.senml_len_bound()];
                        r.senml(&mut buf).map_err(|e| e.to_string())?.to_vec()
                    }
                };
                out.values = numbers(format, &bytes)?;
                Ok(())
            })();
            match result {
                Ok(()) => out.verified = protection != Protection::Session,
                Err(e) => out.error = Some(e),
            }
            out
        })
        .collect()
}

/// The full sequence number of a reading, reconstructed in low-bits mode.
fn full_seq(seq: SeqField, highest: u64) -> Result<u64, String> {
    match seq {
        SeqField::Full(s) => Ok(s),
        SeqField::LowBits { k, bits } => sigil_freshness::reconstruct(highest, k, bits)
            .ok_or_else(|| "cannot reconstruct sequence number".into()),
    }
}

/// Readings come oldest first with rising numbers: one that does not is refused.
fn check_order(seq: u64, highest: &mut u64) -> Result<(), String> {
    if seq <= *highest {
        return Err(format!("sequence number {seq} not above {highest}"));
    }
    *highest = seq;
    Ok(())
}

/// The numeric values of a SenML pack (CBOR, or JSON for `format` JWS).
fn numbers(
    format: ReadingFormat,
    bytes: &[u8],
) -> Result<Vec<(String, f64, Option<String>)>, String> {
    let resolved = match format {
        ReadingFormat::Cose => senml::resolve(
            senml::Pack::parse_cbor(bytes)
                .map_err(|e| e.to_string())?
                .records(),
        ),
        ReadingFormat::Jws => {
            let recs = senml::parse_json(bytes).map_err(|e| e.to_string())?;
            senml::resolve(recs.iter().map(|r| r.as_record()))
        }
    }
    .map_err(|e| e.to_string())?;
    Ok(resolved
        .into_iter()
        .filter_map(|r| match r.value {
            Some(OwnedValue::Number(v)) => Some((r.name, v, r.unit)),
            _ => None,
        })
        .collect())
}

/// Asks the server for a PSK-only node's reading key (`GET /keys/<identity>`, a COSE_Key):
/// given only to a coaps:// session allowed to read the node. `Err` says why not.
pub async fn reading_key(client: &mut CoapClient, ep: &Identity) -> Result<ReadingKey> {
    let resp = client.get(&format!("keys/{ep}"), &[]).await?;
    if resp.code != Code::CONTENT {
        anyhow::bail!(
            "the server answered {} for the reading key of {ep}: {}",
            resp.code,
            String::from_utf8_lossy(&resp.payload)
        );
    }
    sigil_objects::mac::parse_reading_key(&resp.payload, ep).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A CoAP error answer from the broker or directory for one path.
#[derive(Clone, Debug)]
pub struct Refused {
    pub code: Code,
    pub diagnostic: String,
    pub path: String,
}

impl Refused {
    pub(crate) fn new(code: Code, payload: &[u8], path: &str) -> Self {
        let diagnostic: String = String::from_utf8_lossy(payload)
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        Self {
            code,
            diagnostic,
            path: path.to_string(),
        }
    }

    /// Why a sensor cannot be read, and what to do about it. `reader` is this application's
    /// identity when known.
    pub fn reason(&self, reader: Option<&str>, ep: &str) -> String {
        let code = self.code;
        let what = if self.diagnostic.is_empty() {
            code.to_string()
        } else {
            format!("{code} {}", self.diagnostic)
        };
        let reader = reader.unwrap_or("<reader identity>");
        if self.diagnostic.contains("revoked") {
            format!("revoked ({what}): the operator revoked this identity; its readings are no longer served as current")
        } else if code == Code::FORBIDDEN {
            format!(
                "not granted ({what}): ask the operator for `sigil provision grant {reader} {ep}`"
            )
        } else if code == Code::UNAUTHORIZED && self.diagnostic.contains("session") {
            format!("refused ({what}): this server lets only coaps:// sessions read: use a coaps:// --server with --dtls")
        } else if code == Code::UNAUTHORIZED && self.diagnostic.contains("token") {
            format!("refused ({what}): the token expired or its holder was revoked: run again with --token")
        } else if code == Code::NOT_FOUND {
            format!(
                "gone ({what}): the sensor's registration expired or was removed since the lookup"
            )
        } else if code == Code::SERVICE_UNAVAILABLE && self.diagnostic.contains("busy") {
            format!(
                "database busy ({what}): another process holds the server's database: try again"
            )
        } else if code == Code::SERVICE_UNAVAILABLE && self.diagnostic.contains("full") {
            format!("server storage full ({what}): the operator must free space on the server: try again later")
        } else if code == Code::SERVICE_UNAVAILABLE {
            format!("server unavailable ({what}): try again")
        } else if code.class() == 5 {
            format!(
                "server error ({what}): the server's log says why: try again, or tell the operator"
            )
        } else {
            format!("refused ({what})")
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "broker answered {} for {}", self.code, self.path)?;
        if !self.diagnostic.is_empty() {
            write!(f, ": {}", self.diagnostic)?;
        }
        Ok(())
    }
}

impl std::error::Error for Refused {}

/// Fetches the newest `n` stored readings of a topic, oldest first.
pub async fn fetch_recent(client: &mut CoapClient, href: &str, n: u32) -> Result<Vec<Vec<u8>>> {
    fetch_page(client, href, vec![format!("n={n}")]).await
}

/// Up to `n` stored readings of a topic numbered above `after`, oldest first (a follower's
/// gap: readings it was not notified of).
pub async fn fetch_after(
    client: &mut CoapClient,
    href: &str,
    after: u64,
    n: u32,
) -> Result<Vec<Vec<u8>>> {
    fetch_page(
        client,
        href,
        vec![format!("n={n}"), format!("after={after}")],
    )
    .await
}

/// One history request (`query`): the readings as the broker stored them.
async fn fetch_page(
    client: &mut CoapClient,
    href: &str,
    query: Vec<String>,
) -> Result<Vec<Vec<u8>>> {
    let resp = client
        .request(
            Code::GET,
            &crate::coap::RequestSpec {
                path: href,
                query,
                accept: Some(ContentFormat::CBOR.0),
                ..Default::default()
            },
        )
        .await?;
    if resp.code != Code::CONTENT {
        return Err(Refused::new(resp.code, &resp.payload, href).into());
    }
    let mut d = Decoder::new(&resp.payload);
    let count = d
        .array()
        .map_err(|e| anyhow::anyhow!("broker history is not a CBOR array: {e}"))?;
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        out.push(
            d.bytes()
                .map_err(|e| anyhow::anyhow!("broker history item: {e}"))?
                .to_vec(),
        );
    }
    Ok(out)
}

/// Fetches every stored reading of a topic, oldest first, page by page.
pub async fn fetch_history(
    client: &mut CoapClient,
    href: &str,
    protection: Protection,
    page: u32,
) -> Result<Vec<Vec<u8>>> {
    let mut all = Vec::new();
    let mut after = 0u64;
    loop {
        let q = [format!("n={page}"), format!("after={after}")];
        let resp = client
            .request(
                Code::GET,
                &crate::coap::RequestSpec {
                    path: href,
                    query: q.to_vec(),
                    accept: Some(ContentFormat::CBOR.0),
                    ..Default::default()
                },
            )
            .await?;
        if resp.code != Code::CONTENT {
            return Err(Refused::new(resp.code, &resp.payload, href).into());
        }
        let mut d = Decoder::new(&resp.payload);
        let n = d
            .array()
            .map_err(|e| anyhow::anyhow!("broker history is not a CBOR array: {e}"))?;
        let mut page_items = Vec::with_capacity(n);
        for _ in 0..n {
            page_items.push(
                d.bytes()
                    .map_err(|e| anyhow::anyhow!("broker history item: {e}"))?
                    .to_vec(),
            );
        }
        let got = page_items.len();
        // The next page starts after the last sequence number seen (parsed, not trusted: a
        // wrong number only makes the broker send readings we verify anyway).
        if let Some(last) = page_items.last() {
            let fmt = if last.first() == Some(&0xd2) || last.first() == Some(&0x84) {
                ReadingFormat::Cose
            } else {
                ReadingFormat::Jws
            };
            let seq = match protection {
                Protection::Signed => SignedReading::parse(fmt, last)
                    .ok()
                    .and_then(|r| r.full_seq()),
                Protection::Mac => MacedReading::parse(last).ok().and_then(|r| r.full_seq()),
                // Nothing to page by ([`fetch_recent`] takes the newest page instead).
                Protection::Session => None,
            };
            match seq {
                Some(s) if s > after => after = s,
                _ => {
                    all.extend(page_items);
                    break;
                }
            }
        }
        all.extend(page_items);
        if (got as u32) < page {
            break;
        }
        if all.len() >= MAX_HISTORY {
            // The broker is not trusted: it cannot make the application hold unbounded data.
            anyhow::bail!("{href}: more than {MAX_HISTORY} readings; fetch with --history N");
        }
    }
    Ok(all)
}

/// The identities of the sensors the Resource Directory announces, looked up over a session of
/// their own (for a client that then asks for a token to read them).
pub async fn look_up(
    server: std::net::SocketAddr,
    security: crate::transport::Security,
    config: sigil_dtls::Config,
    carrier: crate::transport::Carrier,
) -> Result<Vec<String>> {
    let t = crate::transport::Transport::open_over(server, security, config, carrier).await?;
    let mut client = CoapClient::over(t, TransmissionParameters::default());
    let lookup = client
        .get("rd-lookup/res", &["rt=sigil.env"])
        .await
        .context("resource directory lookup")?;
    client.close().await;
    if lookup.code != Code::CONTENT {
        anyhow::bail!("resource directory answered {}", lookup.code);
    }
    let mut eps: Vec<String> = parse_lookup(&String::from_utf8_lossy(&lookup.payload))?
        .into_iter()
        .map(|a| a.ep)
        .collect();
    eps.sort();
    eps.dedup();
    Ok(eps)
}

/// What [`run_with`] reads beyond the defaults.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Fetch only the newest N readings per sensor (default: all).
    pub history: Option<u32>,
    /// Only these sensors (default: every one the directory announces).
    pub select: Option<Vec<Identity>>,
    /// This application's identity, for the fix a refusal names.
    pub reader: Option<String>,
    /// Give up on the server after this long without an answer (default: CoAP's own
    /// MAX_TRANSMIT_WAIT).
    pub timeout: Option<std::time::Duration>,
}

/// Looks sensors up, fetches and verifies their readings. `psk_nodes`: the identities whose
/// MACed or session readings are taken ([`load_psk_nodes`]); anyone else's are failures.
pub async fn run(
    transport: crate::transport::Transport,
    trust: Option<&HashSet<Identity>>,
    psk_nodes: &HashSet<Identity>,
    history: Option<u32>,
) -> Result<AppReport> {
    let options = Options {
        history,
        ..Default::default()
    };
    run_with(transport, trust, psk_nodes, &options).await
}

/// [`run`] with [`Options`]. A sensor whose topic the broker refuses, answers with a 5.xx
/// (its database busy or full) or does not answer within the timeout is reported as not
/// readable, with the reason and the fix; the others are still read. Only a lookup that fails
/// (the server not reached, or refusing it) is an error.
pub async fn run_with(
    transport: crate::transport::Transport,
    trust: Option<&HashSet<Identity>>,
    psk_nodes: &HashSet<Identity>,
    options: &Options,
) -> Result<AppReport> {
    let mut client = CoapClient::over(transport, TransmissionParameters::default());
    client.timeout = options.timeout;
    let (announced, missing) = lookup_sensors(&mut client, options).await?;
    let mut report = AppReport {
        identities: if trust.is_some() {
            IDENTITIES_TRUST_LIST
        } else {
            IDENTITIES_UNCHECKED
        },
        sensors: missing,
    };
    let reader = options.reader.as_deref();
    for a in announced {
        let protection = Protection::of_content_format(a.content_format);
        let ep = Identity::parse(&a.ep).ok();
        // The topic first: a sensor this reader may not read is reported as such.
        let fetched = match options.history {
            // Session readings carry no number to page by: the newest page of them.
            None if protection == Protection::Session => {
                fetch_recent(&mut client, &a.href, 100).await
            }
            None => fetch_history(&mut client, &a.href, protection, 100).await,
            // e.g. 4.00 for n over the broker's limit (docs/wire-formats.md).
            Some(n) => fetch_recent(&mut client, &a.href, n).await,
        };
        // Past the lookup the server is reachable: a refusal, a 5.xx (its database busy or
        // full) or no answer for one topic makes that sensor not readable, not the report.
        let raws = match fetched {
            Ok(r) => r,
            Err(e) => {
                let why = topic_failure(&e, reader, &a.ep, options.timeout);
                let mut view = unreadable(&a.ep, ep, &a.href, why);
                view.protection = protection;
                view.algorithm = a.key.map(|k| k.algorithm().name().to_string());
                report.sensors.push(view);
                continue;
            }
        };
        let SensorTrust {
            key_ok,
            trusted,
            key_error,
            reading_key,
            ..
        } = sensor_trust(&mut client, &a, trust, psk_nodes).await;
        // Readings from an identity the application does not trust are not verified as good.
        let mut readings = verify_readings(
            &a,
            &raws,
            key_ok && trusted != Some(false),
            reading_key.as_ref(),
        );
        if let Some(why) = &key_error {
            for r in readings.iter_mut() {
                r.verified = false;
                r.error = Some(why.clone());
            }
        }
        let verified = readings.iter().filter(|r| r.verified).count();
        let unverifiable = readings
            .iter()
            .filter(|r| r.protection == Protection::Session && r.error.is_none())
            .count();
        report.sensors.push(SensorView {
            label: ep.map(|e| e.short_label().to_string()).unwrap_or_default(),
            ep: a.ep.clone(),
            topic: a.href.clone(),
            algorithm: a.key.map(|k| k.algorithm().name().to_string()),
            protection,
            key_matches_identity: key_ok && a.key.is_some(),
            trusted,
            readable: true,
            refused: None,
            verified,
            failed: readings.len() - verified - unverifiable,
            unverifiable,
            problems: problems(&readings),
            readings,
        });
    }
    client.close().await;
    Ok(report)
}

/// What this application makes of one announced sensor before taking its readings.
pub(crate) struct SensorTrust {
    pub ep: Option<Identity>,
    /// Its key binds to its identity (or, for a PSK-only node, its own list names it one).
    pub key_ok: bool,
    /// On the trust list; `None` without one.
    pub trusted: Option<bool>,
    /// Why its readings are not taken, if they are not.
    pub key_error: Option<String>,
    /// A MACed topic's reading key, as the server disclosed it to this session.
    pub reading_key: Option<ReadingKey>,
}

/// Binds `a`'s key ([`bind_key`]), applies this application's lists ([`check_identity`]) and
/// asks for a MACed topic's reading key.
pub(crate) async fn sensor_trust(
    client: &mut CoapClient,
    a: &Announced,
    trust: Option<&HashSet<Identity>>,
    psk_nodes: &HashSet<Identity>,
) -> SensorTrust {
    let (ep, mut key_ok, mut trusted) = bind_key(a, trust);
    let mut key_error = None;
    check_identity(
        a,
        trust,
        psk_nodes,
        (&mut key_ok, &mut trusted, &mut key_error),
    );
    let reading_key = match (Protection::of_content_format(a.content_format), ep) {
        (Protection::Mac, Some(ep)) if key_ok => match reading_key(client, &ep).await {
            Ok(k) => Some(k),
            Err(e) => {
                key_error = Some(e.to_string());
                None
            }
        },
        _ => None,
    };
    SensorTrust {
        ep,
        key_ok,
        trusted,
        key_error,
        reading_key,
    }
}

/// What this application's own lists say of `a` beyond its key binding ([`bind_key`]): a
/// PSK-only node's readings are taken only when the list names it one, and a sensor off the
/// trust list is not verified as good. Sets `key_ok`, `trusted` and why not (`key_error`).
pub(crate) fn check_identity(
    a: &Announced,
    trust: Option<&HashSet<Identity>>,
    psk_nodes: &HashSet<Identity>,
    (key_ok, trusted, key_error): (&mut bool, &mut Option<bool>, &mut Option<String>),
) {
    let ep = Identity::parse(&a.ep).ok();
    if Protection::of_content_format(a.content_format) != Protection::Signed {
        // A PSK-only node has no key to bind: only this application's own list can say
        // the identity is one (the directory's `ct` and missing key prove nothing).
        let listed = ep.is_some_and(|ep| psk_nodes.contains(&ep));
        *trusted = trust.map(|_| listed);
        *key_ok = listed && a.key.is_none();
        if !*key_ok {
            *key_error = Some(format!(
                "{} is not on this application's list as a psk-node: its unsigned readings are not taken",
                a.ep
            ));
        }
    }
    if *trusted == Some(false) && *key_ok && key_error.is_none() {
        *key_error = Some(format!(
            "{} is not on this application's trust list (--trust)",
            a.ep
        ));
    }
}

/// The sensors the directory announces (`rd-lookup/res?rt=sigil.env`), only those of
/// `options.select` if given, and the selected ones it does not announce, as not readable.
pub(crate) async fn lookup_sensors(
    client: &mut CoapClient,
    options: &Options,
) -> Result<(Vec<Announced>, Vec<SensorView>)> {
    let lookup = client
        .get("rd-lookup/res", &["rt=sigil.env"])
        .await
        .context("resource directory lookup")?;
    if lookup.code != Code::CONTENT {
        let refused = Refused::new(lookup.code, &lookup.payload, "/rd-lookup/res");
        match lookup.code {
            Code::FORBIDDEN => anyhow::bail!(
                "the resource directory refused the lookup ({} {}): this reader may not look sensors up (a token needs the `rd` scope)",
                refused.code, refused.diagnostic
            ),
            Code::UNAUTHORIZED => anyhow::bail!(
                "the resource directory refused the lookup ({} {}): this server answers lookups only over coaps:// sessions: use a coaps:// --server with --dtls",
                refused.code, refused.diagnostic
            ),
            _ => anyhow::bail!("resource directory answered {} {}", refused.code, refused.diagnostic),
        }
    }
    if lookup.content_format != Some(ContentFormat::LINK_FORMAT.0) {
        anyhow::bail!(
            "resource directory answered with content-format {:?}, not link format",
            lookup.content_format
        );
    }
    let mut announced = parse_lookup(&String::from_utf8_lossy(&lookup.payload))?;
    let mut missing = vec![];
    if let Some(select) = &options.select {
        announced.retain(|a| Identity::parse(&a.ep).is_ok_and(|ep| select.contains(&ep)));
        for id in select {
            if !announced
                .iter()
                .any(|a| Identity::parse(&a.ep).ok() == Some(*id))
            {
                missing.push(unreadable(
                    &id.to_string(),
                    Some(*id),
                    "",
                    "not in the directory: not registered, or its registration expired".into(),
                ));
            }
        }
    }
    Ok((announced, missing))
}

/// Why a topic the lookup announced could not be read: the broker's answer with its fix
/// ([`Refused::reason`]), no answer for it within `timeout`, or the error itself.
pub(crate) fn topic_failure(
    e: &anyhow::Error,
    reader: Option<&str>,
    ep: &str,
    timeout: Option<std::time::Duration>,
) -> String {
    if let Some(r) = e.downcast_ref::<Refused>() {
        return r.reason(reader, ep);
    }
    // The client's give-up messages (coap.rs: "no answer from ... within", "sent no response
    // within", "no response from ... after N retransmissions").
    let text = format!("{e:#}");
    if text.contains("no answer from")
        || text.contains("no response within")
        || text.contains("no response from")
    {
        let within = timeout.map_or_else(
            || "CoAP's MAX_TRANSMIT_WAIT".to_string(),
            |t| format!("{:?}", t),
        );
        return format!(
            "no answer for this topic within {within}: the server may be overloaded; try again (or a longer --timeout)"
        );
    }
    format!("failed ({text})")
}

/// A sensor that could not be read, and why.
fn unreadable(ep: &str, id: Option<Identity>, topic: &str, why: String) -> SensorView {
    SensorView {
        ep: ep.to_string(),
        label: id.map(|e| e.short_label().to_string()).unwrap_or_default(),
        topic: topic.to_string(),
        algorithm: None,
        protection: Protection::Signed,
        key_matches_identity: false,
        trusted: None,
        readable: false,
        refused: Some(why),
        verified: 0,
        failed: 0,
        unverifiable: 0,
        problems: vec![],
        readings: vec![],
    }
}

/// The distinct reasons readings failed, in the order first seen, with their counts.
fn problems(readings: &[CheckedReading]) -> Vec<Problem> {
    let mut out: Vec<Problem> = Vec::new();
    for e in readings.iter().filter_map(|r| r.error.as_deref()) {
        match out.iter_mut().find(|p| p.reason == e) {
            Some(p) => p.readings += 1,
            None => out.push(Problem {
                reason: e.to_string(),
                readings: 1,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests;
