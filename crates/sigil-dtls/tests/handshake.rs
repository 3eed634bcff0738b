//! Handshake framing, reassembly, hello messages and the key schedule, with the regressions
//! for published bug classes that live at this layer.

use sigil_crypto::RustCrypto;
use sigil_dtls::handshake::{
    ClientHello, ClientHelloParams, Fragment, HelloVerifyRequest, Reassembler, ServerHello,
};
use sigil_dtls::keys::{self, Side};
use sigil_dtls::wire::{
    AlertDescription, CipherSuite, ExtensionType, HandshakeType, ProtocolVersion,
};
use sigil_dtls::{Error, Writer};

fn frag(t: u8, len: u32, seq: u16, off: u32, body: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 12 + body.len()];
    let mut w = Writer::new(&mut b);
    Fragment {
        msg_type: HandshakeType(t),
        length: len,
        message_seq: seq,
        offset: off,
        body,
    }
    .write(&mut w)
    .unwrap();
    b
}

fn hello_body(cookie: &[u8], suites: &[CipherSuite], ext: &[u8]) -> Vec<u8> {
    let mut b = [0u8; 512];
    let mut w = Writer::new(&mut b);
    ClientHelloParams {
        random: &[7; 32],
        session_id: &[],
        cookie,
        cipher_suites: suites,
        extensions: ext,
    }
    .write(&mut w)
    .unwrap();
    let n = w.len();
    b[..n].to_vec()
}

#[test]
fn client_hello_round_trips_with_cookie_suites_and_extensions() {
    // extended_master_secret (empty) and renegotiation_info (empty renegotiated_connection).
    let ext = [0x00, 0x17, 0x00, 0x00, 0xff, 0x01, 0x00, 0x01, 0x00];
    let body = hello_body(b"cookie!", &[CipherSuite::TLS_PSK_WITH_AES_128_CCM_8], &ext);
    let ch = ClientHello::parse(&body).unwrap();
    assert_eq!(ch.version, ProtocolVersion::DTLS_1_2);
    assert_eq!(ch.cookie, b"cookie!");
    assert_eq!(
        ch.cipher_suites().collect::<Vec<_>>(),
        [CipherSuite::TLS_PSK_WITH_AES_128_CCM_8]
    );
    assert_eq!(
        ch.extensions.get(ExtensionType::EXTENDED_MASTER_SECRET),
        Some(&[][..])
    );
    assert_eq!(
        ch.extensions.get(ExtensionType::RENEGOTIATION_INFO),
        Some(&[0][..])
    );
    assert_eq!(ch.extensions.get(ExtensionType::CONNECTION_ID), None);
}

#[test]
fn cookie_input_excludes_the_cookie_and_covers_everything_else() {
    let a = hello_body(b"one", &[CipherSuite::TLS_PSK_WITH_AES_128_CCM_8], &[]);
    let b = hello_body(b"two", &[CipherSuite::TLS_PSK_WITH_AES_128_CCM_8], &[]);
    let c = hello_body(
        b"one",
        &[CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8],
        &[],
    );
    let (a, b, c) = (
        ClientHello::parse(&a).unwrap(),
        ClientHello::parse(&b).unwrap(),
        ClientHello::parse(&c).unwrap(),
    );
    assert_eq!(a.cookie_input(), b.cookie_input());
    assert_ne!(a.cookie_input(), c.cookie_input());
}

#[test]
fn regression_cve_2021_42143_odd_length_cipher_suite_list() {
    let mut body = hello_body(b"", &[CipherSuite::TLS_PSK_WITH_AES_128_CCM_8], &[]);
    // version 2, random 32, session_id 1, cookie 1 => suites length at 36.
    assert_eq!(&body[36..38], &[0, 2]);
    body[37] = 3;
    body.insert(40, 0xaa);
    assert_eq!(ClientHello::parse(&body), Err(Error::OddCipherSuiteList));
    assert_eq!(
        Error::OddCipherSuiteList.alert(),
        Some(AlertDescription::DECODE_ERROR)
    );
}

#[test]
fn regression_cve_2022_35409_cookie_length_past_the_end() {
    let mut body = hello_body(b"abc", &[CipherSuite::TLS_PSK_WITH_AES_128_CCM_8], &[]);
    body[35] = 0xff; // cookie length 255, far more than remains
    assert_eq!(
        ClientHello::parse(&body),
        Err(Error::Decode("ClientHello cookie"))
    );
    body.truncate(36);
    assert_eq!(
        ClientHello::parse(&body),
        Err(Error::Decode("ClientHello cookie"))
    );
    assert!(HelloVerifyRequest::parse(&[0xfe, 0xfd, 9, 1, 2]).is_err());
}

#[test]
fn malformed_hellos_are_refused_with_the_right_error() {
    let good = hello_body(b"", &[CipherSuite::TLS_PSK_WITH_AES_128_CCM_8], &[]);
    let mut trailing = good.clone();
    trailing.extend_from_slice(&[0, 0, 9]);
    assert!(ClientHello::parse(&trailing).is_err());
    let mut no_null = good.clone();
    let at = good.len() - 1;
    no_null[at] = 1; // compression method list [1]
    assert_eq!(ClientHello::parse(&no_null), Err(Error::NoNullCompression));
    let dup = [0x00, 0x17, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00];
    let body = hello_body(b"", &[CipherSuite::TLS_PSK_WITH_AES_128_CCM_8], &dup);
    assert_eq!(
        ClientHello::parse(&body),
        Err(Error::DuplicateExtension(23))
    );
    for n in 0..good.len() {
        assert!(ClientHello::parse(&good[..n]).is_err(), "truncated at {n}");
    }
}

#[test]
fn server_hello_and_hello_verify_request_round_trip() {
    let mut b = [0u8; 128];
    let mut w = Writer::new(&mut b);
    let hvr = HelloVerifyRequest {
        server_version: ProtocolVersion::DTLS_1_0,
        cookie: &[1, 2, 3],
    };
    hvr.write(&mut w).unwrap();
    let n = w.len();
    assert_eq!(HelloVerifyRequest::parse(&b[..n]).unwrap(), hvr);

    let ext = [0x00, 0x17, 0x00, 0x00];
    let sh_ext = sigil_dtls::handshake::Extensions::parse(&ext).unwrap();
    let sh = ServerHello {
        version: ProtocolVersion::DTLS_1_2,
        random: &[9; 32],
        session_id: &[4; 32],
        cipher_suite: CipherSuite::TLS_PSK_WITH_AES_128_CCM_8,
        compression_method: 0,
        extensions: sh_ext,
    };
    let mut w = Writer::new(&mut b);
    sh.write(&mut w).unwrap();
    let n = w.len();
    assert_eq!(ServerHello::parse(&b[..n]).unwrap(), sh);
}

#[test]
fn fragments_reassemble_in_any_order_with_overlaps() {
    let msg: Vec<u8> = (0..100u8).collect();
    let mut r = Reassembler::<256>::new();
    let parts = [(60, 40), (0, 30), (25, 40)];
    for (i, (off, len)) in parts.iter().enumerate() {
        let f = frag(
            11,
            100,
            3,
            *off,
            &msg[*off as usize..(*off + *len) as usize],
        );
        let (f, rest) = Fragment::parse(&f).unwrap();
        assert!(rest.is_empty());
        let got = r.add(&f).unwrap();
        if i < 2 {
            assert!(got.is_none());
        } else {
            assert_eq!(got.unwrap(), &msg[..]);
        }
    }
    assert_eq!(r.current(), None);
}

#[test]
fn regression_fragments_of_different_messages_are_never_merged() {
    let mut r = Reassembler::<256>::new();
    let a = frag(11, 100, 3, 0, &[1; 50]);
    r.add(&Fragment::parse(&a).unwrap().0).unwrap();
    for other in [
        frag(12, 100, 3, 50, &[2; 50]),
        frag(11, 99, 3, 50, &[2; 49]),
        frag(11, 100, 4, 50, &[2; 50]),
    ] {
        assert_eq!(
            r.add(&Fragment::parse(&other).unwrap().0),
            Err(Error::FragmentMismatch)
        );
    }
    // Overlapping bytes that disagree are refused too.
    let conflict = frag(11, 100, 3, 40, &[9; 20]);
    assert_eq!(
        r.add(&Fragment::parse(&conflict).unwrap().0),
        Err(Error::FragmentConflict)
    );
}

#[test]
fn regression_cve_2022_29190_zero_length_fragment() {
    let f = frag(11, 100, 0, 10, &[]);
    assert_eq!(Fragment::parse(&f), Err(Error::ZeroLengthFragment));
    // An empty message (ServerHelloDone) is one empty fragment and is fine.
    let done = frag(14, 0, 4, 0, &[]);
    let (f, _) = Fragment::parse(&done).unwrap();
    let mut r = Reassembler::<64>::new();
    assert_eq!(r.add(&f).unwrap(), Some(&[][..]));
}

#[test]
fn regression_cve_2022_29189_no_unbounded_buffering() {
    // A message longer than the buffer is refused at its first fragment, before any copy.
    let mut r = Reassembler::<256>::new();
    let f = frag(11, 0xff_ffff, 0, 0, &[0; 16]);
    assert_eq!(
        r.add(&Fragment::parse(&f).unwrap().0),
        Err(Error::MessageTooLarge {
            length: 0xff_ffff,
            capacity: 256
        })
    );
    // Fragment ranges outside the message are a decode error.
    let f = frag(11, 10, 0, 8, &[0; 4]);
    assert_eq!(Fragment::parse(&f), Err(Error::FragmentOutOfRange));
    // And the number of holes is bounded.
    let mut r = Reassembler::<256>::new();
    let mut err = None;
    for i in 0..20u32 {
        let f = frag(11, 200, 0, i * 10, &[0; 1]);
        if let Err(e) = r.add(&Fragment::parse(&f).unwrap().0) {
            err = Some(e);
            break;
        }
    }
    assert_eq!(err, Some(Error::TooFragmented));
}

// Expected values computed with Python's hmac/hashlib (an independent PRF implementation);
// the first is the widely published TLS 1.2 PRF-SHA256 test vector.
#[test]
fn prf_sha256_matches_the_published_vector() {
    let mut out = [0u8; 100];
    keys::prf(
        &RustCrypto,
        &hex::decode("9bbe436ba940f017b17652849a71db35").unwrap(),
        b"test label",
        &[&hex::decode("a0ba9f936cda311827a6f796ffd5198c").unwrap()],
        &mut out,
    );
    assert_eq!(
        hex::encode(out),
        "e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a6b301791e90d35c9c9a46b4e14baf9af0fa022f7077def17abfd3797c0564bab4fbc91666e9def9b97fce34f796789baa48082d122ee42c5a72e5a5110fff70187347b66"
    );
}

#[test]
fn psk_key_schedule_matches_an_independent_implementation() {
    let psk: Vec<u8> = (1..=16).collect();
    let mut pre = [0u8; 132];
    let n = keys::psk_premaster(&psk, &mut pre).unwrap();
    assert_eq!(n, 36);
    assert_eq!(&pre[..4], &[0, 16, 0, 0]);
    let ms = keys::master_secret(&RustCrypto, &pre[..n], &[0x11; 32], &[0x22; 32]);
    assert_eq!(hex::encode(ms), "501c262b0d21c2292e9c41b1ec5d7a2893192b5352bbac6d0c55df3f2f56ae075d3d966651c70f2d901be506509452f6");
    let kb = keys::key_block_ccm8(&RustCrypto, &ms, &[0x11; 32], &[0x22; 32]);
    assert_eq!(
        hex::encode(kb.client.key),
        "9e1f890a27353603e21d99fa26ef7eed"
    );
    assert_eq!(
        hex::encode(kb.server.key),
        "d248786545fe417f4d31e5e566b86562"
    );
    assert_eq!(hex::encode(kb.client.salt), "5c482085");
    assert_eq!(hex::encode(kb.server.salt), "d79408cc");
    let h: [u8; 32] = sha256(b"handshake");
    assert_eq!(
        hex::encode(keys::verify_data(&RustCrypto, &ms, Side::Client, &h)),
        "13a21e5743f33f7efb9ca574"
    );
    assert_eq!(
        hex::encode(keys::extended_master_secret(&RustCrypto, &pre[..n], &h)),
        "554473efefd25454c5ee2972a517636a7ec824142c6606be673480b8e8718e5a402472835e57afbf304870fd2e9e8e4b"
    );
    assert!(keys::psk_premaster(&[], &mut pre).is_err());
    assert!(keys::psk_premaster(&[0; 65], &mut pre).is_err());
}

fn sha256(b: &[u8]) -> [u8; 32] {
    use sigil_crypto::CryptoProvider;
    RustCrypto.sha256(&[b])
}

#[test]
fn typed_extensions_encode_to_the_rfc_bytes_and_decode_back() {
    use sigil_dtls::extensions::{
        CertificateTypes, Extension, Hello, HelloExtensions, OUR_SCHEMES, P256_ONLY, RPK_ONLY,
        UNCOMPRESSED,
    };
    use sigil_dtls::handshake::Extensions;
    use sigil_dtls::wire::{CertificateType, ExtensionType};
    let list = [
        Extension::ExtendedMasterSecret,
        Extension::RenegotiationInfo(&[]),
        Extension::SupportedGroups(P256_ONLY),
        Extension::EcPointFormats(UNCOMPRESSED),
        Extension::SignatureAlgorithms(OUR_SCHEMES),
        Extension::ServerCertificateType(RPK_ONLY),
        Extension::ConnectionId(&[]),
        Extension::Unknown(ExtensionType(0x1234), &[5, 6]),
    ];
    let mut buf = [0u8; 128];
    let mut w = Writer::new(&mut buf);
    sigil_dtls::extensions::encode_all(&list, &mut w).unwrap();
    let n = w.len();
    #[rustfmt::skip]
    let want: &[u8] = &[
        0x00, 0x17, 0x00, 0x00,                         // extended_master_secret (RFC 7627)
        0xff, 0x01, 0x00, 0x01, 0x00,                   // renegotiation_info, empty (RFC 5746)
        0x00, 0x0a, 0x00, 0x04, 0x00, 0x02, 0x00, 0x17, // supported_groups [secp256r1]
        0x00, 0x0b, 0x00, 0x02, 0x01, 0x00,             // ec_point_formats [uncompressed]
        0x00, 0x0d, 0x00, 0x06, 0x00, 0x04, 0x04, 0x03, 0x08, 0x07, // signature_algorithms
        0x00, 0x14, 0x00, 0x02, 0x01, 0x02,             // server_certificate_type [RawPublicKey]
        0x00, 0x36, 0x00, 0x01, 0x00,                   // connection_id, empty (RFC 9146)
        0x12, 0x34, 0x00, 0x02, 0x05, 0x06,             // unknown, kept as it came
    ];
    assert_eq!(&buf[..n], want);
    let ext = Extensions::parse(&buf[..n]).unwrap();
    let decoded: Vec<Extension<'_>> = ext
        .iter()
        .map(|(t, d)| Extension::decode(t, d, Hello::Client).unwrap())
        .collect();
    assert_eq!(decoded, list);
    let h = HelloExtensions::decode(ext, Hello::Client).unwrap();
    assert!(h.extended_master_secret && h.offers_p256());
    assert_eq!(h.check_renegotiation_info(false), Ok(()));
    assert!(h
        .server_certificate_type
        .is_some_and(|t| t.allows(CertificateType::RAW_PUBLIC_KEY)));
    assert_eq!(h.connection_id, Some(&[][..]));
    // In a ServerHello the certificate type is one value, not a list (RFC 7250 §3).
    assert_eq!(
        Extension::decode(ExtensionType::SERVER_CERTIFICATE_TYPE, &[2], Hello::Server),
        Ok(Extension::ServerCertificateType(CertificateTypes::Chosen(
            CertificateType::RAW_PUBLIC_KEY
        )))
    );
}

#[test]
fn malformed_known_extensions_are_refused_and_renegotiation_is_detected() {
    use sigil_dtls::extensions::{Extension, Hello, HelloExtensions};
    use sigil_dtls::handshake::Extensions;
    use sigil_dtls::wire::ExtensionType;
    let bad: [(ExtensionType, &[u8]); 5] = [
        (ExtensionType::EXTENDED_MASTER_SECRET, &[0]),
        (ExtensionType::SUPPORTED_GROUPS, &[0, 3, 0, 23, 0]),
        (ExtensionType::SIGNATURE_ALGORITHMS, &[0, 2, 4]),
        (ExtensionType::CONNECTION_ID, &[17; 18]),
        (ExtensionType::RENEGOTIATION_INFO, &[2, 0]),
    ];
    for (t, d) in bad {
        assert!(
            matches!(
                Extension::decode(t, d, Hello::Client),
                Err(Error::Decode(_))
            ),
            "{t:?}"
        );
    }
    // A non-empty renegotiated_connection is a renegotiation; absent without the SCSV too.
    let reneg = [0xff, 0x01, 0x00, 0x02, 0x01, 0xaa];
    let h = HelloExtensions::decode(Extensions::parse(&reneg).unwrap(), Hello::Client).unwrap();
    assert_eq!(h.check_renegotiation_info(true), Err(Error::Renegotiation));
    let none = HelloExtensions::default();
    assert_eq!(
        none.check_renegotiation_info(false),
        Err(Error::Renegotiation)
    );
    assert_eq!(none.check_renegotiation_info(true), Ok(()));
}
