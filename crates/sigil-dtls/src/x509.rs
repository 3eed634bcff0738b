//! X.509 certificates as the RFC 7925 §4.4 profile uses them: DER parsing of the fields a
//! DTLS peer needs (RFC 5280 §4.1) and path validation to a configured trust anchor.
//!
//! Accepted: v3 certificates signed with ecdsa-with-SHA256 (P-256) or Ed25519, holding a
//! P-256 or Ed25519 key, and with the `rsa` feature (for comparison) also RSA keys
//! (rsaEncryption, RFC 3279 §2.3.1) and sha256WithRSAEncryption signatures (RFC 4055 §5);
//! validity checked against the caller's clock; issuers must be CAs (basicConstraints cA);
//! unknown critical extensions refused. Names are compared as DER bytes (RFC 5280 §7.1 allows
//! it for identically encoded names). Not supported, plainly: revocation (CRL/OCSP), name
//! constraints, policies.

use crate::{spki, Error};
#[cfg(feature = "rsa")]
use sigil_crypto::RsaPublicKey;
use sigil_crypto::{CryptoProvider, PublicKey, SignatureAlgorithm};
use sigil_time::UnixTime;

/// Longest chain accepted (leaf, intermediates), not counting the anchor.
pub const MAX_DEPTH: usize = 4;

/// ecdsa-with-SHA256 (RFC 5758 §3.2).
const ECDSA_SHA256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
/// id-Ed25519 (RFC 8410 §3).
const ED25519: &[u8] = &[0x06, 0x03, 0x2b, 0x65, 0x70];
/// sha256WithRSAEncryption (RFC 4055 §5), whose parameters are NULL (or, by some encoders,
/// absent).
#[cfg(feature = "rsa")]
const RSA_SHA256: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b,
];
/// rsaEncryption with NULL parameters (RFC 3279 §2.3.1), a SubjectPublicKeyInfo's algorithm.
#[cfg(feature = "rsa")]
const RSA_ENCRYPTION: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
];
#[cfg(feature = "rsa")]
const NULL: &[u8] = &[0x05, 0x00];
/// id-ce-basicConstraints, id-ce-keyUsage, and the other extensions Sigil understands.
const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
/// subjectKeyIdentifier, authorityKeyIdentifier, extKeyUsage, subjectAltName: informational.
const KNOWN: [&[u8]; 4] = [
    &[0x55, 0x1d, 0x0e],
    &[0x55, 0x1d, 0x23],
    &[0x55, 0x1d, 0x25],
    &[0x55, 0x1d, 0x11],
];

/// The key a certificate holds: a signature key Sigil uses everywhere, or (feature `rsa`) an
/// RSA key.
// With `rsa`, the RSA key (up to 4096 bits) is kept inline: the crate allocates nothing.
#[cfg_attr(feature = "rsa", allow(clippy::large_enum_variant))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertifiedKey {
    Key(PublicKey),
    #[cfg(feature = "rsa")]
    Rsa(RsaPublicKey),
}

/// How a certificate is signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SignedWith {
    Key(SignatureAlgorithm),
    #[cfg(feature = "rsa")]
    RsaPkcs1Sha256,
}

/// A certificate whose key or signature may be RSA: what chain validation works on.
#[derive(Clone, Copy, Debug)]
struct AnyCertificate<'a> {
    tbs: &'a [u8],
    issuer: &'a [u8],
    subject: &'a [u8],
    not_before: u64,
    not_after: u64,
    key: CertifiedKey,
    is_ca: bool,
    key_usage: Option<u16>,
    signed_with: SignedWith,
    signature: &'a [u8],
}

/// The parts of a certificate path validation needs, for a certificate with a P-256 or
/// Ed25519 key and signature ([`parse`] refuses RSA ones as unsupported).
#[derive(Clone, Copy, Debug)]
pub struct Certificate<'a> {
    /// The signed bytes (the whole `tbsCertificate` TLV).
    pub tbs: &'a [u8],
    pub issuer: &'a [u8],
    pub subject: &'a [u8],
    /// Validity as Unix seconds.
    pub not_before: u64,
    pub not_after: u64,
    pub key: PublicKey,
    pub is_ca: bool,
    /// keyUsage bits (bit 0 = digitalSignature, 5 = keyCertSign) if the extension is present.
    pub key_usage: Option<u16>,
    pub signature_algorithm: SignatureAlgorithm,
    /// The signature as the BIT STRING holds it (DER `ECDSA-Sig-Value`, or 64 bytes Ed25519).
    pub signature: &'a [u8],
}

fn bad(what: &'static str) -> Error {
    Error::BadCertificate(what)
}

/// A DER TLV as [`tlv`] splits it: (tag, value, rest, the whole TLV).
type Tlv<'a> = (u8, &'a [u8], &'a [u8], &'a [u8]);

/// One DER TLV: (tag, value, rest, whole). Definite lengths up to 3 bytes, minimal encoding.
fn tlv<'a>(buf: &'a [u8], what: &'static str) -> Result<Tlv<'a>, Error> {
    let (&tag, rest) = buf.split_first().ok_or(bad(what))?;
    let (&first, rest) = rest.split_first().ok_or(bad(what))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 3 || rest.len() < n || rest[0] == 0 {
            return Err(bad(what));
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, b| (a << 8) | usize::from(*b));
        if len < 0x80 {
            return Err(bad(what));
        }
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err(bad(what));
    }
    let whole_len = buf.len() - rest.len() + len;
    Ok((tag, &rest[..len], &rest[len..], &buf[..whole_len]))
}

fn expect<'a>(buf: &'a [u8], tag: u8, what: &'static str) -> Result<(&'a [u8], &'a [u8]), Error> {
    let (t, v, rest, _) = tlv(buf, what)?;
    if t != tag {
        return Err(bad(what));
    }
    Ok((v, rest))
}

fn algorithm(seq_value: &[u8]) -> Result<SignedWith, Error> {
    // AlgorithmIdentifier: the OID alone (no NULL parameters for either ECC algorithm).
    if seq_value == ECDSA_SHA256 {
        return Ok(SignedWith::Key(SignatureAlgorithm::EcdsaP256));
    } else if seq_value == ED25519 {
        return Ok(SignedWith::Key(SignatureAlgorithm::Ed25519));
    }
    #[cfg(feature = "rsa")]
    if let Some(params) = seq_value.strip_prefix(RSA_SHA256) {
        if params.is_empty() || params == NULL {
            return Ok(SignedWith::RsaPkcs1Sha256);
        }
    }
    Err(Error::UnsupportedCertificate)
}

/// A SubjectPublicKeyInfo: P-256 or Ed25519 (exact DER, [`spki::parse_spki`]) or, with the
/// `rsa` feature, rsaEncryption holding `RSAPublicKey ::= SEQUENCE { modulus, exponent }`
/// (RFC 8017 §A.1.1).
fn certified_key(spki_der: &[u8]) -> Result<CertifiedKey, Error> {
    #[cfg(feature = "rsa")]
    {
        let (spki, _) = expect(spki_der, 0x30, "subjectPublicKeyInfo")?;
        let (alg, rest) = expect(spki, 0x30, "subjectPublicKeyInfo algorithm")?;
        if alg == RSA_ENCRYPTION {
            let (bits, end) = expect(rest, 0x03, "subjectPublicKey")?;
            if !end.is_empty() {
                return Err(bad("subjectPublicKeyInfo"));
            }
            let Some((0, rsa_key)) = bits.split_first() else {
                return Err(bad("subjectPublicKey"));
            };
            let (seq, end) = expect(rsa_key, 0x30, "RSAPublicKey")?;
            let (n, r) = expect(seq, 0x02, "RSAPublicKey modulus")?;
            let (e, r) = expect(r, 0x02, "RSAPublicKey exponent")?;
            if !end.is_empty() || !r.is_empty() {
                return Err(bad("RSAPublicKey"));
            }
            if n.first().is_some_and(|b| b & 0x80 != 0) || e.first().is_some_and(|b| b & 0x80 != 0)
            {
                return Err(bad("RSAPublicKey negative"));
            }
            return RsaPublicKey::from_modulus_exponent(n, e)
                .map(CertifiedKey::Rsa)
                .map_err(|_| Error::UnsupportedCertificate);
        }
    }
    spki::parse_spki(spki_der)
        .map(CertifiedKey::Key)
        .map_err(|_| Error::UnsupportedCertificate)
}

/// Parses a DER certificate with a P-256 or Ed25519 key and signature; one with an RSA key or
/// signature is [`Error::UnsupportedCertificate`] here (chain validation takes it with the
/// `rsa` feature, [`verify_chain_any`]).
pub fn parse(der: &[u8]) -> Result<Certificate<'_>, Error> {
    let c = parse_any(der)?;
    #[allow(irrefutable_let_patterns)]
    let CertifiedKey::Key(key) = c.key
    else {
        return Err(Error::UnsupportedCertificate);
    };
    #[allow(irrefutable_let_patterns)]
    let SignedWith::Key(signature_algorithm) = c.signed_with
    else {
        return Err(Error::UnsupportedCertificate);
    };
    Ok(Certificate {
        tbs: c.tbs,
        issuer: c.issuer,
        subject: c.subject,
        not_before: c.not_before,
        not_after: c.not_after,
        key,
        is_ca: c.is_ca,
        key_usage: c.key_usage,
        signature_algorithm,
        signature: c.signature,
    })
}

/// The key a DER certificate holds, whatever its algorithm (no validation).
pub fn certified_key_of(der: &[u8]) -> Result<CertifiedKey, Error> {
    parse_any(der).map(|c| c.key)
}

fn parse_any(der: &[u8]) -> Result<AnyCertificate<'_>, Error> {
    let (cert, rest) = expect(der, 0x30, "Certificate")?;
    if !rest.is_empty() {
        return Err(bad("trailing bytes after Certificate"));
    }
    let (_, tbs_value, after_tbs, tbs) = tlv(cert, "tbsCertificate")?;
    if tbs[0] != 0x30 {
        return Err(bad("tbsCertificate"));
    }
    let (outer_alg, after_alg) = expect(after_tbs, 0x30, "signatureAlgorithm")?;
    let (sig_bits, end) = expect(after_alg, 0x03, "signatureValue")?;
    if !end.is_empty() {
        return Err(bad("Certificate fields"));
    }
    let signed_with = algorithm(outer_alg)?;
    let signature = match sig_bits.split_first() {
        Some((0, s)) => s,
        _ => return Err(bad("signatureValue")),
    };

    // tbsCertificate
    let (version, r) = expect(tbs_value, 0xa0, "version (v3 required)")?;
    if version != [0x02, 0x01, 0x02] {
        return Err(Error::UnsupportedCertificate);
    }
    let (_serial, r) = expect(r, 0x02, "serialNumber")?;
    let (inner_alg, r) = expect(r, 0x30, "signature")?;
    if algorithm(inner_alg)? != signed_with {
        return Err(bad("signature algorithms differ"));
    }
    let (_, _, r, issuer) = tlv(r, "issuer")?;
    let (validity, r) = expect(r, 0x30, "validity")?;
    let (nb_tag, nb, v) = {
        let (t, v, rest, _) = tlv(validity, "notBefore")?;
        (t, v, rest)
    };
    let (na_tag, na, v) = {
        let (t, val, rest, _) = tlv(v, "notAfter")?;
        (t, val, rest)
    };
    if !v.is_empty() {
        return Err(bad("validity"));
    }
    let not_before = time(nb_tag, nb)?;
    let not_after = time(na_tag, na)?;
    let (_, _, r, subject) = tlv(r, "subject")?;
    if issuer[0] != 0x30 || subject[0] != 0x30 {
        return Err(bad("Name"));
    }
    let (_, _, mut r, spki_der) = tlv(r, "subjectPublicKeyInfo")?;
    let key = certified_key(spki_der)?;
    let mut is_ca = false;
    let mut key_usage = None;
    // Optional issuerUniqueID [1], subjectUniqueID [2], extensions [3].
    while !r.is_empty() {
        let (tag, value, rest, _) = tlv(r, "tbsCertificate trailer")?;
        r = rest;
        match tag {
            0x81 | 0x82 => continue,
            0xa3 => {
                let (mut exts, end) = expect(value, 0x30, "extensions")?;
                if !end.is_empty() {
                    return Err(bad("extensions"));
                }
                while !exts.is_empty() {
                    let (ext, rest) = expect(exts, 0x30, "Extension")?;
                    exts = rest;
                    let (oid, mut e) = expect(ext, 0x06, "extnID")?;
                    let mut critical = false;
                    if e.first() == Some(&0x01) {
                        let (b, rest) = expect(e, 0x01, "critical")?;
                        critical = b == [0xff];
                        e = rest;
                    }
                    let (octets, end) = expect(e, 0x04, "extnValue")?;
                    if !end.is_empty() {
                        return Err(bad("Extension"));
                    }
                    if oid == BASIC_CONSTRAINTS {
                        let (bc, end) = expect(octets, 0x30, "basicConstraints")?;
                        if !end.is_empty() {
                            return Err(bad("basicConstraints"));
                        }
                        if bc.first() == Some(&0x01) {
                            let (b, _) = expect(bc, 0x01, "cA")?;
                            is_ca = b == [0xff];
                        }
                    } else if oid == KEY_USAGE {
                        let (bits, end) = expect(octets, 0x03, "keyUsage")?;
                        if !end.is_empty() || bits.len() < 2 || bits.len() > 3 {
                            return Err(bad("keyUsage"));
                        }
                        // Bit 0 is the most significant bit of the first content byte.
                        let mut v = u16::from(bits[1]) << 8;
                        if bits.len() == 3 {
                            v |= u16::from(bits[2]);
                        }
                        key_usage = Some(v.reverse_bits());
                    } else if critical && !KNOWN.contains(&oid) {
                        return Err(Error::UnsupportedCertificate);
                    }
                }
            }
            _ => return Err(bad("tbsCertificate field")),
        }
    }
    Ok(AnyCertificate {
        tbs,
        issuer,
        subject,
        not_before,
        not_after,
        key,
        is_ca,
        key_usage,
        signed_with,
        signature,
    })
}

/// UTCTime (YYMMDDHHMMSSZ, RFC 5280 §4.1.2.5.1) or GeneralizedTime (YYYYMMDDHHMMSSZ) to Unix
/// seconds.
fn time(tag: u8, v: &[u8]) -> Result<u64, Error> {
    let digits = |s: &[u8]| -> Result<u64, Error> {
        s.iter().try_fold(0u64, |a, d| {
            if d.is_ascii_digit() {
                Ok(a * 10 + u64::from(d - b'0'))
            } else {
                Err(bad("Time"))
            }
        })
    };
    let (year, rest) = match (tag, v.len()) {
        (0x17, 13) => {
            let yy = digits(&v[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &v[2..])
        }
        (0x18, 15) => (digits(&v[..4])?, &v[4..]),
        _ => return Err(bad("Time")),
    };
    if rest[10] != b'Z' {
        return Err(bad("Time"));
    }
    let (mo, d, h, mi, s) = (
        digits(&rest[0..2])?,
        digits(&rest[2..4])?,
        digits(&rest[4..6])?,
        digits(&rest[6..8])?,
        digits(&rest[8..10])?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return Err(bad("Time"));
    }
    if year < 1970 {
        return Ok(0);
    }
    // Days from civil (proleptic Gregorian), as in Howard Hinnant's algorithm.
    let (y, m) = if mo <= 2 {
        (year - 1, mo + 9)
    } else {
        (year, mo - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(days * 86_400 + h * 3600 + mi * 60 + s)
}

/// Verifies `cert`'s signature with `issuer_key`.
fn signed_by<C: CryptoProvider + ?Sized>(
    crypto: &C,
    cert: &AnyCertificate<'_>,
    issuer_key: &CertifiedKey,
) -> Result<(), Error> {
    let issuer_key = match (issuer_key, cert.signed_with) {
        (CertifiedKey::Key(k), SignedWith::Key(alg)) if k.algorithm() == alg => k,
        #[cfg(feature = "rsa")]
        (CertifiedKey::Rsa(k), SignedWith::RsaPkcs1Sha256) => {
            return crypto
                .rsa_pkcs1_sha256_verify(k, cert.tbs, cert.signature)
                .map_err(|_| Error::BadSignature);
        }
        _ => return Err(Error::BadSignature),
    };
    let raw;
    let sig: &[u8] = match issuer_key.algorithm() {
        SignatureAlgorithm::EcdsaP256 => {
            raw = spki::ecdsa_from_der(cert.signature)?;
            &raw
        }
        SignatureAlgorithm::Ed25519 => cert.signature,
    };
    crypto
        .verify(issuer_key, cert.tbs, sig)
        .map_err(|_| Error::BadSignature)
}

fn current(cert: &AnyCertificate<'_>, now: UnixTime) -> Result<(), Error> {
    // Before 1970 is never valid: certificates here carry no such dates.
    let Ok(now) = u64::try_from(now.as_secs()) else {
        return Err(Error::CertificateExpired);
    };
    if now < cert.not_before || now > cert.not_after {
        return Err(Error::CertificateExpired);
    }
    Ok(())
}

/// Validates `chain` (leaf first, as the Certificate message orders it) to one of `anchors`
/// (DER certificates, trusted as configured) at Unix time `now`; returns the leaf's key.
/// The anchor may or may not be the chain's last element. A leaf with an RSA key is
/// [`Error::UnsupportedCertificate`] here ([`verify_chain_any`] takes it).
pub fn verify_chain<C: CryptoProvider + ?Sized>(
    crypto: &C,
    chain: &[&[u8]],
    anchors: &[&[u8]],
    now: UnixTime,
) -> Result<PublicKey, Error> {
    match verify_chain_any(crypto, chain, anchors, now)? {
        CertifiedKey::Key(k) => Ok(k),
        #[cfg(feature = "rsa")]
        CertifiedKey::Rsa(_) => Err(Error::UnsupportedCertificate),
    }
}

/// [`verify_chain`] for a leaf of any supported key type (with the `rsa` feature, RSA too).
pub fn verify_chain_any<C: CryptoProvider + ?Sized>(
    crypto: &C,
    chain: &[&[u8]],
    anchors: &[&[u8]],
    now: UnixTime,
) -> Result<CertifiedKey, Error> {
    if chain.is_empty() {
        return Err(Error::MissingClientKey);
    }
    if chain.len() > MAX_DEPTH + 1 {
        return Err(bad("chain too long"));
    }
    let leaf = parse_any(chain[0])?;
    if leaf.key_usage.is_some_and(|u| u & 1 == 0) {
        return Err(bad("leaf keyUsage lacks digitalSignature"));
    }
    let mut cert = leaf;
    let mut cert_der = chain[0];
    for depth in 0..=MAX_DEPTH {
        current(&cert, now)?;
        // A certificate that is itself an anchor ends the path.
        if anchors.contains(&cert_der) {
            return Ok(leaf.key);
        }
        for a in anchors {
            let anchor = parse_any(a)?;
            if anchor.subject == cert.issuer && signed_by(crypto, &cert, &anchor.key).is_ok() {
                current(&anchor, now)?;
                return Ok(leaf.key);
            }
        }
        // Up one level inside the chain the peer sent.
        let Some(next) = chain[1..]
            .iter()
            .find(|d| parse_any(d).is_ok_and(|c| c.subject == cert.issuer))
        else {
            return Err(Error::UnknownCa);
        };
        let issuer = parse_any(next)?;
        if !issuer.is_ca || issuer.key_usage.is_some_and(|u| u & (1 << 5) == 0) {
            return Err(bad("issuer is not a CA"));
        }
        signed_by(crypto, &cert, &issuer.key)?;
        if depth == MAX_DEPTH {
            break;
        }
        cert = issuer;
        cert_der = next;
    }
    Err(bad("chain too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(time(0x17, b"700101000000Z").unwrap(), 0);
        assert_eq!(time(0x17, b"000229120000Z").unwrap(), 951_825_600);
        assert_eq!(time(0x18, b"20380119031408Z").unwrap(), 2_147_483_648);
        assert_eq!(time(0x18, b"99991231235959Z").unwrap(), 253_402_300_799);
        assert!(time(0x17, b"701301000000Z").is_err());
        assert!(time(0x17, b"7001010000000").is_err());
        assert!(time(0x18, b"700101000000Z").is_err());
    }

    #[test]
    fn tlv_lengths_are_minimal() {
        assert!(tlv(&[0x30, 0x81, 0x05, 1, 2, 3, 4, 5], "x").is_err());
        assert!(tlv(&[0x30, 0x82, 0x00, 0x80], "x").is_err());
        assert!(tlv(&[0x30, 0x05, 1], "x").is_err());
        let (t, v, rest, whole) = tlv(&[0x02, 0x01, 0x07, 0xff], "x").unwrap();
        assert_eq!(
            (t, v, rest, whole),
            (2, &[7u8][..], &[0xffu8][..], &[2u8, 1, 7][..])
        );
    }
}
