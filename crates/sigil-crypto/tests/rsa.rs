//! RSA (feature `rsa`) checked against OpenSSL, which nobody here wrote: an RSA-2048 key made
//! by `openssl genpkey`, signatures verified by `openssl dgst` and ours verifying its, a
//! premaster secret encrypted by `openssl pkeyutl` and recovered; and the TLS premaster
//! decryption's answer to bad ciphertexts (RFC 5246 §7.4.7.1): a random secret, never an
//! error that depends on the plaintext.

#![cfg(feature = "rsa")]

use sigil_crypto::{CryptoError, CryptoProvider, RsaPublicKey, RsaSecretKey, RustCrypto};
use sigil_testkit::Counter;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

struct Key {
    dir: PathBuf,
    secret: RsaSecretKey,
    public: RsaPublicKey,
}

fn openssl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .current_dir(&key().dir)
        .args(args)
        .output()
        .expect("openssl is installed by scripts/install-test-deps");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn key() -> &'static Key {
    static KEY: OnceLock<Key> = OnceLock::new();
    KEY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("sigil-crypto-rsa-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let run = |args: &[&str]| {
            let ok = Command::new("openssl")
                .current_dir(&dir)
                .args(args)
                .status()
                .expect("openssl is installed by scripts/install-test-deps");
            assert!(ok.success(), "openssl {args:?}");
        };
        run(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "key.pem",
        ]);
        run(&[
            "rsa",
            "-in",
            "key.pem",
            "-outform",
            "DER",
            "-traditional",
            "-out",
            "key.der",
        ]);
        run(&["pkey", "-in", "key.pem", "-pubout", "-out", "pub.pem"]);
        let secret = RsaSecretKey::from_pkcs1_der(&std::fs::read(dir.join("key.der")).unwrap());
        let public = RustCrypto.rsa_public_key(&secret).unwrap();
        Key {
            dir,
            secret,
            public,
        }
    })
}

fn write(name: &str, bytes: &[u8]) -> String {
    std::fs::write(key().dir.join(name), bytes).unwrap();
    name.to_string()
}

#[test]
fn the_public_key_is_the_one_openssl_reports() {
    let k = key();
    assert_eq!(k.public.size(), 256);
    assert_eq!(k.public.exponent(), 65_537);
    let text =
        String::from_utf8(openssl(&["rsa", "-in", "key.pem", "-noout", "-modulus"])).unwrap();
    let hex_modulus = text.trim().strip_prefix("Modulus=").unwrap();
    assert_eq!(hex_modulus.to_lowercase(), hex::encode(k.public.modulus()));
}

#[test]
fn our_signature_verifies_in_openssl_and_its_in_ours() {
    let k = key();
    let message = b"ServerKeyExchange params";
    let mut sig = [0u8; 512];
    let n = RustCrypto
        .rsa_pkcs1_sha256_sign(&k.secret, message, &mut Counter::new(1, 7), &mut sig)
        .unwrap();
    assert_eq!(n, 256);
    write("msg", message);
    write("ours.sig", &sig[..n]);
    let out = openssl(&[
        "dgst",
        "-sha256",
        "-verify",
        "pub.pem",
        "-signature",
        "ours.sig",
        "msg",
    ]);
    assert_eq!(String::from_utf8_lossy(&out).trim(), "Verified OK");

    openssl(&[
        "dgst",
        "-sha256",
        "-sign",
        "key.pem",
        "-out",
        "theirs.sig",
        "msg",
    ]);
    let theirs = std::fs::read(k.dir.join("theirs.sig")).unwrap();
    // PKCS#1 v1.5 signing is deterministic: the same bytes as ours.
    assert_eq!(theirs, &sig[..n]);
    RustCrypto
        .rsa_pkcs1_sha256_verify(&k.public, message, &theirs)
        .unwrap();
    assert_eq!(
        RustCrypto.rsa_pkcs1_sha256_verify(&k.public, b"another message", &theirs),
        Err(CryptoError::BadSignature)
    );
    assert_eq!(
        RustCrypto.rsa_pkcs1_sha256_verify(&k.public, message, &theirs[1..]),
        Err(CryptoError::SignatureLength)
    );
}

#[test]
fn a_premaster_secret_openssl_encrypted_is_recovered() {
    let k = key();
    let mut premaster = [0x5au8; 48];
    premaster[..2].copy_from_slice(&[0xfe, 0xfd]);
    write("pm", &premaster);
    openssl(&[
        "pkeyutl",
        "-encrypt",
        "-pubin",
        "-inkey",
        "pub.pem",
        "-pkeyopt",
        "rsa_padding_mode:pkcs1",
        "-in",
        "pm",
        "-out",
        "pm.enc",
    ]);
    let ct = std::fs::read(k.dir.join("pm.enc")).unwrap();
    let got = RustCrypto
        .rsa_tls_premaster(&k.secret, &ct, [0xfe, 0xfd], &mut Counter::new(9, 1))
        .unwrap();
    assert_eq!(*got, premaster);
}

#[test]
fn our_encryption_decrypts_in_openssl() {
    let k = key();
    let mut ct = [0u8; 512];
    let n = RustCrypto
        .rsa_pkcs1_encrypt(&k.public, &[0x33; 48], &mut Counter::new(4, 5), &mut ct)
        .unwrap();
    write("ours.enc", &ct[..n]);
    let plain = openssl(&[
        "pkeyutl",
        "-decrypt",
        "-inkey",
        "key.pem",
        "-pkeyopt",
        "rsa_padding_mode:pkcs1",
        "-in",
        "ours.enc",
    ]);
    assert_eq!(plain, [0x33; 48]);
}

#[test]
fn bad_ciphertexts_give_a_random_secret_with_the_hellos_version() {
    let k = key();
    let encrypt = |m: &[u8]| {
        let mut ct = [0u8; 512];
        let n = RustCrypto
            .rsa_pkcs1_encrypt(&k.public, m, &mut Counter::new(2, 9), &mut ct)
            .unwrap();
        ct[..n].to_vec()
    };
    let good = encrypt(&[0x44; 48]);
    let mut flipped = good.clone();
    flipped[17] ^= 1;
    let mut too_big = vec![0xff; 256];
    too_big[255] = 0xfe;
    let cases = [
        ("flipped", flipped),
        ("47 bytes", encrypt(&[0x44; 47])),
        ("49 bytes", encrypt(&[0x44; 49])),
        ("empty message", encrypt(&[])),
        ("not below n", too_big),
    ];
    for (what, ct) in cases {
        let a = RustCrypto
            .rsa_tls_premaster(&k.secret, &ct, [0xfe, 0xfd], &mut Counter::new(1, 1))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let b = RustCrypto
            .rsa_tls_premaster(&k.secret, &ct, [0xfe, 0xfd], &mut Counter::new(2, 1))
            .unwrap();
        assert_eq!(a[..2], [0xfe, 0xfd], "{what}");
        // The rest is the caller's randomness, so it changes with it.
        assert_ne!(a[2..], b[2..], "{what}");
        assert_ne!(a[2..], [0x44; 46], "{what}");
    }
    // A well-formed secret with another version: the version is the ClientHello's.
    let mut other = [0x44u8; 48];
    other[..2].copy_from_slice(&[0x03, 0x03]);
    let got = RustCrypto
        .rsa_tls_premaster(
            &k.secret,
            &encrypt(&other),
            [0xfe, 0xfd],
            &mut Counter::new(1, 1),
        )
        .unwrap();
    assert_eq!(got[..2], [0xfe, 0xfd]);
    assert_eq!(got[2..], [0x44; 46]);
    // A ciphertext of the wrong length is refused: that does not depend on the plaintext.
    assert_eq!(
        RustCrypto
            .rsa_tls_premaster(&k.secret, &good[1..], [0xfe, 0xfd], &mut Counter::new(1, 1))
            .err(),
        Some(CryptoError::KeyLength)
    );
}

#[test]
fn keys_outside_2048_to_4096_bits_are_refused() {
    assert_eq!(
        RsaPublicKey::from_modulus_exponent(&[0xc5; 255], &[1, 0, 1]).err(),
        Some(CryptoError::KeyLength)
    );
    assert_eq!(
        RsaPublicKey::from_modulus_exponent(&[0xc5; 513], &[1, 0, 1]).err(),
        Some(CryptoError::KeyLength)
    );
    // An even modulus or exponent, or an exponent of 1, is no RSA key.
    let mut even = [0xc5u8; 256];
    even[255] = 0xc4;
    assert!(RsaPublicKey::from_modulus_exponent(&even, &[1, 0, 1]).is_err());
    assert!(RsaPublicKey::from_modulus_exponent(&[0xc5; 256], &[1, 0, 0]).is_err());
    assert!(RsaPublicKey::from_modulus_exponent(&[0xc5; 256], &[1]).is_err());
    assert!(RsaPublicKey::from_modulus_exponent(&[0xc5; 256], &[1, 0, 1]).is_ok());
    assert_eq!(
        RustCrypto
            .rsa_public_key(&RsaSecretKey::from_pkcs1_der(b"not DER"))
            .err(),
        Some(CryptoError::InvalidKey)
    );
}
