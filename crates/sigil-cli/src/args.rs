//! Argument types and parsers shared by several commands: durations, algorithms, keys,
//! CoAP transmission parameters and coaps:// credentials.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use sigil_client::os::OsRng;
use sigil_client::Security;
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_dtls::Config as DtlsConfig;
use sigil_identity::Identity;
use sigil_objects::ReadingFormat;
use std::path::PathBuf;
use std::time::Duration;

/// How a client authenticates to a coaps:// server (RFC 7252 §9.1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DtlsMode {
    /// Pre-shared key, TLS_PSK_WITH_AES_128_CCM_8.
    Psk,
    /// Pre-shared key with forward secrecy, TLS_ECDHE_PSK_WITH_AES_128_CCM_8_SHA256.
    EcdhePsk,
    /// Raw public keys pinned to RFC 8387 identities, TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8.
    Rpk,
    /// X.509 certificates to a trust anchor.
    Cert,
}

/// How the DTLS handshake travels to a coaps:// server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DtlsCarrier {
    /// DTLS flights over UDP, with DTLS's retransmission timers and fragmentation.
    #[default]
    Records,
    /// Each flight in a Confirmable CoAP request to the server's `/dtls` resource, with
    /// CoAP's retransmission and block-wise transfer (DTLS as a CoAP resource).
    Coap,
}

impl From<DtlsCarrier> for sigil_client::Carrier {
    fn from(c: DtlsCarrier) -> Self {
        match c {
            DtlsCarrier::Records => Self::Records,
            DtlsCarrier::Coap => Self::Coap,
        }
    }
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let v: f64 = num.parse().map_err(|_| format!("bad duration '{s}'"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" | "" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => return Err(format!("bad duration unit in '{s}' (ms, s, m, h)")),
    };
    if !(0.0..=1e7).contains(&secs) {
        return Err(format!("duration out of range: '{s}'"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A retention window: a duration as [`parse_duration`] takes, or whole days (`30d`), above
/// zero and at most 100 years.
pub fn parse_retention(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = match t.strip_suffix('d') {
        Some(days) => {
            let days: u64 = days
                .parse()
                .map_err(|_| format!("bad retention '{s}' (e.g. 30d, 12h, 90m)"))?;
            if days > 36_500 {
                return Err(format!("retention out of range: '{s}' (at most 36500d)"));
            }
            Duration::from_secs(days * 86_400)
        }
        None => parse_duration(t)?,
    };
    if d.is_zero() {
        return Err(format!("retention must be above zero: '{s}'"));
    }
    Ok(d)
}

/// A socket address: a literal, or a host name with a port resolved now
/// ([`crate::util::resolve_addr`]).
pub fn parse_socket_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    crate::util::resolve_addr(s, "address").map_err(|e| format!("{e:#}"))
}

pub fn parse_alg(s: &str) -> Result<SignatureAlgorithm, String> {
    SignatureAlgorithm::from_name(s)
        .ok_or_else(|| format!("unknown algorithm '{s}' (ed25519, p256)"))
}

pub fn parse_format(s: &str) -> Result<ReadingFormat, String> {
    match s {
        "cose" => Ok(ReadingFormat::Cose),
        "jws" | "jose" => Ok(ReadingFormat::Jws),
        _ => Err(format!("unknown format '{s}' (cose, jws)")),
    }
}

pub fn parse_key(s: &str) -> Result<PublicKey> {
    let (alg, hex_key) = s
        .split_once(':')
        .context("a key is alg:hex, e.g. ed25519:d75a98...")?;
    let alg = parse_alg(alg).map_err(anyhow::Error::msg)?;
    PublicKey::from_bytes(alg, &hex::decode(hex_key.trim()).context("key is not hex")?)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// CoAP transmission parameters (RFC 7252 §4.8).
#[derive(Args)]
pub struct TransmissionArgs {
    /// ACK_TIMEOUT.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub ack_timeout: Duration,
    /// ACK_RANDOM_FACTOR (at least 1.0).
    #[arg(long, default_value_t = 1.5)]
    pub ack_random_factor: f64,
    /// MAX_RETRANSMIT.
    #[arg(long, default_value_t = 4)]
    pub max_retransmit: u8,
}

impl TransmissionArgs {
    pub fn parameters(&self) -> Result<sigil_coap::TransmissionParameters> {
        if !(1.0..=10.0).contains(&self.ack_random_factor)
            || self.max_retransmit > 20
            || self.ack_timeout.is_zero()
        {
            bail!("transmission parameters out of range (ACK_RANDOM_FACTOR 1-10, MAX_RETRANSMIT 0-20, ACK_TIMEOUT > 0)");
        }
        Ok(sigil_coap::TransmissionParameters {
            ack_timeout: self.ack_timeout,
            ack_random_factor_milli: (self.ack_random_factor * 1000.0) as u32,
            max_retransmit: self.max_retransmit,
        })
    }
}

/// DTLS retransmission timing (RFC 6347 §4.2.4; RFC 7925 §11 for constrained links).
#[derive(Args, Clone)]
pub struct DtlsTimingArgs {
    /// Initial DTLS retransmission timeout (RFC 6347: 1 s; constrained links: e.g. 5 s).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub dtls_timeout: Duration,
    /// Retransmissions of a DTLS handshake flight before that handshake attempt fails
    /// (a sensor then tries again after a back-off).
    #[arg(long, default_value_t = 7)]
    pub dtls_retransmit: u32,
    /// Path MTU for DTLS records (handshake messages are fragmented to fit).
    #[arg(long, default_value_t = 1152)]
    pub dtls_mtu: usize,
    /// With rpk or cert: offer AES-128-GCM instead of CCM-8 (for comparison).
    #[arg(long)]
    pub dtls_gcm: bool,
    /// Ask for an RFC 9146 connection ID, so the session survives an address change.
    #[arg(long)]
    pub dtls_connection_id: bool,
}

impl DtlsTimingArgs {
    pub fn config(&self) -> Result<DtlsConfig> {
        if !(128..=1400).contains(&self.dtls_mtu) || self.dtls_timeout.is_zero() {
            bail!("--dtls-mtu must be 128-1400 and --dtls-timeout above zero");
        }
        if !(1..=20).contains(&self.dtls_retransmit) {
            bail!("--dtls-retransmit must be 1-20");
        }
        Ok(DtlsConfig {
            initial_timeout: self.dtls_timeout,
            pmtu: self.dtls_mtu,
            gcm: self.dtls_gcm,
            connection_id: self.dtls_connection_id,
            max_retransmissions: self.dtls_retransmit,
            ..Default::default()
        })
    }
}

/// Client credentials for coaps://.
#[derive(Args, Clone)]
pub struct DtlsArgs {
    /// DTLS mode for a coaps:// server.
    #[arg(long, value_enum)]
    pub dtls: Option<DtlsMode>,
    /// cert: this client's certificate chain (PEM, leaf first). A sensor's certificate must
    /// certify its own device key.
    #[arg(long)]
    pub cert: Option<PathBuf>,
    /// cert: the private key of --cert (PEM; not for sensors, which use their device key).
    #[arg(long)]
    pub cert_key: Option<PathBuf>,
    /// cert: trust anchors (PEM) for the server's certificate.
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// The pre-shared key in hex (as printed by `sigil provision psk`).
    #[arg(long)]
    pub psk: Option<String>,
    /// A file holding the pre-shared key in hex.
    #[arg(long)]
    pub psk_file: Option<PathBuf>,
    /// PSK identity (default: the client's own identity).
    #[arg(long)]
    pub psk_identity: Option<String>,
    /// rpk: the identity of the server's key, as printed by `sigil server`. cert: if given, the
    /// certified server key must also hash to it (recommended when the CA certifies devices
    /// too).
    #[arg(long)]
    pub server_identity: Option<String>,
    /// rpk: the client's key file (`alg:hex` secret; P-256 made if missing). A sensor uses its
    /// own device key instead.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// How the handshake travels: as DTLS records, or as a CoAP resource (`PUT /dtls` on the
    /// same coaps:// port). The session's records are the same either way.
    #[arg(long, value_enum, default_value = "records")]
    pub dtls_carrier: DtlsCarrier,
    #[command(flatten)]
    pub timing: DtlsTimingArgs,
}

impl DtlsArgs {
    /// Checks every credential argument that does not need the client's own key (mode
    /// against scheme, the PSK, the pinned server identity, certificate and key files,
    /// timing), creating nothing: a command calls this before it creates any state.
    pub fn check(&self, secure: bool) -> Result<()> {
        self.timing.config()?;
        let mode = match (&self.dtls, secure) {
            (None, false) if self.dtls_carrier == DtlsCarrier::Coap => {
                bail!("--dtls-carrier needs a coaps:// server URI")
            }
            (None, false) => return Ok(()),
            (Some(_), false) => bail!("--dtls needs a coaps:// server URI"),
            (None, true) => bail!("a coaps:// server needs --dtls psk|ecdhe-psk|rpk|cert"),
            (Some(m), true) => *m,
        };
        match mode {
            DtlsMode::Psk | DtlsMode::EcdhePsk => {
                self.psk_key()?;
            }
            DtlsMode::Cert => {
                let ca = self
                    .ca
                    .as_ref()
                    .context("--dtls cert needs --ca (trust anchors, PEM)")?;
                read_certs(ca)?;
                if let Some(c) = &self.cert {
                    let chain = read_certs(c)?;
                    sigil_dtls::x509::parse(&chain[0])
                        .map_err(|e| anyhow::anyhow!("{}: {e}", c.display()))?;
                }
                if let Some(k) = &self.cert_key {
                    read_key(k)?;
                }
                if let Some(server) = &self.server_identity {
                    Identity::parse(server)
                        .map_err(|e| anyhow::anyhow!("--server-identity: {e}"))?;
                }
            }
            DtlsMode::Rpk => {
                let server = self
                    .server_identity
                    .as_deref()
                    .context("--dtls rpk needs --server-identity (printed by `sigil server`)")?;
                Identity::parse(server).map_err(|e| anyhow::anyhow!("--server-identity: {e}"))?;
                if let Some(f) = &self.key_file {
                    if f.exists() {
                        read_key_file(f)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The chain of --cert, checked to certify `device_key` (a sensor's own key).
    pub fn check_own_certificate(&self, device_key: &SecretKey) -> Result<Vec<Vec<u8>>> {
        let c = self.cert.as_ref().context("--dtls cert: no --cert")?;
        let chain = read_certs(c)?;
        let leaf = sigil_dtls::x509::parse(&chain[0])
            .map_err(|e| anyhow::anyhow!("{}: {e}", c.display()))?;
        let public = RustCrypto
            .public_key(device_key)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if leaf.key != public {
            bail!(
                "{}: the certificate is not for this device's key",
                c.display()
            );
        }
        Ok(chain)
    }

    /// The pre-shared key of --psk or --psk-file: hex, 16 to 64 bytes.
    pub(crate) fn psk_key(&self) -> Result<Vec<u8>> {
        let hex_text = match (&self.psk, &self.psk_file) {
            (Some(h), None) => h.clone(),
            (None, Some(f)) => std::fs::read_to_string(f)
                .with_context(|| format!("cannot read {}", f.display()))?,
            _ => bail!("--dtls psk needs exactly one of --psk or --psk-file"),
        };
        let key = hex::decode(hex_text.trim()).context("PSK is not hex")?;
        if !(16..=64).contains(&key.len()) {
            bail!("a PSK has 16 to 64 bytes");
        }
        Ok(key)
    }

    /// The credentials for `uri`; `own` is the client's identity and key when it has one.
    pub fn security(&self, secure: bool, own: Option<(Identity, SecretKey)>) -> Result<Security> {
        let mode = match (&self.dtls, secure) {
            (None, false) => return Ok(Security::None),
            (Some(_), false) => bail!("--dtls needs a coaps:// server URI"),
            (None, true) => bail!("a coaps:// server needs --dtls psk|ecdhe-psk|rpk|cert"),
            (Some(m), true) => *m,
        };
        match mode {
            DtlsMode::Psk | DtlsMode::EcdhePsk => {
                let key = self.psk_key()?;
                let identity = match (&self.psk_identity, &own) {
                    (Some(i), _) => i.clone(),
                    (None, Some((id, _))) => id.to_string(),
                    (None, None) => bail!("--dtls psk needs --psk-identity"),
                };
                Ok(Security::Psk {
                    identity: identity.into_bytes(),
                    key,
                    ecdhe: mode == DtlsMode::EcdhePsk,
                })
            }
            DtlsMode::Cert => {
                let ca = self
                    .ca
                    .as_ref()
                    .context("--dtls cert needs --ca (trust anchors, PEM)")?;
                let anchors = read_certs(ca)?;
                let own = match (&self.cert, &self.cert_key, own) {
                    (None, _, _) => None,
                    (Some(c), Some(k), _) => Some((read_certs(c)?, read_key(k)?)),
                    (Some(_), None, Some((_, device_key))) => {
                        let chain = self.check_own_certificate(&device_key)?;
                        Some((chain, device_key))
                    }
                    (Some(_), None, None) => bail!("--cert needs --cert-key"),
                };
                let server = self
                    .server_identity
                    .as_deref()
                    .map(Identity::parse)
                    .transpose()
                    .map_err(|e| anyhow::anyhow!("--server-identity: {e}"))?;
                Ok(Security::Certificate {
                    own,
                    anchors,
                    server,
                })
            }
            DtlsMode::Rpk => {
                let server = self
                    .server_identity
                    .as_deref()
                    .context("--dtls rpk needs --server-identity (printed by `sigil server`)")?;
                let server = Identity::parse(server).map_err(|e| anyhow::anyhow!("{e}"))?;
                let own = match (own, &self.key_file) {
                    (_, Some(f)) => Some(load_or_make_key(f)?),
                    (Some((_, k)), None) => Some(k),
                    (None, None) => None,
                };
                Ok(Security::RawPublicKey { own, server })
            }
        }
    }
}

/// The certificates of a PEM file, in order (at least one).
pub fn read_certs(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let certs = sigil_client::pem::blocks(&text, "CERTIFICATE")
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no CERTIFICATE block", path.display());
    }
    Ok(certs)
}

/// A P-256 private key from a PEM file.
pub fn read_key(path: &std::path::Path) -> Result<SecretKey> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    sigil_client::pem::p256_key(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Reads an `alg:hex` secret key file, or makes a P-256 key there (and says its identity).
pub fn load_or_make_key(path: &std::path::Path) -> Result<SecretKey> {
    if path.exists() {
        return read_key_file(path);
    }
    let key = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut OsRng)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = format!("p256:{}\n", hex::encode(key.to_bytes()));
    {
        use std::io::Write;
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        o.open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let public = RustCrypto
        .public_key(&key)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let id = Identity::of_key(&RustCrypto, &public, b"").map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "new DTLS client key in {}; its identity (provision it): {id}",
        path.display()
    );
    Ok(key)
}

/// Reads an `alg:hex` secret key file.
pub fn read_key_file(path: &std::path::Path) -> Result<SecretKey> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let (alg, hex_text) = text
        .trim()
        .split_once(':')
        .context("key file: expected alg:hex")?;
    let alg = parse_alg(alg).map_err(|e| anyhow::anyhow!(e))?;
    let bytes = hex::decode(hex_text).context("key file: not hex")?;
    SecretKey::from_bytes(alg, &bytes).map_err(|e| anyhow::anyhow!("key file: {e}"))
}
