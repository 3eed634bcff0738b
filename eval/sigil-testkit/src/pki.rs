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
// Raw P-256 private scalars of the leaves (32 bytes).
der!(SERVER_KEY, "server.key");
der!(CLIENT_KEY, "client.key");
der!(STRANGER_KEY, "stranger.key");

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
