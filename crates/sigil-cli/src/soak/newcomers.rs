//! The honest newcomers the soak starts while the many-hosts attacks run: provisioned
//! before them, each a signing device or a PSK-only node over its own transport, and when
//! each was first served.

use super::*;

/// What a newcomer runs: a signing device or a PSK-only node.
pub(super) enum NewMachine {
    Signing(Box<Device<RustCrypto>>),
    PskOnly(Box<sigil_device::PskNode<RustCrypto>>),
}

/// An honest device provisioned before the attacks and started during them.
pub(super) struct NewcomerPlan {
    pub(super) what: &'static str,
    pub(super) machine: NewMachine,
    pub(super) storage: FileStorage,
    pub(super) security: Security,
    pub(super) carrier: sigil_client::Carrier,
    /// A PSK-only node's identity (its readings are MACed: the application here does not
    /// read them, so they are left out of the reconciliation).
    pub(super) psk_only: Option<sigil_identity::Identity>,
}

pub(super) fn random_psk() -> Result<Vec<u8>> {
    let mut key = vec![0u8; 16];
    getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("randomness: {e}"))?;
    Ok(key)
}

/// The newcomers: a coap:// sensor that requires signed answers and registers block-wise
/// (32-byte blocks, as a kit does), coaps:// PSK sensors over DTLS records and over
/// the CoAP carrier, and a PSK-only node (MACed readings over its DTLS session). Their label
/// lines go to `labels`; the PSK-only node is provisioned here.
pub(super) fn boot_newcomers(
    dir: &std::path::Path,
    store: &sigil_server::Store,
    labels: &mut String,
) -> Result<Vec<NewcomerPlan>> {
    let (alg, secret) = store
        .server_key("dtls")?
        .context("the server made no signing key")?;
    let server_secret = sigil_crypto::SecretKey::from_bytes(
        sigil_crypto::SignatureAlgorithm::from_cose(alg).context("server key algorithm")?,
        &secret,
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let server_key = sigil_crypto::CryptoProvider::public_key(&RustCrypto, &server_secret)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = Vec::new();
    let kinds: [(&'static str, bool, sigil_client::Carrier); 3] = [
        (
            "coap:// sensor requiring signed answers, registering block-wise",
            false,
            sigil_client::Carrier::Records,
        ),
        (
            "coaps:// sensor, handshake in DTLS records",
            true,
            sigil_client::Carrier::Records,
        ),
        (
            "coaps:// sensor, handshake over the CoAP carrier",
            true,
            sigil_client::Carrier::Coap,
        ),
    ];
    for (i, (what, secure, carrier)) in kinds.into_iter().enumerate() {
        let mut storage = FileStorage::open(&dir.join(format!("newcomer-{i}")))?;
        let config = DeviceConfig {
            lifetime: Duration::from_secs(120),
            block_szx: if secure { 4 } else { 1 },
            require_signed_answers: !secure,
            ..Default::default()
        };
        let mut d = Device::boot(RustCrypto, config, &mut storage, &mut OsRng, &[], &[])
            .map_err(|e| anyhow::anyhow!("newcomer {i}: {e}"))?;
        if !secure {
            d.trust_server_key(server_key);
        }
        labels.push_str(&format!(
            "{} device soak newcomer {i}\n",
            d.identity().label()
        ));
        let security = if secure {
            Security::Psk {
                identity: d.identity().to_string().into_bytes(),
                key: random_psk()?,
                ecdhe: false,
            }
        } else {
            Security::None
        };
        out.push(NewcomerPlan {
            what,
            machine: NewMachine::Signing(Box::new(d)),
            storage,
            security,
            carrier,
            psk_only: None,
        });
    }
    let key = random_psk()?;
    let now = sigil_client::os::unix_now().as_secs();
    let id = sigil_server::provision::add_psk_node(
        store,
        "soak newcomer PSK-only node",
        &key,
        now,
        &mut OsRng,
    )?;
    let mut storage = FileStorage::open(&dir.join("newcomer-psk-only"))?;
    let node = sigil_device::PskNode::boot(
        RustCrypto,
        sigil_device::PskConfig::default(),
        id,
        &key,
        &mut storage,
        &mut OsRng,
    )
    .map_err(|e| anyhow::anyhow!("PSK-only newcomer: {e}"))?;
    out.push(NewcomerPlan {
        what: "PSK-only node (MACed readings, DTLS records)",
        machine: NewMachine::PskOnly(Box::new(node)),
        storage,
        security: Security::Psk {
            identity: id.to_string().into_bytes(),
            key,
            ecdhe: false,
        },
        carrier: sigil_client::Carrier::Records,
        psk_only: Some(id),
    });
    Ok(out)
}

/// When a newcomer was started and first served.
#[derive(Default)]
pub(super) struct Served {
    pub(super) started: Option<Instant>,
    pub(super) first: Option<Duration>,
    pub(super) acknowledged: usize,
}

type ServedAt = Arc<Mutex<Served>>;

/// Starts one newcomer; its first acknowledged reading is noted in the returned [`ServedAt`].
pub(super) fn start_newcomer(
    n: NewcomerPlan,
    addr: SocketAddr,
    dtls_addr: SocketAddr,
    interval: Duration,
    stop: watch::Receiver<bool>,
) -> (
    ServedAt,
    tokio::task::JoinHandle<Result<SensorReport>>,
    Option<sigil_identity::Identity>,
    String,
) {
    let served: ServedAt = Arc::new(Mutex::new(Served {
        started: Some(Instant::now()),
        ..Default::default()
    }));
    let secure = n.security.is_secure();
    let run = SensorRun {
        server: if secure { dtls_addr } else { addr },
        interval,
        readings: None,
        phase: 0.3,
        security: n.security,
        dtls: Default::default(),
        association: None,
        carrier: n.carrier,
        tap: None,
    };
    let s = served.clone();
    let on_event = move |ev: &Event| {
        if let Event::Published {
            outcome: PublishOutcome::Acknowledged,
            ..
        } = ev
        {
            if let Ok(mut s) = s.lock() {
                s.acknowledged += 1;
                if s.first.is_none() {
                    s.first = s.started.map(|t| t.elapsed());
                }
            }
        }
    };
    let storage = n.storage;
    let task = match n.machine {
        NewMachine::Signing(d) => {
            tokio::spawn(async move { sensor::run(*d, storage, run, stop, on_event).await })
        }
        NewMachine::PskOnly(node) => tokio::spawn(async move {
            sensor::run(sensor::PskSensor::new(*node), storage, run, stop, on_event).await
        }),
    };
    (served, task, n.psk_only, n.what.to_string())
}
