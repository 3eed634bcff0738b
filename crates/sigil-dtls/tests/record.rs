//! The record layer: header parsing, records of a datagram, the replay window, CCM-8 record
//! protection, and the regressions for published bug classes that live at this layer.

use sigil_crypto::RustCrypto;
use sigil_dtls::protection::{self, RecordKeys, OVERHEAD};
use sigil_dtls::record::{Record, RecordHeader, Records, ReplayWindow, HEADER_LEN};
use sigil_dtls::wire::{AlertDescription, ContentType, ProtocolVersion};
use sigil_dtls::{Error, Writer};

fn header(ct: u8, version: u16, epoch: u16, seq: u64, len: u16) -> Vec<u8> {
    let mut b = [0u8; 13];
    let mut w = Writer::new(&mut b);
    RecordHeader {
        content_type: ContentType(ct),
        version: ProtocolVersion(version),
        epoch,
        sequence: seq,
        length: len,
    }
    .write(&mut w)
    .unwrap();
    b.to_vec()
}

#[test]
fn header_fields_are_where_rfc_6347_puts_them() {
    let h = header(22, 0xfefd, 1, 0x0000_0102_0304, 3);
    //          type  version     epoch      sequence (48 bits)           length
    assert_eq!(
        h,
        [22, 0xfe, 0xfd, 0x00, 0x01, 0, 0, 1, 2, 3, 4, 0x00, 0x03]
    );
    let mut d = h.clone();
    d.extend_from_slice(b"abc");
    let (r, rest) = Record::parse(&d).unwrap();
    assert_eq!(r.header.epoch, 1);
    assert_eq!(r.header.sequence, 0x0102_0304);
    assert_eq!(r.header.seq_num(), [0, 1, 0, 0, 1, 2, 3, 4]);
    assert_eq!(r.fragment, b"abc");
    assert!(rest.is_empty());
}

#[test]
fn a_datagram_carries_several_records_and_stops_at_the_first_bad_one() {
    let mut d = header(22, 0xfefd, 0, 0, 2);
    d.extend_from_slice(b"hi");
    d.extend(header(21, 0xfefd, 0, 1, 1));
    d.push(7);
    d.extend(header(23, 0xfefd, 1, 0, 50)); // claims more than remains
    d.extend_from_slice(b"short");
    let got: Vec<_> = Records::new(&d).collect();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0].as_ref().unwrap().fragment, b"hi");
    assert_eq!(
        got[1].as_ref().unwrap().header.content_type,
        ContentType::ALERT
    );
    assert_eq!(got[2], Err(Error::Decode("record fragment")));
}

#[test]
fn non_dtls_versions_oversized_and_truncated_records_are_refused() {
    let mut tls = header(22, 0x0303, 0, 0, 0);
    assert_eq!(Record::parse(&tls), Err(Error::BadRecordVersion(0x0303)));
    tls = header(22, 0xfefd, 0, 0, 18433);
    tls.resize(tls.len() + 18433, 0);
    assert_eq!(Record::parse(&tls), Err(Error::RecordOverflow));
    assert_eq!(
        Record::parse(&[22, 0xfe]),
        Err(Error::Decode("record header"))
    );
    // DTLS 1.0 records are accepted (a ClientHello may use them, RFC 6347 §4.2.1).
    assert!(Record::parse(&header(22, 0xfeff, 0, 0, 0)).is_ok());
    // Invalid records are dropped silently, not answered with an alert (§4.1.2.7).
    assert_eq!(Error::BadRecordVersion(0x0303).alert(), None);
    assert_eq!(
        Error::RecordOverflow.alert(),
        Some(AlertDescription::RECORD_OVERFLOW)
    );
}

#[test]
fn replay_window_accepts_new_numbers_once_and_forgets_the_far_past() {
    let mut w = ReplayWindow::new();
    for s in [5u64, 3, 7, 6] {
        w.check(s).unwrap();
        w.accept(s);
    }
    for s in [3u64, 5, 6, 7] {
        assert_eq!(w.check(s), Err(Error::Replayed), "{s}");
    }
    w.check(4).unwrap(); // inside the window, never seen
    w.check(1000).unwrap();
    w.accept(1000);
    assert_eq!(w.check(1000 - 64), Err(Error::Replayed)); // left of the window
    w.check(1000 - 63).unwrap();
    assert_eq!(w.check(7), Err(Error::Replayed));
    assert_eq!(w.highest(), Some(1000));
}

#[test]
fn replay_window_moves_only_when_told_the_record_authenticated() {
    // A forged record with a far-future number fails its MAC and is never accepted, so it
    // cannot push genuine numbers out of the window.
    let mut w = ReplayWindow::new();
    w.accept(10);
    w.check(1 << 40).unwrap(); // might be new...
                               // ...but without accept() the window stays put:
    w.check(9).unwrap();
    assert_eq!(w.highest(), Some(10));
}

fn keys(b: u8) -> RecordKeys {
    RecordKeys {
        aead: protection::Aead::Ccm8,
        key: [b; 16],
        salt: [b ^ 0x5a; 4],
    }
}

#[test]
fn ccm8_records_round_trip_and_cost_29_bytes() {
    let mut out = [0u8; 128];
    let n = protection::seal(
        &RustCrypto,
        &keys(1),
        ContentType::APPLICATION_DATA,
        1,
        42,
        b"reading",
        &mut out,
    )
    .unwrap();
    assert_eq!(n, b"reading".len() + OVERHEAD);
    assert_eq!(OVERHEAD, 13 + 8 + 8);
    let (rec, _) = Record::parse(&out[..n]).unwrap();
    assert_eq!((rec.header.epoch, rec.header.sequence), (1, 42));
    // The explicit nonce is epoch || sequence number.
    assert_eq!(&out[HEADER_LEN..HEADER_LEN + 8], &[0, 1, 0, 0, 0, 0, 0, 42]);
    let mut frag = rec.fragment.to_vec();
    let pt = protection::open(&RustCrypto, &keys(1), &rec.header, &mut frag).unwrap();
    assert_eq!(pt, b"reading");
}

#[test]
fn ccm8_refuses_a_changed_byte_header_or_key() {
    let mut out = [0u8; 128];
    let n = protection::seal(
        &RustCrypto,
        &keys(1),
        ContentType::APPLICATION_DATA,
        1,
        42,
        b"reading",
        &mut out,
    )
    .unwrap();
    let (rec, _) = Record::parse(&out[..n]).unwrap();
    for i in 0..rec.fragment.len() {
        let mut f = rec.fragment.to_vec();
        f[i] ^= 0x01;
        assert_eq!(
            protection::open(&RustCrypto, &keys(1), &rec.header, &mut f),
            Err(Error::BadRecordMac),
            "byte {i}"
        );
    }
    // The header is authenticated: another epoch, sequence or type does not verify.
    for h in [
        RecordHeader {
            epoch: 2,
            ..rec.header
        },
        RecordHeader {
            sequence: 43,
            ..rec.header
        },
        RecordHeader {
            content_type: ContentType::HANDSHAKE,
            ..rec.header
        },
    ] {
        let mut f = rec.fragment.to_vec();
        assert_eq!(
            protection::open(&RustCrypto, &keys(1), &h, &mut f),
            Err(Error::BadRecordMac)
        );
    }
    let mut f = rec.fragment.to_vec();
    assert_eq!(
        protection::open(&RustCrypto, &keys(2), &rec.header, &mut f),
        Err(Error::BadRecordMac)
    );
    let mut short = [0u8; 15];
    assert_eq!(
        protection::open(&RustCrypto, &keys(1), &rec.header, &mut short),
        Err(Error::BadRecordMac)
    );
}

#[test]
fn regression_cve_2020_24585_cleartext_epoch_0_data_is_not_application_data() {
    // A record at epoch 0 carries no protection: whoever handles records must never deliver
    // its content as application data. At this layer: such a record parses (it is a record)
    // but opening it with keys fails, so it cannot be mistaken for protected data.
    let mut d = header(23, 0xfefd, 0, 5, 7);
    d.extend_from_slice(b"payload");
    let (rec, _) = Record::parse(&d).unwrap();
    let mut f = rec.fragment.to_vec();
    assert_eq!(
        protection::open(&RustCrypto, &keys(1), &rec.header, &mut f),
        Err(Error::BadRecordMac)
    );
}

/// An epoch-0 record carrying one whole ClientHello with the given random, session ID and
/// cookie.
fn client_hello_datagram(random: &[u8; 32], session_id: &[u8], cookie: &[u8]) -> Vec<u8> {
    use sigil_dtls::handshake::{ClientHelloParams, Fragment};
    use sigil_dtls::wire::{CipherSuite, HandshakeType};
    let mut body = [0u8; 256];
    let mut w = Writer::new(&mut body);
    ClientHelloParams {
        random,
        session_id,
        cookie,
        cipher_suites: &[CipherSuite::TLS_PSK_WITH_AES_128_CCM_8],
        extensions: &[0x00, 0x17, 0x00, 0x00],
    }
    .write(&mut w)
    .unwrap();
    let n = w.len();
    let mut frag = [0u8; 300];
    let mut w = Writer::new(&mut frag);
    Fragment {
        msg_type: HandshakeType::CLIENT_HELLO,
        length: n as u32,
        message_seq: 1,
        offset: 0,
        body: &body[..n],
    }
    .write(&mut w)
    .unwrap();
    let f = w.len();
    let mut d = header(22, 0xfefd, 0, 5, f as u16);
    d.extend_from_slice(&frag[..f]);
    d
}

#[test]
fn record_facts_read_a_client_hello_where_rfc_6347_puts_it() {
    use sigil_dtls::record::RecordFacts;
    let d = client_hello_datagram(&[7; 32], &[9; 32], &[1, 2]);
    let facts = RecordFacts::parse(&d, 8).unwrap();
    assert_eq!(facts.content_type, ContentType::HANDSHAKE);
    assert_eq!((facts.epoch, facts.sequence), (0, 5));
    assert!(facts.cid.is_empty());
    assert!(facts.is_client_hello());
    let ch = facts.client_hello.unwrap();
    // Record header 13, handshake header 12, client_version 2: the random is at 27..59.
    assert_eq!(ch.random, &[7; 32]);
    assert_eq!(&d[27..59], &[7; 32]);
    assert_eq!(ch.requested_session, Some(&[9; 32]));
    assert!(ch.has_cookie);
    // No session ID (or one of another length) asks for nothing; no cookie is the first hello.
    let d = client_hello_datagram(&[7; 32], &[], &[]);
    let ch = RecordFacts::parse(&d, 8).unwrap().client_hello.unwrap();
    assert_eq!(ch.requested_session, None);
    assert!(!ch.has_cookie);
    let d = client_hello_datagram(&[7; 32], &[9; 16], &[]);
    let ch = RecordFacts::parse(&d, 8).unwrap().client_hello.unwrap();
    assert_eq!(ch.requested_session, None);
}

#[test]
fn record_facts_read_the_connection_id_of_a_tls12_cid_record() {
    use sigil_dtls::record::RecordFacts;
    // tls12_cid, DTLS 1.2, epoch 1, sequence 3, an 8-byte CID, length 4 (RFC 9146 §4).
    let mut d = vec![25, 0xfe, 0xfd, 0, 1, 0, 0, 0, 0, 0, 3];
    d.extend_from_slice(&[0xc1; 8]);
    d.extend_from_slice(&[0, 4, 1, 2, 3, 4]);
    let facts = RecordFacts::parse(&d, 8).unwrap();
    assert_eq!(facts.content_type, ContentType::TLS12_CID);
    assert_eq!((facts.epoch, facts.sequence), (1, 3));
    assert_eq!(facts.cid, &[0xc1; 8]);
    assert!(!facts.is_client_hello() && facts.client_hello.is_none());
}

#[test]
fn record_facts_refuse_truncated_records_and_do_not_mistake_fragments_for_hellos() {
    use sigil_dtls::record::RecordFacts;
    let d = client_hello_datagram(&[7; 32], &[], &[]);
    for n in 0..d.len() {
        assert!(RecordFacts::parse(&d[..n], 8).is_err(), "{n} bytes");
    }
    // The first fragment of a ClientHello: a ClientHello record (for the cookie check to
    // refuse), but no facts of a whole one.
    let mut frag = d.clone();
    frag[13 + 9..13 + 12].copy_from_slice(&[0, 0, 10]); // fragment_length 10
    frag.truncate(13 + 12 + 10);
    frag[11..13].copy_from_slice(&22u16.to_be_bytes());
    let facts = RecordFacts::parse(&frag, 8).unwrap();
    assert!(facts.is_client_hello());
    assert_eq!(facts.client_hello, None);
    // A ClientHello in epoch 1 is no plaintext hello.
    let mut e1 = d.clone();
    e1[4] = 1;
    let facts = RecordFacts::parse(&e1, 8).unwrap();
    assert!(!facts.is_client_hello() && facts.client_hello.is_none());
}
