//! The pairing message (RFC 8387 §4.1): "the server can send a pairing message to each device
//! after their initial power-on and before they have been paired with anyone, encrypted with
//! the public key of the device". It tells a freshly labelled device its trusted server, its
//! group and its default subscriber.
//!
//! Encryption alone does not say who sent it: anyone who read the device's public key can
//! encrypt to it. So the content is a COSE_Sign1 by the server, and the device accepts it only
//! if the signer's key hashes (`I = h(P|O)`) to the server identity the content names, and, if
//! the device already trusts a server, to that one. The layers, outside in:
//!
//! - a tagged `COSE_Encrypt` (RFC 9052 §5.1, tag 96) under AES-CCM-16-64-128 (alg 10) with one
//!   recipient doing direct key agreement, ECDH-ES + HKDF-256 (alg -25, RFC 9053 §6.3.1): the
//!   recipient's unprotected bucket holds the ephemeral key (-1) and, as `kid` (4), the
//!   identity of the device it is for. The ephemeral key is on the device key's curve: an EC2
//!   P-256 key for a P-256 device, an OKP X25519 key (crv 4, RFC 9053 §7.2) for an Ed25519
//!   device. The content key is HKDF-SHA-256 of the ECDH secret with
//!   the `COSE_KDF_Context` of RFC 9053 §5.2 as info, and the device identity is the external
//!   AAD of the `Enc_structure`, so a message for another device never decrypts;
//! - the plaintext: a tagged `COSE_Sign1` (tag 18) under the server's key (EdDSA or ES256);
//! - its payload: a CBOR map with integer labels, see [`PairingContent`].
//!
//! Every structure is standard COSE, so a generic COSE library (pycose) builds and opens it.
//! The key agreement uses the device's own signing key, so a label's one public key is all
//! the server needs: a P-256 device's scalar, as in static ECDH; an Ed25519 device's key
//! mapped to X25519 (RFC 7748 §4.1: the secret is the first half of SHA-512 of the seed, the
//! public value the Montgomery form of the Edwards point; `CryptoProvider::
//! x25519_secret_of_ed25519`), as libsodium's `crypto_sign_ed25519_*_to_curve25519` do.
//! Replays and second pairings are the device's to refuse, from its persisted state
//! (`sigil-device`). Layout and sizes: `docs/wire-formats.md`, "Pairing message".

use core::fmt;
use sigil_crypto::{
    AgreementAlgorithm, AgreementPublicKey, AgreementSecret, CryptoError, CryptoProvider,
    PublicKey, Rng, SecretKey, SignatureAlgorithm, CCM16_NONCE_LEN, CCM8_TAG_LEN, SIGNATURE_LEN,
};
use sigil_identity::{Identity, IDENTITY_LEN};
use sigil_objects::cbor::{CborError, Decoder, Encoder, Item};

/// Longest pairing message read or written, in bytes.
pub const MAX_PAIRING_LEN: usize = 512;
/// Longest server URI a pairing message carries.
pub const MAX_SERVER_URI_LEN: usize = 64;
/// Longest "other information" O of the server's identity.
pub const MAX_SERVER_OTHER_LEN: usize = 32;

/// COSE_Encrypt tag (RFC 9052 §2).
const TAG_ENCRYPT: u64 = 96;
const TAG_SIGN1: u64 = 18;
/// AES-CCM-16-64-128 (RFC 9053 §4.2).
pub const ALG_AES_CCM_16_64_128: i64 = 10;
/// ECDH-ES + HKDF-256 (RFC 9053 §6.3.1, Table 22).
pub const ALG_ECDH_ES_HKDF_256: i64 = -25;

const H_ALG: i64 = 1;
const H_CRIT: i64 = 2;
const H_KID: i64 = 4;
const H_IV: i64 = 5;
/// `ephemeral key` (RFC 9053 §6.3.1, Table 21).
const H_EPHEMERAL_KEY: i64 = -1;

/// COSE_Key labels and values (RFC 9052 §7, RFC 9053 §7.1).
const KEY_KTY: i64 = 1;
const KEY_CRV: i64 = -1;
const KEY_X: i64 = -2;
const KEY_Y: i64 = -3;
const KTY_OKP: u64 = 1;
const KTY_EC2: u64 = 2;
const CRV_P256: u64 = 1;
const CRV_X25519: u64 = 4;

/// Labels of the pairing content map.
const P_DEVICE: u64 = 1;
const P_SERIAL: u64 = 2;
const P_SERVER: u64 = 3;
const P_SERVER_KEY: u64 = 4;
const P_SERVER_OTHER: u64 = 5;
const P_SERVER_URI: u64 = 6;
const P_GROUP: u64 = 7;
const P_SUBSCRIBER: u64 = 8;
const MAX_CONTENT_ENTRIES: usize = 12;
const MAX_HEADER_ENTRIES: usize = 4;

/// What the server tells a device, as it signs it.
///
/// On the wire a CBOR map: `1` device identity (bstr 16), `2` serial (uint), `3` server
/// identity (bstr 16), `4` server public key (bstr, the Sign1's `alg` says which kind), `5`
/// the server identity's other information O (bstr, omitted when empty), `6` server URI
/// (tstr, optional), `7` group identity (bstr 16), `8` default subscriber identity (bstr 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PairingContent<'a> {
    /// The device the message is for.
    pub device: Identity,
    /// A number the server never repeats for this device: the device keeps it and refuses the
    /// message if it comes again.
    pub serial: u64,
    /// The trusted server (RFC 8387 §4.1): the identity the device pins.
    pub server: Identity,
    /// O in the server's `I = h(P|O)`; empty when none.
    pub server_other: &'a [u8],
    /// Where to reach the server, if the device should not use its configured address.
    pub server_uri: Option<&'a str>,
    /// The group the device belongs to.
    pub group: Identity,
    /// The default subscriber of the device's readings.
    pub subscriber: Identity,
}

/// A pairing message that passed every check of [`open_pairing`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Pairing {
    pub serial: u64,
    pub server: Identity,
    /// The key that signed the message; hashes to `server`.
    pub server_key: PublicKey,
    pub group: Identity,
    pub subscriber: Identity,
    server_uri: [u8; MAX_SERVER_URI_LEN],
    server_uri_len: u8,
}

impl Pairing {
    /// Assembles a pairing from its parts (for storage that kept them); `None` if the URI is
    /// longer than [`MAX_SERVER_URI_LEN`].
    pub fn new(
        serial: u64,
        server: Identity,
        server_key: PublicKey,
        group: Identity,
        subscriber: Identity,
        server_uri: Option<&str>,
    ) -> Option<Self> {
        let uri = server_uri.unwrap_or("");
        if uri.len() > MAX_SERVER_URI_LEN {
            return None;
        }
        let mut server_uri = [0u8; MAX_SERVER_URI_LEN];
        server_uri[..uri.len()].copy_from_slice(uri.as_bytes());
        Some(Self {
            serial,
            server,
            server_key,
            group,
            subscriber,
            server_uri,
            server_uri_len: uri.len() as u8,
        })
    }

    /// The server URI the message gave, if any.
    pub fn server_uri(&self) -> Option<&str> {
        let uri = self.server_uri.get(..usize::from(self.server_uri_len))?;
        core::str::from_utf8(uri).ok().filter(|u| !u.is_empty())
    }
}

impl fmt::Debug for Pairing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pairing")
            .field("serial", &self.serial)
            .field("server", &self.server)
            .field("group", &self.group)
            .field("subscriber", &self.subscriber)
            .field("server_uri", &self.server_uri())
            .finish()
    }
}

/// Why a pairing message was refused (or could not be made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairingError {
    /// Longer than [`MAX_PAIRING_LEN`] (or a field longer than its bound).
    Oversized { len: usize, max: usize },
    /// The encoding is not the layout above; the text says where.
    Malformed(&'static str),
    /// The CBOR itself is broken.
    Cbor(CborError),
    /// A COSE algorithm other than AES-CCM-16-64-128, ECDH-ES + HKDF-256, EdDSA or ES256.
    UnsupportedAlgorithm(i64),
    /// The device's key does no key agreement with this crypto provider (it lacks the curve,
    /// or the Ed25519-to-X25519 map).
    UnsupportedDeviceKey,
    /// The message names another device (its recipient `kid`, or the content).
    NotForThisDevice,
    /// The content does not decrypt: the ciphertext, a header or the ephemeral key was
    /// altered, or it was encrypted to another key.
    BadTag,
    /// The server's signature over the content does not verify.
    BadSignature,
    /// The signing key does not hash to the server identity the content names.
    ServerIdentityMismatch,
    /// Signed by a server other than the one this device already trusts.
    UntrustedServer,
    /// The caller's output buffer is too small.
    BufferTooSmall,
    /// The crypto provider failed.
    Crypto(CryptoError),
}

impl From<CborError> for PairingError {
    fn from(e: CborError) -> Self {
        match e {
            CborError::BufferTooSmall => Self::BufferTooSmall,
            e => Self::Cbor(e),
        }
    }
}

impl fmt::Display for PairingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Oversized { len, max } => {
                write!(f, "pairing message of {len} bytes exceeds {max}")
            }
            Self::Malformed(what) => write!(f, "malformed pairing message: {what}"),
            Self::Cbor(e) => write!(f, "malformed pairing message: {e}"),
            Self::UnsupportedAlgorithm(a) => write!(f, "unsupported COSE algorithm {a}"),
            Self::UnsupportedDeviceKey => {
                f.write_str("this crypto provider does no key agreement with the device's key")
            }
            Self::NotForThisDevice => f.write_str("pairing message is for another device"),
            Self::BadTag => f.write_str(
                "pairing message does not decrypt (tampered, or encrypted to another key)",
            ),
            Self::BadSignature => f.write_str("server signature does not verify (tampered)"),
            Self::ServerIdentityMismatch => {
                f.write_str("signing key is not the key of the server the message names")
            }
            Self::UntrustedServer => {
                f.write_str("signed by a server other than the one this device trusts")
            }
            Self::BufferTooSmall => f.write_str("buffer too small for the pairing message"),
            Self::Crypto(e) => write!(f, "crypto provider: {e}"),
        }
    }
}

impl core::error::Error for PairingError {}

fn malformed(what: &'static str) -> impl Fn(CborError) -> PairingError {
    move |e| match e {
        CborError::UnexpectedType { .. } | CborError::Overflow => PairingError::Malformed(what),
        e => e.into(),
    }
}

fn oversized(len: usize, max: usize) -> PairingError {
    PairingError::Oversized { len, max }
}

/// Makes a pairing message for the device whose public key (P-256 or Ed25519) is `device_key`, signed with
/// `server_key`. `content.device` must be that key's identity with the other information the
/// device uses; `content.server` must be `h(server public key | content.server_other)`, or the
/// message is refused here ([`PairingError::ServerIdentityMismatch`]) as the device would.
pub fn seal_pairing<P: CryptoProvider + ?Sized>(
    content: &PairingContent<'_>,
    device_key: &PublicKey,
    server_key: &SecretKey,
    provider: &P,
    rng: &mut dyn Rng,
    out: &mut [u8],
) -> Result<usize, PairingError> {
    let server_public = provider
        .public_key(server_key)
        .map_err(PairingError::Crypto)?;
    let named = Identity::of_key(provider, &server_public, content.server_other)
        .map_err(|_| PairingError::Malformed("server other information"))?;
    if named != content.server {
        return Err(PairingError::ServerIdentityMismatch);
    }
    let mut signed = [0u8; MAX_PAIRING_LEN];
    let n = sign_content(content, &server_public, server_key, provider, &mut signed)?;
    encrypt_to_device(
        &signed[..n],
        device_key,
        &content.device,
        provider,
        rng,
        out,
    )
}

/// The payload map of [`PairingContent`], naming `server_key`.
fn encode_content(
    content: &PairingContent<'_>,
    server_key: &PublicKey,
    out: &mut [u8],
) -> Result<usize, PairingError> {
    if content.server_other.len() > MAX_SERVER_OTHER_LEN {
        return Err(oversized(content.server_other.len(), MAX_SERVER_OTHER_LEN));
    }
    if let Some(uri) = content.server_uri {
        if uri.is_empty() {
            return Err(PairingError::Malformed("empty server URI"));
        }
        if uri.len() > MAX_SERVER_URI_LEN {
            return Err(oversized(uri.len(), MAX_SERVER_URI_LEN));
        }
    }
    let entries = 6
        + usize::from(!content.server_other.is_empty())
        + usize::from(content.server_uri.is_some());
    let mut e = Encoder::new(out);
    e.map(entries)?;
    e.u64(P_DEVICE)?.bytes(content.device.as_bytes())?;
    e.u64(P_SERIAL)?.u64(content.serial)?;
    e.u64(P_SERVER)?.bytes(content.server.as_bytes())?;
    e.u64(P_SERVER_KEY)?.bytes(server_key.as_bytes())?;
    if !content.server_other.is_empty() {
        e.u64(P_SERVER_OTHER)?.bytes(content.server_other)?;
    }
    if let Some(uri) = content.server_uri {
        e.u64(P_SERVER_URI)?.text(uri)?;
    }
    e.u64(P_GROUP)?.bytes(content.group.as_bytes())?;
    e.u64(P_SUBSCRIBER)?.bytes(content.subscriber.as_bytes())?;
    Ok(e.finish())
}

/// The tagged COSE_Sign1 over the content, naming `named_key` as the server's key and signed
/// with `signing_key` (the two differ only in tests of a wrong signer).
fn sign_content<P: CryptoProvider + ?Sized>(
    content: &PairingContent<'_>,
    named_key: &PublicKey,
    signing_key: &SecretKey,
    provider: &P,
    out: &mut [u8],
) -> Result<usize, PairingError> {
    let mut payload = [0u8; MAX_PAIRING_LEN];
    let plen = encode_content(content, named_key, &mut payload)?;
    let payload = &payload[..plen];
    let mut protected = [0u8; 4];
    let prot_len = {
        let mut e = Encoder::new(&mut protected);
        e.map(1)?.i64(H_ALG)?.i64(signing_key.algorithm().cose())?;
        e.finish()
    };
    let protected = &protected[..prot_len];
    let mut tbs = [0u8; MAX_PAIRING_LEN + 32];
    let tbs_len = sigil_objects::cose::sig_structure(protected, &[], payload, &mut tbs)
        .map_err(|_| oversized(plen, MAX_PAIRING_LEN))?;
    let sig = provider
        .sign(signing_key, &tbs[..tbs_len])
        .map_err(PairingError::Crypto)?;
    let mut e = Encoder::new(out);
    e.tag(TAG_SIGN1)?.array(4)?.bytes(protected)?.map(0)?;
    e.bytes(payload)?.bytes(&sig.0)?;
    Ok(e.finish())
}

/// The recipient's protected bucket: `{1: -25}`.
const RECIPIENT_PROTECTED_BYTES: [u8; 4] = [0xa1, 0x01, 0x38, 0x18];
/// The content layer's protected bucket: `{1: 10}`.
const CONTENT_PROTECTED: [u8; 3] = [0xa1, 0x01, ALG_AES_CCM_16_64_128 as u8];

/// `COSE_KDF_Context` for direct ECDH-ES (RFC 9053 §5.2): `[AlgorithmID = 10, PartyUInfo =
/// [nil, nil, nil], PartyVInfo = [nil, nil, nil], SuppPubInfo = [keyDataLength = 128,
/// protected = the recipient's protected bucket]]`.
fn kdf_context(recipient_protected: &[u8], out: &mut [u8]) -> Result<usize, PairingError> {
    const NIL: u8 = 0xf6;
    let mut e = Encoder::new(out);
    e.array(4)?.i64(ALG_AES_CCM_16_64_128)?;
    e.array(3)?.raw(&[NIL, NIL, NIL])?;
    e.array(3)?.raw(&[NIL, NIL, NIL])?;
    e.array(2)?.u64(128)?.bytes(recipient_protected)?;
    Ok(e.finish())
}

/// HKDF-SHA-256 (RFC 5869) with no salt, cut to the 16-byte AES-128 key: one expand block.
fn content_key<P: CryptoProvider + ?Sized>(
    provider: &P,
    shared: &[u8; 32],
    recipient_protected: &[u8],
) -> Result<[u8; 16], PairingError> {
    let mut info = [0u8; MAX_PAIRING_LEN];
    let info_len = kdf_context(recipient_protected, &mut info)
        .map_err(|_| PairingError::Malformed("recipient protected bucket too long"))?;
    let prk = provider.hmac_sha256(&[], &[shared]);
    let okm = provider.hmac_sha256(&prk, &[&info[..info_len], &[1]]);
    let mut key = [0u8; 16];
    key.copy_from_slice(&okm[..16]);
    Ok(key)
}

/// `Enc_structure = ["Encrypt", protected, external_aad = device identity]` (RFC 9052 §5.3).
fn enc_structure(
    protected: &[u8],
    device: &Identity,
    out: &mut [u8],
) -> Result<usize, PairingError> {
    let mut e = Encoder::new(out);
    e.array(3)?
        .text("Encrypt")?
        .bytes(protected)?
        .bytes(device.as_bytes())?;
    Ok(e.finish())
}

fn encrypt_to_device<P: CryptoProvider + ?Sized>(
    plaintext: &[u8],
    device_key: &PublicKey,
    device: &Identity,
    provider: &P,
    rng: &mut dyn Rng,
    out: &mut [u8],
) -> Result<usize, PairingError> {
    let unsupported = |e| match e {
        CryptoError::Unsupported => PairingError::UnsupportedDeviceKey,
        CryptoError::InvalidKey | CryptoError::KeyLength | CryptoError::WeakSharedSecret => {
            PairingError::Malformed("device key is not a usable public key")
        }
        e => PairingError::Crypto(e),
    };
    // The device's key-agreement public value: its P-256 point, or its Ed25519 key's X25519 form.
    let (alg, device_public) = match device_key.algorithm() {
        SignatureAlgorithm::EcdsaP256 => (
            AgreementAlgorithm::P256,
            AgreementPublicKey::from_bytes(AgreementAlgorithm::P256, device_key.as_bytes())
                .map_err(unsupported)?,
        ),
        SignatureAlgorithm::Ed25519 => (
            AgreementAlgorithm::X25519,
            provider
                .x25519_public_of_ed25519(device_key)
                .map_err(unsupported)?,
        ),
    };
    let ephemeral = provider.generate_agreement(alg, rng).map_err(unsupported)?;
    let ephemeral_public = provider
        .agreement_public_key(&ephemeral)
        .map_err(PairingError::Crypto)?;
    let shared = provider
        .agree(&ephemeral, device_public.as_bytes())
        .map_err(unsupported)?;
    let key = content_key(provider, &shared, &RECIPIENT_PROTECTED_BYTES)?;
    let mut iv = [0u8; CCM16_NONCE_LEN];
    rng.fill(&mut iv).map_err(PairingError::Crypto)?;
    let mut body = [0u8; MAX_PAIRING_LEN];
    let plen = plaintext.len();
    if plen + CCM8_TAG_LEN > MAX_PAIRING_LEN {
        return Err(oversized(plen + CCM8_TAG_LEN, MAX_PAIRING_LEN));
    }
    body[..plen].copy_from_slice(plaintext);
    let mut aad = [0u8; 48];
    let aad_len = enc_structure(&CONTENT_PROTECTED, device, &mut aad)?;
    let tag = provider
        .aes128_ccm16_64_seal(&key, &iv, &aad[..aad_len], &mut body[..plen])
        .map_err(PairingError::Crypto)?;
    body[plen..plen + CCM8_TAG_LEN].copy_from_slice(&tag);
    let point = ephemeral_public.as_bytes();
    let mut e = Encoder::new(out);
    e.tag(TAG_ENCRYPT)?.array(4)?.bytes(&CONTENT_PROTECTED)?;
    e.map(1)?.i64(H_IV)?.bytes(&iv)?;
    e.bytes(&body[..plen + CCM8_TAG_LEN])?;
    e.array(1)?.array(3)?.bytes(&RECIPIENT_PROTECTED_BYTES)?;
    e.map(2)?;
    match alg {
        AgreementAlgorithm::P256 => {
            e.i64(H_EPHEMERAL_KEY)?.map(4)?;
            e.i64(KEY_KTY)?.u64(KTY_EC2)?;
            e.i64(KEY_CRV)?.u64(CRV_P256)?;
            e.i64(KEY_X)?.bytes(&point[1..33])?;
            e.i64(KEY_Y)?.bytes(&point[33..65])?;
        }
        AgreementAlgorithm::X25519 => {
            e.i64(H_EPHEMERAL_KEY)?.map(3)?;
            e.i64(KEY_KTY)?.u64(KTY_OKP)?;
            e.i64(KEY_CRV)?.u64(CRV_X25519)?;
            e.i64(KEY_X)?.bytes(point)?;
        }
    }
    e.i64(H_KID)?.bytes(device.as_bytes())?;
    e.bytes(&[])?;
    let n = e.finish();
    if n > MAX_PAIRING_LEN {
        return Err(oversized(n, MAX_PAIRING_LEN));
    }
    Ok(n)
}

/// What [`parse_pairing`] reads from the outer layers, before any crypto.
#[derive(Clone, Copy, Debug)]
pub struct SealedPairing<'a> {
    /// The content layer's protected bucket, as it arrived.
    pub content_protected: &'a [u8],
    pub iv: &'a [u8; CCM16_NONCE_LEN],
    /// Ciphertext and the 8-byte tag.
    pub ciphertext: &'a [u8],
    /// The recipient's protected bucket, as it arrived (part of the KDF context).
    pub recipient_protected: &'a [u8],
    /// The ephemeral public key: an uncompressed SEC 1 P-256 point, or an X25519 u-coordinate.
    pub ephemeral: AgreementPublicKey,
    /// The identity of the device the message is for (recipient `kid`).
    pub device: Identity,
}

/// The header parameters this module reads, from both buckets of one layer.
#[derive(Default)]
struct Headers<'a> {
    alg: Option<i64>,
    iv: Option<&'a [u8]>,
    kid: Option<&'a [u8]>,
    ephemeral: Option<AgreementPublicKey>,
}

/// Reads one header bucket into `h`: `alg` only from a protected one, `crit` refused, a
/// parameter in both buckets refused, unknown ones skipped.
fn read_bucket<'a>(
    d: &mut Decoder<'a>,
    h: &mut Headers<'a>,
    protected: bool,
) -> Result<(), PairingError> {
    let n = d.map().map_err(malformed("header bucket is not a map"))?;
    if n > MAX_HEADER_ENTRIES {
        return Err(PairingError::Malformed("too many header parameters"));
    }
    for _ in 0..n {
        let label = d.i64().map_err(malformed("header label"))?;
        match label {
            H_ALG if protected => {
                let alg = d.i64().map_err(malformed("alg"))?;
                if h.alg.replace(alg).is_some() {
                    return Err(PairingError::Malformed("alg repeated"));
                }
            }
            H_ALG => return Err(PairingError::Malformed("alg not protected")),
            H_CRIT => {
                return Err(PairingError::Malformed(
                    "critical parameters not understood",
                ))
            }
            H_IV => {
                let iv = d.bytes().map_err(malformed("IV is not bytes"))?;
                if h.iv.replace(iv).is_some() {
                    return Err(PairingError::Malformed("IV repeated"));
                }
            }
            H_KID => {
                let kid = d.bytes().map_err(malformed("kid is not bytes"))?;
                if h.kid.replace(kid).is_some() {
                    return Err(PairingError::Malformed("kid repeated"));
                }
            }
            H_EPHEMERAL_KEY => {
                let key = read_ephemeral_key(d)?;
                if h.ephemeral.replace(key).is_some() {
                    return Err(PairingError::Malformed("ephemeral key repeated"));
                }
            }
            _ => d.skip()?,
        }
    }
    Ok(())
}

/// A COSE_Key of type EC2 on P-256 with both coordinates (RFC 9053 §7.1.1), or of type OKP
/// on X25519 with its `x` (RFC 9053 §7.2).
fn read_ephemeral_key(d: &mut Decoder<'_>) -> Result<AgreementPublicKey, PairingError> {
    let n = d.map().map_err(malformed("ephemeral key is not a map"))?;
    if n > MAX_HEADER_ENTRIES + 2 {
        return Err(PairingError::Malformed(
            "ephemeral key has too many parameters",
        ));
    }
    let (mut kty, mut crv, mut x, mut y) = (None, None, None, None);
    for _ in 0..n {
        let label = d.i64().map_err(malformed("ephemeral key label"))?;
        let slot = match label {
            KEY_KTY => &mut kty,
            KEY_CRV => &mut crv,
            KEY_X | KEY_Y => {
                let v = d.bytes().map_err(malformed("ephemeral key coordinate"))?;
                let v: &[u8; 32] = v
                    .try_into()
                    .map_err(|_| PairingError::Malformed("ephemeral key coordinate length"))?;
                let slot = if label == KEY_X { &mut x } else { &mut y };
                if slot.replace(*v).is_some() {
                    return Err(PairingError::Malformed("ephemeral key coordinate repeated"));
                }
                continue;
            }
            _ => {
                d.skip()?;
                continue;
            }
        };
        let v = d.u64().map_err(malformed("ephemeral key kty or crv"))?;
        if slot.replace(v).is_some() {
            return Err(PairingError::Malformed("ephemeral key parameter repeated"));
        }
    }
    match (kty, crv, x, y) {
        (Some(KTY_EC2), Some(CRV_P256), Some(x), Some(y)) => {
            let mut point = [0u8; 65];
            point[0] = 0x04;
            point[1..33].copy_from_slice(&x);
            point[33..].copy_from_slice(&y);
            AgreementPublicKey::from_bytes(AgreementAlgorithm::P256, &point)
                .map_err(|_| PairingError::Malformed("ephemeral key is not a P-256 point"))
        }
        (Some(KTY_EC2), Some(CRV_P256), _, _) => {
            Err(PairingError::Malformed("ephemeral key lacks a coordinate"))
        }
        (Some(KTY_OKP), Some(CRV_X25519), Some(x), None) => {
            AgreementPublicKey::from_bytes(AgreementAlgorithm::X25519, &x)
                .map_err(|_| PairingError::Malformed("ephemeral key is not an X25519 key"))
        }
        (Some(KTY_OKP), Some(CRV_X25519), None, _) => {
            Err(PairingError::Malformed("ephemeral key lacks its x"))
        }
        (Some(KTY_OKP), Some(CRV_X25519), Some(_), Some(_)) => {
            Err(PairingError::Malformed("an X25519 ephemeral key has no y"))
        }
        _ => Err(PairingError::Malformed(
            "ephemeral key is neither EC2 P-256 nor OKP X25519",
        )),
    }
}

/// Reads the outer layers of a pairing message (no crypto): the COSE_Encrypt with its one
/// ECDH-ES + HKDF-256 recipient. Everything is bounded; nothing here panics on any input.
pub fn parse_pairing(message: &[u8]) -> Result<SealedPairing<'_>, PairingError> {
    if message.len() > MAX_PAIRING_LEN {
        return Err(oversized(message.len(), MAX_PAIRING_LEN));
    }
    let mut d = Decoder::new(message);
    match d.item()? {
        Item::Tag(TAG_ENCRYPT) => {}
        _ => return Err(PairingError::Malformed("not a tagged COSE_Encrypt")),
    }
    if d.array()
        .map_err(malformed("COSE_Encrypt is not an array"))?
        != 4
    {
        return Err(PairingError::Malformed("COSE_Encrypt is not an array of 4"));
    }
    let content_protected = d.bytes().map_err(malformed("protected is not bytes"))?;
    let mut content = Headers::default();
    let mut p = Decoder::new(content_protected);
    read_bucket(&mut p, &mut content, true)?;
    p.finish()?;
    read_bucket(&mut d, &mut content, false)?;
    let ciphertext = d.bytes().map_err(malformed("ciphertext is not bytes"))?;
    if d.array().map_err(malformed("recipients is not an array"))? != 1 {
        return Err(PairingError::Malformed("not exactly one recipient"));
    }
    if d.array().map_err(malformed("recipient is not an array"))? != 3 {
        return Err(PairingError::Malformed("recipient is not an array of 3"));
    }
    let recipient_protected = d.bytes().map_err(malformed("protected is not bytes"))?;
    let mut recipient = Headers::default();
    let mut p = Decoder::new(recipient_protected);
    read_bucket(&mut p, &mut recipient, true)?;
    p.finish()?;
    read_bucket(&mut d, &mut recipient, false)?;
    if !d
        .bytes()
        .map_err(malformed("recipient ciphertext"))?
        .is_empty()
    {
        return Err(PairingError::Malformed(
            "direct key agreement carries no key",
        ));
    }
    d.finish()?;
    match content.alg {
        Some(ALG_AES_CCM_16_64_128) => {}
        Some(a) => return Err(PairingError::UnsupportedAlgorithm(a)),
        None => return Err(PairingError::Malformed("content alg missing")),
    }
    match recipient.alg {
        Some(ALG_ECDH_ES_HKDF_256) => {}
        Some(a) => return Err(PairingError::UnsupportedAlgorithm(a)),
        None => return Err(PairingError::Malformed("recipient alg missing")),
    }
    let iv = content
        .iv
        .ok_or(PairingError::Malformed("IV missing"))?
        .try_into()
        .map_err(|_| PairingError::Malformed("IV length"))?;
    let device = recipient
        .kid
        .and_then(Identity::from_slice)
        .ok_or(PairingError::Malformed(
            "recipient kid is not a device identity",
        ))?;
    let ephemeral = recipient
        .ephemeral
        .ok_or(PairingError::Malformed("ephemeral key missing"))?;
    if ciphertext.len() < CCM8_TAG_LEN {
        return Err(PairingError::BadTag);
    }
    Ok(SealedPairing {
        content_protected,
        iv,
        ciphertext,
        recipient_protected,
        ephemeral,
        device,
    })
}

/// The decoded pairing content, borrowed from the decrypted Sign1 payload.
struct Content<'a> {
    device: &'a [u8],
    serial: u64,
    server: &'a [u8],
    server_key: &'a [u8],
    server_other: &'a [u8],
    server_uri: Option<&'a str>,
    group: &'a [u8],
    subscriber: &'a [u8],
}

fn parse_content(payload: &[u8]) -> Result<Content<'_>, PairingError> {
    let mut d = Decoder::new(payload);
    let n = d.map().map_err(malformed("content is not a map"))?;
    if n > MAX_CONTENT_ENTRIES {
        return Err(PairingError::Malformed("content has too many entries"));
    }
    let mut seen = 0u16;
    let (mut device, mut serial, mut server, mut server_key) = (None, None, None, None);
    let (mut server_other, mut server_uri, mut group, mut subscriber) = (None, None, None, None);
    for _ in 0..n {
        let label = match d.item()? {
            Item::Unsigned(l) => l,
            Item::Negative(_) | Item::Text(_) => {
                d.skip()?;
                continue;
            }
            _ => return Err(PairingError::Malformed("content label")),
        };
        if (1..=8).contains(&label) {
            let bit = 1u16 << label;
            if seen & bit != 0 {
                return Err(PairingError::Malformed("content entry repeated"));
            }
            seen |= bit;
        }
        match label {
            P_SERIAL => serial = Some(d.u64().map_err(malformed("serial"))?),
            P_SERVER_URI => {
                let uri = d.text().map_err(malformed("server URI"))?;
                if uri.is_empty() || uri.len() > MAX_SERVER_URI_LEN {
                    return Err(PairingError::Malformed("server URI length"));
                }
                server_uri = Some(uri);
            }
            P_DEVICE | P_SERVER | P_SERVER_KEY | P_SERVER_OTHER | P_GROUP | P_SUBSCRIBER => {
                let v = d.bytes().map_err(malformed("content entry is not bytes"))?;
                let slot = match label {
                    P_DEVICE => &mut device,
                    P_SERVER => &mut server,
                    P_SERVER_KEY => &mut server_key,
                    P_SERVER_OTHER => &mut server_other,
                    P_GROUP => &mut group,
                    _ => &mut subscriber,
                };
                *slot = Some(v);
            }
            _ => d.skip()?,
        }
    }
    d.finish()?;
    fn identity<'a>(v: Option<&'a [u8]>, what: &'static str) -> Result<&'a [u8], PairingError> {
        v.filter(|v| v.len() == IDENTITY_LEN)
            .ok_or(PairingError::Malformed(what))
    }
    let server_other = server_other.unwrap_or(&[]);
    if server_other.len() > MAX_SERVER_OTHER_LEN {
        return Err(PairingError::Malformed("server other information length"));
    }
    Ok(Content {
        device: identity(device, "device identity missing or not 16 bytes")?,
        serial: serial.ok_or(PairingError::Malformed("serial missing"))?,
        server: identity(server, "server identity missing or not 16 bytes")?,
        server_key: server_key.ok_or(PairingError::Malformed("server key missing"))?,
        server_other,
        server_uri,
        group: identity(group, "group identity missing or not 16 bytes")?,
        subscriber: identity(subscriber, "subscriber identity missing or not 16 bytes")?,
    })
}

/// Opens a pairing message on the device: checks it is for `device` (the device's identity,
/// the one its key was labelled with), decrypts it with the device's key (P-256, or Ed25519
/// mapped to X25519), checks the
/// server's signature and that the signer is the server the content names, and, when
/// `trusted_server` is given, that this is the server the device already trusts.
///
/// Replays are not this function's: the device compares [`Pairing::serial`] with what it
/// stored.
pub fn open_pairing<P: CryptoProvider + ?Sized>(
    message: &[u8],
    device_key: &SecretKey,
    device: &Identity,
    trusted_server: Option<&Identity>,
    provider: &P,
) -> Result<Pairing, PairingError> {
    let sealed = parse_pairing(message)?;
    if sealed.device != *device {
        return Err(PairingError::NotForThisDevice);
    }
    let secret = match device_key.algorithm() {
        SignatureAlgorithm::EcdsaP256 => AgreementSecret::from_p256_signing_key(device_key),
        SignatureAlgorithm::Ed25519 => provider.x25519_secret_of_ed25519(device_key),
    }
    .map_err(|e| match e {
        CryptoError::Unsupported => PairingError::UnsupportedDeviceKey,
        e => PairingError::Crypto(e),
    })?;
    if sealed.ephemeral.algorithm() != secret.algorithm() {
        return Err(PairingError::Malformed(
            "ephemeral key is not on the device key's curve",
        ));
    }
    let shared = provider
        .agree(&secret, sealed.ephemeral.as_bytes())
        .map_err(|e| match e {
            CryptoError::InvalidKey | CryptoError::KeyLength | CryptoError::WeakSharedSecret => {
                PairingError::Malformed("ephemeral key is not a usable point")
            }
            CryptoError::Unsupported => PairingError::UnsupportedDeviceKey,
            e => PairingError::Crypto(e),
        })?;
    let key = content_key(provider, &shared, sealed.recipient_protected)?;
    let mut aad = [0u8; 64];
    let aad_len = enc_structure(sealed.content_protected, device, &mut aad)
        .map_err(|_| PairingError::Malformed("protected bucket too long"))?;
    // The parser refuses a shorter ciphertext; a `Sealed` built by hand is checked here too.
    let body_len = sealed
        .ciphertext
        .len()
        .checked_sub(CCM8_TAG_LEN)
        .ok_or(PairingError::BadTag)?;
    let (body, tag) = sealed.ciphertext.split_at(body_len);
    let tag: &[u8; CCM8_TAG_LEN] = tag.try_into().map_err(|_| PairingError::BadTag)?;
    let mut plain = [0u8; MAX_PAIRING_LEN];
    let plain = plain
        .get_mut(..body.len())
        .ok_or(PairingError::BufferTooSmall)?;
    plain.copy_from_slice(body);
    provider
        .aes128_ccm16_64_open(&key, sealed.iv, &aad[..aad_len], plain, tag)
        .map_err(|e| match e {
            CryptoError::BadTag => PairingError::BadTag,
            e => PairingError::Crypto(e),
        })?;
    verify_signed(plain, device, trusted_server, provider)
}

/// The inner COSE_Sign1: parse, find the server's key in the content, check the key names the
/// server, then verify.
fn verify_signed<P: CryptoProvider + ?Sized>(
    signed: &[u8],
    device: &Identity,
    trusted_server: Option<&Identity>,
    provider: &P,
) -> Result<Pairing, PairingError> {
    let mut d = Decoder::new(signed);
    match d.item()? {
        Item::Tag(TAG_SIGN1) => {}
        _ => {
            return Err(PairingError::Malformed(
                "content is not a tagged COSE_Sign1",
            ))
        }
    }
    if d.array().map_err(malformed("COSE_Sign1 is not an array"))? != 4 {
        return Err(PairingError::Malformed("COSE_Sign1 is not an array of 4"));
    }
    let protected = d.bytes().map_err(malformed("protected is not bytes"))?;
    let mut h = Headers::default();
    let mut p = Decoder::new(protected);
    read_bucket(&mut p, &mut h, true)?;
    p.finish()?;
    read_bucket(&mut d, &mut h, false)?;
    let payload = d.bytes().map_err(malformed("payload is not bytes"))?;
    let signature = d.bytes().map_err(malformed("signature is not bytes"))?;
    d.finish()?;
    let alg = h
        .alg
        .ok_or(PairingError::Malformed("signature alg missing"))?;
    let alg = SignatureAlgorithm::from_cose(alg).ok_or(PairingError::UnsupportedAlgorithm(alg))?;
    if signature.len() != SIGNATURE_LEN {
        return Err(PairingError::BadSignature);
    }
    let content = parse_content(payload)?;
    let server_key = PublicKey::from_bytes(alg, content.server_key)
        .map_err(|_| PairingError::Malformed("server key does not match the signature alg"))?;
    let named =
        Identity::from_slice(content.server).ok_or(PairingError::Malformed("server identity"))?;
    let computed = Identity::of_key(provider, &server_key, content.server_other)
        .map_err(|_| PairingError::Malformed("server other information"))?;
    if computed != named {
        return Err(PairingError::ServerIdentityMismatch);
    }
    let mut tbs = [0u8; MAX_PAIRING_LEN + 32];
    let n = sigil_objects::cose::sig_structure(protected, &[], payload, &mut tbs)
        .map_err(|_| oversized(payload.len(), MAX_PAIRING_LEN))?;
    provider
        .verify(&server_key, &tbs[..n], signature)
        .map_err(|e| match e {
            CryptoError::BadSignature | CryptoError::SignatureLength | CryptoError::InvalidKey => {
                PairingError::BadSignature
            }
            e => PairingError::Crypto(e),
        })?;
    if content.device != device.as_bytes() {
        return Err(PairingError::NotForThisDevice);
    }
    if trusted_server.is_some_and(|t| *t != named) {
        return Err(PairingError::UntrustedServer);
    }
    let id = |v: &[u8]| Identity::from_slice(v).ok_or(PairingError::Malformed("identity"));
    Pairing::new(
        content.serial,
        named,
        server_key,
        id(content.group)?,
        id(content.subscriber)?,
        content.server_uri,
    )
    .ok_or(PairingError::Malformed("server URI length"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigil_crypto::RustCrypto;

    struct Counter(u8);
    impl Rng for Counter {
        fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
            for b in buf {
                self.0 = self.0.wrapping_mul(31).wrapping_add(7);
                *b = self.0;
            }
            Ok(())
        }
    }

    struct Party {
        key: SecretKey,
        public: PublicKey,
        identity: Identity,
    }

    fn party(alg: SignatureAlgorithm, seed: u8) -> Party {
        let key = RustCrypto.generate(alg, &mut Counter(seed)).unwrap();
        let public = RustCrypto.public_key(&key).unwrap();
        let identity = Identity::of_key(&RustCrypto, &public, b"").unwrap();
        Party {
            key,
            public,
            identity,
        }
    }

    fn content<'a>(device: &Party, server: &Party) -> PairingContent<'a> {
        PairingContent {
            device: device.identity,
            serial: 7,
            server: server.identity,
            server_other: b"",
            server_uri: Some("coap://[2001:db8::1]"),
            group: Identity::from_bytes([0x33; 16]),
            subscriber: Identity::from_bytes([0x44; 16]),
        }
    }

    fn seal(c: &PairingContent<'_>, device: &Party, server: &Party) -> ([u8; 512], usize) {
        let mut out = [0u8; 512];
        let n = seal_pairing(
            c,
            &device.public,
            &server.key,
            &RustCrypto,
            &mut Counter(9),
            &mut out,
        )
        .unwrap();
        (out, n)
    }

    fn open(
        msg: &[u8],
        device: &Party,
        trusted: Option<&Identity>,
    ) -> Result<Pairing, PairingError> {
        open_pairing(msg, &device.key, &device.identity, trusted, &RustCrypto)
    }

    #[test]
    fn round_trip_with_either_server_key_to_either_device_key() {
        for (device_alg, server_alg) in SignatureAlgorithm::ALL
            .into_iter()
            .flat_map(|d| SignatureAlgorithm::ALL.map(|s| (d, s)))
        {
            let device = party(device_alg, 1);
            let server = party(server_alg, 2);
            let (msg, n) = seal(&content(&device, &server), &device, &server);
            let p = open(&msg[..n], &device, None).unwrap();
            assert_eq!(p.serial, 7);
            assert_eq!(p.server, server.identity);
            assert_eq!(p.server_key, server.public);
            assert_eq!(p.group, Identity::from_bytes([0x33; 16]));
            assert_eq!(p.subscriber, Identity::from_bytes([0x44; 16]));
            assert_eq!(p.server_uri(), Some("coap://[2001:db8::1]"));
            assert_eq!(open(&msg[..n], &device, Some(&server.identity)), Ok(p));
        }
    }

    #[test]
    fn server_other_information_is_part_of_its_identity() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let mut c = content(&device, &server);
        c.server_other = b"building 7";
        c.server_uri = None;
        assert_eq!(
            seal_pairing(
                &c,
                &device.public,
                &server.key,
                &RustCrypto,
                &mut Counter(1),
                &mut [0; 512]
            ),
            Err(PairingError::ServerIdentityMismatch)
        );
        c.server = Identity::of_key(&RustCrypto, &server.public, b"building 7").unwrap();
        let (msg, n) = seal(&c, &device, &server);
        let p = open(&msg[..n], &device, None).unwrap();
        assert_eq!(p.server, c.server);
        assert_eq!(p.server_uri(), None);
    }

    #[test]
    fn a_message_for_another_device_is_refused() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        let other = party(SignatureAlgorithm::EcdsaP256, 3);
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let (msg, n) = seal(&content(&other, &server), &other, &server);
        assert_eq!(
            open(&msg[..n], &device, None),
            Err(PairingError::NotForThisDevice)
        );
        // Relabelled for this device (kid rewritten): the external AAD and the key differ.
        let mut relabelled = msg;
        let at = find(&relabelled[..n], other.identity.as_bytes());
        relabelled[at..at + 16].copy_from_slice(device.identity.as_bytes());
        assert_eq!(
            open(&relabelled[..n], &device, None),
            Err(PairingError::BadTag)
        );
    }

    #[test]
    fn encrypted_to_this_device_but_naming_another_is_refused() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let mut c = content(&device, &server);
        c.device = Identity::from_bytes([0x55; 16]);
        let mut signed = [0u8; 512];
        let sn = sign_content(&c, &server.public, &server.key, &RustCrypto, &mut signed).unwrap();
        let mut msg = [0u8; 512];
        let n = encrypt_to_device(
            &signed[..sn],
            &device.public,
            &device.identity,
            &RustCrypto,
            &mut Counter(4),
            &mut msg,
        )
        .unwrap();
        assert_eq!(
            open(&msg[..n], &device, None),
            Err(PairingError::NotForThisDevice)
        );
    }

    fn find(hay: &[u8], needle: &[u8]) -> usize {
        hay.windows(needle.len()).position(|w| w == needle).unwrap()
    }

    #[test]
    fn tampered_ciphertext_header_or_ephemeral_key_is_refused() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let (msg, n) = seal(&content(&device, &server), &device, &server);
        let sealed = parse_pairing(&msg[..n]).unwrap();
        let ct_at = find(&msg[..n], sealed.ciphertext);
        let iv_at = find(&msg[..n], sealed.iv);
        let x_at = find(&msg[..n], &sealed.ephemeral.as_bytes()[1..33]);
        for at in [ct_at, ct_at + sealed.ciphertext.len() - 1, iv_at, x_at + 31] {
            let mut t = msg;
            t[at] ^= 0x01;
            let r = open(&t[..n], &device, None);
            assert!(
                matches!(
                    r,
                    Err(PairingError::BadTag) | Err(PairingError::Malformed(_))
                ),
                "byte {at}: {r:?}"
            );
        }
        let mut t = msg;
        t[ct_at] ^= 0x01;
        assert_eq!(open(&t[..n], &device, None), Err(PairingError::BadTag));
    }

    #[test]
    fn tampered_signature_is_refused() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let c = content(&device, &server);
        let mut signed = [0u8; 512];
        let sn = sign_content(&c, &server.public, &server.key, &RustCrypto, &mut signed).unwrap();
        signed[sn - 1] ^= 0x80;
        let mut msg = [0u8; 512];
        let n = encrypt_to_device(
            &signed[..sn],
            &device.public,
            &device.identity,
            &RustCrypto,
            &mut Counter(4),
            &mut msg,
        )
        .unwrap();
        assert_eq!(
            open(&msg[..n], &device, None),
            Err(PairingError::BadSignature)
        );
    }

    #[test]
    fn a_wrong_signer_is_refused() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let mallory = party(SignatureAlgorithm::Ed25519, 5);
        let reseal = |named: &PublicKey, c: &PairingContent<'_>| {
            let mut signed = [0u8; 512];
            let sn = sign_content(c, named, &mallory.key, &RustCrypto, &mut signed).unwrap();
            let mut msg = [0u8; 512];
            let n = encrypt_to_device(
                &signed[..sn],
                &device.public,
                &device.identity,
                &RustCrypto,
                &mut Counter(4),
                &mut msg,
            )
            .unwrap();
            open(&msg[..n], &device, Some(&server.identity))
        };
        // Names the server and its key, signed by another key.
        let c = content(&device, &server);
        assert_eq!(reseal(&server.public, &c), Err(PairingError::BadSignature));
        // Names the server but carries the signer's key.
        assert_eq!(
            reseal(&mallory.public, &c),
            Err(PairingError::ServerIdentityMismatch)
        );
        // Consistent, but not the server the device trusts.
        let own = content(&device, &mallory);
        assert_eq!(
            reseal(&mallory.public, &own),
            Err(PairingError::UntrustedServer)
        );
    }

    #[test]
    fn oversized_and_garbage_are_refused() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        assert_eq!(
            open(&[0u8; MAX_PAIRING_LEN + 1], &device, None),
            Err(PairingError::Oversized {
                len: MAX_PAIRING_LEN + 1,
                max: MAX_PAIRING_LEN
            })
        );
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let mut c = content(&device, &server);
        let long = [b'a'; MAX_SERVER_URI_LEN + 1];
        c.server_uri = core::str::from_utf8(&long).ok();
        assert_eq!(
            seal_pairing(
                &c,
                &device.public,
                &server.key,
                &RustCrypto,
                &mut Counter(1),
                &mut [0; 512]
            ),
            Err(PairingError::Oversized {
                len: MAX_SERVER_URI_LEN + 1,
                max: MAX_SERVER_URI_LEN
            })
        );
        let (msg, n) = seal(&content(&device, &server), &device, &server);
        for cut in 0..n {
            assert!(open(&msg[..cut], &device, None).is_err());
        }
        assert!(matches!(
            open(&[0xd8, 0x60, 0x80], &device, None),
            Err(PairingError::Malformed(_))
        ));
    }

    #[test]
    fn every_single_byte_change_is_refused() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let (msg, n) = seal(&content(&device, &server), &device, &server);
        for at in 0..n {
            for mask in [0x01, 0x80, 0xff] {
                let mut t = msg;
                t[at] ^= mask;
                assert!(
                    open(&t[..n], &device, None).is_err(),
                    "byte {at} ^ {mask:#x}"
                );
            }
        }
    }

    /// An Ed25519 device gets an OKP X25519 ephemeral key (crv 4, `x` only); every byte of
    /// its message is checked as a P-256 device's is; a P-256 key cannot open it, nor can an
    /// Ed25519 key open a P-256 device's message (the curves differ).
    #[test]
    fn an_ed25519_device_is_paired_over_x25519() {
        let device = party(SignatureAlgorithm::Ed25519, 1);
        let server = party(SignatureAlgorithm::Ed25519, 2);
        let (msg, n) = seal(&content(&device, &server), &device, &server);
        let sealed = parse_pairing(&msg[..n]).unwrap();
        assert_eq!(sealed.ephemeral.algorithm(), AgreementAlgorithm::X25519);
        // {1: 1, -1: 4, -2: x}: kty OKP, crv X25519.
        let x = sealed.ephemeral.as_bytes();
        let at = find(&msg[..n], x);
        assert_eq!(
            &msg[at - 8..at],
            &[0xa3, 0x01, 0x01, 0x20, 0x04, 0x21, 0x58, 0x20]
        );
        let p = open(&msg[..n], &device, Some(&server.identity)).unwrap();
        assert_eq!(p.server, server.identity);
        for at in 0..n {
            let mut t = msg;
            t[at] ^= 0x01;
            assert!(open(&t[..n], &device, None).is_err(), "byte {at}");
        }
        let p256 = party(SignatureAlgorithm::EcdsaP256, 1);
        assert_eq!(
            open_pairing(&msg[..n], &p256.key, &device.identity, None, &RustCrypto),
            Err(PairingError::Malformed(
                "ephemeral key is not on the device key's curve"
            ))
        );
        let (other, on) = seal(&content(&p256, &server), &p256, &server);
        assert_eq!(
            open_pairing(&other[..on], &device.key, &p256.identity, None, &RustCrypto),
            Err(PairingError::Malformed(
                "ephemeral key is not on the device key's curve"
            ))
        );
        // A device key of small order (the identity point) is refused, not encrypted to.
        let mut identity_point = [0u8; 32];
        identity_point[0] = 1;
        let weak = PublicKey::from_bytes(SignatureAlgorithm::Ed25519, &identity_point).unwrap();
        assert!(matches!(
            seal_pairing(
                &content(&device, &server),
                &weak,
                &server.key,
                &RustCrypto,
                &mut Counter(1),
                &mut [0; 512]
            ),
            Err(PairingError::Malformed(_))
        ));
    }

    #[test]
    fn size_of_a_typical_message() {
        let device = party(SignatureAlgorithm::EcdsaP256, 1);
        let ed = party(SignatureAlgorithm::Ed25519, 2);
        let p256 = party(SignatureAlgorithm::EcdsaP256, 2);
        let mut c = content(&device, &ed);
        c.server_uri = None;
        assert_eq!(seal(&c, &device, &ed).1, 321);
        c.server = p256.identity;
        assert_eq!(seal(&c, &device, &p256).1, 354);
        // To an Ed25519 device: the X25519 ephemeral key is 35 bytes shorter (no y, no prefix).
        let ed_device = party(SignatureAlgorithm::Ed25519, 1);
        let mut c = content(&ed_device, &ed);
        c.server_uri = None;
        assert_eq!(seal(&c, &ed_device, &ed).1, 286);
    }
}
