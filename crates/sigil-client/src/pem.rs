//! Reading certificates and P-256 private keys from PEM files (RFC 7468) for coaps:// with
//! X.509.

use base64::Engine;
use sigil_crypto::{SecretKey, SignatureAlgorithm};

/// The DER blocks labelled `label` (e.g. "CERTIFICATE"), in file order.
pub fn blocks(text: &str, label: &str) -> Result<Vec<Vec<u8>>, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(&begin) {
        let after = &rest[i + begin.len()..];
        let j = after
            .find(&end)
            .ok_or_else(|| format!("unterminated {label} block"))?;
        let b64: String = after[..j].chars().filter(|c| !c.is_whitespace()).collect();
        out.push(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("{label} block: {e}"))?,
        );
        rest = &after[j + end.len()..];
    }
    Ok(out)
}

/// A P-256 private key from a PKCS#8 ("PRIVATE KEY") or SEC1 ("EC PRIVATE KEY") PEM file:
/// the 32-byte scalar of the `ECPrivateKey` structure (RFC 5915 §3) inside either.
pub fn p256_key(text: &str) -> Result<SecretKey, String> {
    let der = blocks(text, "PRIVATE KEY")?
        .into_iter()
        .chain(blocks(text, "EC PRIVATE KEY")?)
        .next()
        .ok_or("no PRIVATE KEY or EC PRIVATE KEY block")?;
    // ECPrivateKey ::= SEQUENCE { version INTEGER 1, privateKey OCTET STRING (32), ... }
    let marker = [0x02, 0x01, 0x01, 0x04, 0x20];
    let i = der
        .windows(marker.len())
        .position(|w| w == marker)
        .ok_or("not a P-256 ECPrivateKey")?;
    let scalar = der
        .get(i + marker.len()..i + marker.len() + 32)
        .ok_or("truncated ECPrivateKey")?;
    SecretKey::from_bytes(SignatureAlgorithm::EcdsaP256, scalar).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_test_pki() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../sigil-dtls/tests/data/x509/"
        );
        let chain = std::fs::read_to_string(format!("{dir}server-chain.pem")).unwrap();
        let certs = blocks(&chain, "CERTIFICATE").unwrap();
        assert_eq!(certs[0], std::fs::read(format!("{dir}server.der")).unwrap());
        assert_eq!(
            certs[1],
            std::fs::read(format!("{dir}intermediate.der")).unwrap()
        );
        let key =
            p256_key(&std::fs::read_to_string(format!("{dir}server.key.pem")).unwrap()).unwrap();
        let raw = std::fs::read_to_string(format!("{dir}server.key")).unwrap();
        assert_eq!(hex_of(&key.to_bytes()), raw.trim());
        assert!(blocks("-----BEGIN CERTIFICATE-----\nAAAA", "CERTIFICATE").is_err());
        assert!(p256_key("nothing").is_err());
    }

    fn hex_of(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
