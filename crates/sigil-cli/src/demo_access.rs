//! The access-control part of `sigil demo`, all over coaps://: a server that is also the
//! access-control server (ACE, RFC 9200) and serves readings only to those allowed; a device
//! paired from its label (RFC 8387 §4.1) that pins the server it was paired with; a
//! subscriber refused without a ticket and served with one (RFC 9202); and two nodes with
//! only a pre-shared key, one MACing its readings and one relying on its DTLS session, with
//! the subscriber's application telling their protection apart.

use crate::sensor::{self, SensorRun};
use crate::storage::FileStorage;
use anyhow::{bail, Context, Result};
use sigil_ace::{seal_pairing, PairingContent, Permissions, MAX_PAIRING_LEN};
use sigil_client::os::OsRng;
use sigil_client::transport::{Security, Transport};
use sigil_client::CoapClient;
use sigil_crypto::{CryptoProvider, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::{Device, DeviceConfig, DeviceStorage};
use sigil_identity::Identity;
use sigil_objects::ReadingFormat;
use sigil_server::{DtlsConfig, Server, ServerConfig, Stats, Store};
use std::path::Path;
use std::time::Duration;

/// What the access-control part showed.
#[derive(Debug, Default, serde::Serialize)]
pub struct AccessSummary {
    /// Bytes of the pairing message made from the device's label.
    pub pairing_bytes: usize,
    /// The device applied it and pinned the server it names.
    pub paired: bool,
    /// Readings the paired sensor had acknowledged over coaps://.
    pub sensor_acknowledged: usize,
    /// The subscriber's read with no session at all (expected 4.01).
    pub read_without_session: String,
    /// With its own session but no grant and no ticket (expected 4.03).
    pub read_without_ticket: String,
    /// Bytes of the ticket (access token) the AC gave after the grant.
    pub ticket_bytes: usize,
    /// Readings the subscriber verified end to end through the ticket's session.
    pub verified_with_ticket: usize,
    /// The same ticket posted again (expected 4.01, replayed).
    pub ticket_replayed: String,
    /// The sensor serving its own reading, asked without a ticket (expected 4.01).
    pub sensor_without_ticket: String,
    /// Bytes of the ticket the AC signed for the sensor.
    pub sensor_ticket_bytes: usize,
    /// Asked with it (expected 2.05), and whether the reading verified end to end.
    pub sensor_with_ticket: String,
    pub sensor_reading_verified: bool,
    /// Readings the PSK-only node with MACed readings had acknowledged over coaps://.
    pub psk_mac_acknowledged: usize,
    /// Readings the PSK-only node relying on its session had acknowledged.
    pub psk_session_acknowledged: usize,
    /// The MAC node's readings the subscriber verified under the disclosed reading key.
    pub psk_mac_verified: usize,
    /// The session node's readings the subscriber could only take on the broker's word.
    pub psk_session_unverifiable: usize,
    /// Bytes of one MACed reading on the wire.
    pub mac_reading_bytes: usize,
}

impl AccessSummary {
    pub fn ok(&self) -> bool {
        self.paired
            && self.sensor_acknowledged > 0
            && self.read_without_session == "4.01"
            && self.read_without_ticket == "4.03"
            && self.verified_with_ticket > 0
            && self.ticket_replayed == "4.01"
            && self.sensor_without_ticket == "4.01"
            && self.sensor_with_ticket == "2.05"
            && self.sensor_reading_verified
            && self.psk_mac_acknowledged > 0
            && self.psk_session_acknowledged > 0
            && self.psk_mac_verified == self.psk_mac_acknowledged
            && self.psk_session_unverifiable == self.psk_session_acknowledged
    }
}

/// The subscriber's own coaps:// credentials: its identity and pre-shared key.
fn own_security(reader: &Identity, psk: &[u8]) -> Security {
    Security::Psk {
        identity: reader.to_string().into_bytes(),
        key: psk.to_vec(),
        ecdhe: false,
    }
}

pub async fn run(dir: &Path, say: &dyn Fn(&str)) -> Result<AccessSummary> {
    let mut out = AccessSummary::default();
    let db = dir.join("access.db");
    let stats = Stats::default();
    let mut config = ServerConfig::new("127.0.0.1:0".parse()?, db.clone());
    config.service.authorize_reads = true;
    config.dtls = Some(DtlsConfig::new("127.0.0.1:0".parse()?));
    let server = Server::start(config, stats.clone()).await?;
    let result = steps(&server, &db, dir, &mut out, say).await;
    server.shutdown().await;
    result.map(|()| out)
}

async fn steps(
    server: &sigil_server::ServerHandle,
    db: &Path,
    dir: &Path,
    out: &mut AccessSummary,
    say: &dyn Fn(&str),
) -> Result<()> {
    let dtls = server
        .dtls
        .as_ref()
        .context("the server has no coaps:// port")?;
    let now = sigil_client::os::unix_now().as_secs();
    let store = Store::open(db)?;
    say(&format!(
        "access control: server coaps://{} (identity {}) is its own access-control server; reads need a grant or a ticket",
        dtls.addr, dtls.identity
    ));

    // A fresh device: its label goes on the list, and the server pairs it from the label.
    let state = dir.join("paired-sensor");
    let mut storage = FileStorage::open(&state)?;
    let device_config = DeviceConfig {
        algorithm: SignatureAlgorithm::EcdsaP256,
        format: ReadingFormat::Cose,
        lifetime: Duration::from_secs(300),
        ..Default::default()
    };
    let mut device = Device::boot(
        RustCrypto,
        device_config,
        &mut storage,
        &mut OsRng,
        &[],
        &[],
    )
    .map_err(|e| anyhow::anyhow!("paired sensor: {e}"))?;
    let sensor_id = *device.identity();
    sigil_server::provision::import(
        &store,
        &format!("{} device paired sensor\n", sensor_id.label()),
        now,
        false,
    )?;

    // The subscriber: an identity with a pre-shared key, on the list but granted nothing yet.
    let reader_key = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut OsRng)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let reader_public = RustCrypto
        .public_key(&reader_key)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let reader =
        Identity::of_key(&RustCrypto, &reader_public, b"").map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut psk = [0u8; 16];
    sigil_crypto::Rng::fill(&mut OsRng, &mut psk).map_err(|e| anyhow::anyhow!("{e}"))?;
    sigil_server::provision::import(
        &store,
        &format!("{} device subscriber\n", reader.label()),
        now,
        false,
    )?;
    sigil_server::provision::set_psk(&store, &reader, &psk, now)?;

    let (alg, secret) = store
        .server_key("dtls")?
        .context("the server made no key")?;
    let server_key = SecretKey::from_bytes(
        SignatureAlgorithm::from_cose(alg).context("server key algorithm")?,
        &secret,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let uri = format!("coaps://{}", dtls.addr);
    // Sealed here, not by `sigil provision pair`: the server keeps no record of it, so the
    // subscriber it names gets no grant from it (the demo's reader reads through a ticket).
    let content = PairingContent {
        device: sensor_id,
        serial: u64::try_from(now).unwrap_or(0),
        server: dtls.identity,
        server_other: b"",
        server_uri: Some(&uri),
        group: sensor_id,
        subscriber: reader,
    };
    let mut message = [0u8; MAX_PAIRING_LEN];
    let n = seal_pairing(
        &content,
        device.public_key(),
        &server_key,
        &RustCrypto,
        &mut OsRng,
        &mut message,
    )
    .map_err(|e| anyhow::anyhow!("pairing: {e}"))?;
    out.pairing_bytes = n;
    let paired = device
        .apply_pairing(&mut storage, &message[..n], None)
        .map_err(|e| anyhow::anyhow!("pairing refused: {e}"))?;
    out.paired = paired.server == dtls.identity;
    say(&format!(
        "  device {} paired from its label ({n} B, encrypted to its key, signed by the server); it pins server {}",
        sensor_id.short_label(),
        paired.server
    ));

    // The paired sensor publishes over coaps://, pinning the server its pairing named.
    let device_key = storage
        .load_key()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .context("no device key")?;
    // It also serves its own readings (the seed's publisher-as-server), trusting tokens signed
    // by the server its pairing named.
    let serve_addr = {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0")?;
        probe.local_addr()?
    };
    let tap = crate::serve::Tap::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let serving = tokio::spawn(crate::serve::serve(
        crate::serve::ServeStart {
            listen: serve_addr,
            state: state.clone(),
            identity: sensor_id,
            key: device_key.clone(),
            pairing: Some(paired),
            server_identity: None,
            tap: tap.clone(),
            dtls: Default::default(),
        },
        stop_rx.clone(),
    ));
    let run = SensorRun {
        server: dtls.addr,
        interval: Duration::from_millis(200),
        readings: Some(3),
        phase: 0.3,
        security: Security::RawPublicKey {
            own: Some(device_key),
            server: paired.server,
        },
        dtls: Default::default(),
        association: None,
        carrier: Default::default(),
        tap: Some(tap),
    };
    let report = sensor::run(device, storage, run, stop_rx.clone(), |_| {}).await?;
    out.sensor_acknowledged = report.acknowledged.len();
    say(&format!(
        "  paired sensor published {} readings over coaps:// (raw public keys)",
        out.sensor_acknowledged
    ));

    // Without a session, then with one but without a grant or a ticket: refused.
    let config = sigil_dtls::Config::default();
    let own = own_security(&reader, &psk);
    let t = Transport::open(dtls.addr, own.clone(), config).await?;
    let mut c = CoapClient::over(t, sigil_coap::TransmissionParameters::default());
    let lookup = c.get("rd-lookup/res", &["rt=sigil.env"]).await?;
    let announced = sigil_client::app::parse_lookup(&String::from_utf8_lossy(&lookup.payload))?;
    let Some(topic) = announced
        .iter()
        .find(|a| a.ep == sensor_id.to_string())
        .map(|a| a.href.clone())
    else {
        bail!("the paired sensor is not in the directory");
    };
    out.read_without_ticket = c.get(&topic, &[]).await?.code.to_string();
    c.close().await;
    let mut plain = CoapClient::connect(server.local_addr, Default::default()).await?;
    out.read_without_session = plain.get(&topic, &[]).await?.code.to_string();
    say(&format!(
        "  subscriber {} reads {topic}: {} with no session, {} with its own session but no ticket",
        reader.short_label(),
        out.read_without_session,
        out.read_without_ticket
    ));

    // The installer grants it the sensor; it asks the AC for a ticket and reads through it.
    store.grant_read(&reader, &sensor_id, now)?;
    let scope = vec![
        (sigil_ace::RD_OBJECT.to_string(), Permissions::READ),
        (sensor_id.to_string(), Permissions::READ),
    ];
    let (ticket, t) =
        sigil_client::ace::open_with_token(dtls.addr, own, config, Default::default(), &scope)
            .await?;
    out.ticket_bytes = ticket.token.len();
    let trust: std::collections::HashSet<Identity> = [sensor_id].into_iter().collect();
    let app = sigil_client::app::run(t, Some(&trust), &Default::default(), None).await?;
    out.verified_with_ticket = app.verified();
    say(&format!(
        "  granted: the AC gave a ticket of {} B (symmetric PoP key); over the ticket's session {} readings verified end to end",
        out.ticket_bytes, out.verified_with_ticket
    ));
    // A ticket is accepted once.
    out.ticket_replayed = match sigil_client::ace::post_authz_info(&mut plain, &ticket.token).await
    {
        Ok(()) => "2.01".into(),
        Err(e) => e
            .downcast_ref::<sigil_client::ace::Refused>()
            .map(|r| r.code.to_string())
            .unwrap_or_else(|| e.to_string()),
    };
    say(&format!(
        "  the same ticket posted again to /authz-info: {} (replayed)",
        out.ticket_replayed
    ));

    // The sensor itself as resource server: no ticket, no reading; a ticket the AC signed for
    // it, bound to the subscriber's key, and the sensor checks it offline.
    let rs = sigil_client::sensor_rs::get_over_rpk(
        serve_addr,
        sensor_id,
        reader_key.clone(),
        "reading",
        config,
    )
    .await?;
    out.sensor_without_ticket = rs.0.code.to_string();
    let t = Transport::open(dtls.addr, own_security(&reader, &psk), config).await?;
    let mut c = CoapClient::over(t, sigil_coap::TransmissionParameters::default());
    let ticket = sigil_client::ace::request_token(
        &mut c,
        Some(&sensor_id.to_string()),
        &[(sensor_id.to_string(), Permissions::READ)],
        Some(sigil_client::ace::BindKey {
            key: &reader_key,
            client: reader,
        }),
    )
    .await;
    c.close().await;
    let ticket = ticket.context("a ticket for the sensor")?;
    out.sensor_ticket_bytes = ticket.token.len();
    let posted = sigil_client::sensor_rs::post_token(serve_addr, &ticket.token).await?;
    if posted.code.to_string() != "2.01" {
        bail!("the sensor refused the ticket: {}", posted.code);
    }
    let (r, key) = sigil_client::sensor_rs::get_over_rpk(
        serve_addr,
        sensor_id,
        reader_key.clone(),
        "reading",
        config,
    )
    .await?;
    out.sensor_with_ticket = r.code.to_string();
    out.sensor_reading_verified = sigil_client::sensor_rs::verify_served_reading(
        r.content_format,
        &r.payload,
        &key,
        &sensor_id,
    )
    .is_ok();
    say(&format!(
        "  the sensor serving its own reading: {} without a ticket; with a ticket of {} B signed by the AC: {}, verified end to end: {}",
        out.sensor_without_ticket, out.sensor_ticket_bytes, out.sensor_with_ticket, out.sensor_reading_verified
    ));
    let _ = stop_tx.send(true);
    let _ = serving.await;
    psk_only_nodes(dtls.addr, &store, dir, &reader, &psk, out, say).await
}

/// Two nodes with only a pre-shared key (no key pair): provisioned with a random identity and
/// a PSK, they register and publish over their own PSK sessions, one MACing its readings;
/// the subscriber, granted both, verifies the MACed ones under the reading key the server
/// discloses to it and sees the others as taken on the broker's word.
async fn psk_only_nodes(
    server: std::net::SocketAddr,
    store: &Store,
    dir: &Path,
    reader: &Identity,
    reader_psk: &[u8],
    out: &mut AccessSummary,
    say: &dyn Fn(&str),
) -> Result<()> {
    let now = sigil_client::os::unix_now().as_secs();
    let mut nodes = Vec::new();
    for (mode, label) in [
        (sigil_device::PskMode::Mac, "mac"),
        (sigil_device::PskMode::Session, "session"),
    ] {
        let mut key = [0u8; 16];
        sigil_crypto::Rng::fill(&mut OsRng, &mut key).map_err(|e| anyhow::anyhow!("{e}"))?;
        let id = sigil_server::provision::add_psk_node(
            store,
            &format!("PSK-only node ({label})"),
            &key,
            now,
            &mut OsRng,
        )?;
        store.grant_read(reader, &id, now)?;
        let mut storage = FileStorage::open(&dir.join(format!("psk-node-{label}")))?;
        let config = sigil_device::PskConfig {
            mode,
            ..Default::default()
        };
        let node =
            sigil_device::PskNode::boot(RustCrypto, config, id, &key, &mut storage, &mut OsRng)
                .map_err(|e| anyhow::anyhow!("PSK-only node: {e}"))?;
        let run = SensorRun {
            server,
            interval: Duration::from_millis(200),
            readings: Some(3),
            phase: 0.7,
            security: own_security(&id, &key),
            dtls: Default::default(),
            association: None,
            carrier: Default::default(),
            tap: None,
        };
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let report =
            sensor::run(sensor::PskSensor::new(node), storage, run, stop_rx, |_| {}).await?;
        nodes.push((id, report.acknowledged.len()));
    }
    out.psk_mac_acknowledged = nodes[0].1;
    out.psk_session_acknowledged = nodes[1].1;
    say(&format!(
        "  PSK-only nodes (no key pair): {} published {} MACed readings, {} published {} over its DTLS session only",
        nodes[0].0.short_label(),
        out.psk_mac_acknowledged,
        nodes[1].0.short_label(),
        out.psk_session_acknowledged
    ));
    let t = Transport::open(
        server,
        own_security(reader, reader_psk),
        sigil_dtls::Config::default(),
    )
    .await?;
    // The subscriber's own list names both as PSK-only nodes: only then are their unsigned
    // readings taken.
    let listed: std::collections::HashSet<Identity> = nodes.iter().map(|n| n.0).collect();
    let app = sigil_client::app::run(t, Some(&listed), &listed, None).await?;
    let view = |id: &Identity| app.sensors.iter().find(|s| s.ep == id.to_string());
    let mac = view(&nodes[0].0).context("the MAC node is not in the directory")?;
    let session = view(&nodes[1].0).context("the session node is not in the directory")?;
    out.psk_mac_verified = mac.verified;
    out.psk_session_unverifiable = session.unverifiable;
    out.mac_reading_bytes = store
        .shared_transaction(|b| b.latest_reading(&nodes[0].0))?
        .map_or(0, |r| r.raw.len());
    say(&format!(
        "  the subscriber's application: {} MACed readings verified under the reading key the server disclosed to it ({} B each); {} session readings taken on the broker's word",
        out.psk_mac_verified, out.mac_reading_bytes, out.psk_session_unverifiable
    ));
    Ok(())
}
