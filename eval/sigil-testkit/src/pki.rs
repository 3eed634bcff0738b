//! The test PKI, made once with pyca/cryptography (crates/sigil-dtls/tests/data/x509/): a root,
//! an intermediate, a server and a client leaf (P-256), and certificates that must be refused
//! (expired, from another root, a leaf used as an issuer, a stranger's).

macro_rules! der {
    ($name:ident, $file:literal) => {
        pub const $name: &[u8] = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../crates/sigil-dtls/tests/data/x509/",
            $file
        ));
    };
}

der!(ROOT, "root.der");
der!(INTERMEDIATE, "intermediate.der");
der!(SERVER, "server.der");
der!(CLIENT, "client.der");
der!(EXPIRED, "expired.der");
der!(OTHER_ROOT, "other-root.der");
der!(LEAF_AS_ISSUER, "leaf-as-issuer.der");
der!(STRANGER, "stranger.der");
// The leaves' P-256 private scalars, as hex text (read them with [`secret`]).
der!(SERVER_KEY, "server.key");
der!(CLIENT_KEY, "client.key");
der!(EXPIRED_KEY, "expired.key");
der!(STRANGER_KEY, "stranger.key");

/// A private key of the test PKI from its hex text (`SERVER_KEY`, `CLIENT_KEY`, ...).
pub fn secret(hex_text: &[u8]) -> sigil_crypto::SecretKey {
    let text = core::str::from_utf8(hex_text).expect("hex text").trim();
    let raw: Vec<u8> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect();
    sigil_crypto::SecretKey::from_bytes(sigil_crypto::SignatureAlgorithm::EcdsaP256, &raw)
        .expect("a P-256 scalar")
}

/// The directory of the PEM and DER files, for tests that hand them to other programs.
pub fn dir() -> std::path::PathBuf {
    std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crates/sigil-dtls/tests/data/x509"
    ))
}

/// A server chain, leaf first.
pub fn server_chain() -> [&'static [u8]; 2] {
    [SERVER, INTERMEDIATE]
}

/// A client chain, leaf first.
pub fn client_chain() -> [&'static [u8]; 2] {
    [CLIENT, INTERMEDIATE]
}
