//! AES-128-GCM against the McGrew-Viega test vectors (the GCM specification's Test Case 4,
//! 96-bit IV with additional data), through the provider trait.

use sigil_crypto::{CryptoProvider, RustCrypto};

#[test]
fn gcm_test_case_4() {
    let key: [u8; 16] = hex::decode("feffe9928665731c6d6a8f9467308308")
        .unwrap()
        .try_into()
        .unwrap();
    let iv: [u8; 12] = hex::decode("cafebabefacedbaddecaf888")
        .unwrap()
        .try_into()
        .unwrap();
    let pt = hex::decode("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39").unwrap();
    let aad = hex::decode("feedfacedeadbeeffeedfacedeadbeefabaddad2").unwrap();
    let ct = "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091";
    let tag = "5bc94fbc3221a5db94fae95ae7121a47";
    let mut buf = pt.clone();
    let t = RustCrypto
        .aes128_gcm_seal(&key, &iv, &aad, &mut buf)
        .unwrap();
    assert_eq!(hex::encode(&buf), ct);
    assert_eq!(hex::encode(t), tag);
    RustCrypto
        .aes128_gcm_open(&key, &iv, &aad, &mut buf, &t)
        .unwrap();
    assert_eq!(buf, pt);
    let mut bad = t;
    bad[0] ^= 1;
    assert!(RustCrypto
        .aes128_gcm_open(&key, &iv, &aad, &mut buf.clone(), &bad)
        .is_err());
}
