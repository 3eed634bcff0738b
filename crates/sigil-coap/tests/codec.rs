//! Message codec tests, including RFC 7252 figures and hostile inputs.

use sigil_coap::message::{empty, option};
use sigil_coap::{Code, ContentFormat, Error, Message, MessageBuilder, MessageType};

#[test]
fn build_and_parse_a_request_with_every_option_kind() {
    let mut buf = [0u8; 256];
    let mut b = MessageBuilder::new(
        &mut buf,
        MessageType::Confirmable,
        Code::PUT,
        0x1234,
        &[1, 2],
    )
    .unwrap();
    b.option(option::ETAG, &[9, 9]).unwrap();
    b.uint_option(option::OBSERVE, 0).unwrap();
    b.uri_path("/ps/4k/t").unwrap();
    b.uint_option(option::CONTENT_FORMAT, 18).unwrap();
    b.option(option::URI_QUERY, b"a=b").unwrap();
    b.uint_option(option::ACCEPT, 112).unwrap();
    b.uint_option(option::BLOCK2, 0x16).unwrap();
    b.uint_option(option::BLOCK1, 0x0e).unwrap();
    b.uint_option(option::SIZE2, 500).unwrap();
    b.uint_option(option::SIZE1, 70000).unwrap();
    let n = b.finish_with_payload(b"hello").unwrap();
    let m = Message::parse(&buf[..n]).unwrap();
    assert_eq!(m.mtype, MessageType::Confirmable);
    assert_eq!(m.code, Code::PUT);
    assert_eq!(m.message_id, 0x1234);
    assert_eq!(m.token, &[1, 2]);
    assert_eq!(
        m.uri_path().map(|s| s.unwrap()).collect::<Vec<_>>(),
        ["ps", "4k", "t"]
    );
    assert_eq!(m.content_format(), Some(ContentFormat::COSE_SIGN1));
    assert_eq!(m.accept(), Some(ContentFormat::SENML_CBOR));
    assert_eq!(m.query_param("a"), Some("b"));
    assert_eq!(m.observe(), Some(0));
    assert_eq!(m.option(option::ETAG), Some(&[9u8, 9][..]));
    assert_eq!(m.uint_option(option::SIZE1), Some(70000));
    assert_eq!(m.block2().unwrap().unwrap().szx, 6);
    assert_eq!(m.block1().unwrap().unwrap().num, 0);
    assert_eq!(m.payload, b"hello");
    assert_eq!(m.unknown_critical_option(), None);
}

#[test]
fn long_option_values_use_extended_lengths() {
    for len in [12usize, 13, 268, 269, 1000] {
        let value = vec![b'x'; len];
        let mut buf = vec![0u8; 2000];
        let mut b =
            MessageBuilder::new(&mut buf, MessageType::NonConfirmable, Code::GET, 1, &[]).unwrap();
        b.option(option::URI_QUERY, &value).unwrap();
        b.option(option::SIZE1, &[1]).unwrap();
        let n = b.finish();
        let m = Message::parse(&buf[..n]).unwrap();
        assert_eq!(m.option(option::URI_QUERY).unwrap().len(), len);
        assert_eq!(m.uint_option(option::SIZE1), Some(1));
    }
}

#[test]
fn rfc7252_appendix_a_style_get() {
    // RFC 7252 Figure 16-like: CON GET, MID 0x7d34, Uri-Path "temperature".
    let bytes = [
        0x40, 0x01, 0x7d, 0x34, 0xbb, b't', b'e', b'm', b'p', b'e', b'r', b'a', b't', b'u', b'r',
        b'e',
    ];
    let m = Message::parse(&bytes).unwrap();
    assert_eq!(m.code, Code::GET);
    assert_eq!(m.message_id, 0x7d34);
    assert_eq!(m.uri_path().next().unwrap().unwrap(), "temperature");
}

#[test]
fn hostile_inputs_are_errors() {
    assert_eq!(Message::parse(&[]), Err(Error::TooShort));
    assert_eq!(Message::parse(&[0x40, 1, 0]), Err(Error::TooShort));
    assert_eq!(
        Message::parse(&[0x80, 1, 0, 0]),
        Err(Error::UnknownVersion(2))
    );
    assert_eq!(
        Message::parse(&[0x49, 1, 0, 0]),
        Err(Error::ReservedTokenLength(9))
    );
    assert_eq!(Message::parse(&[0x42, 1, 0, 0, 1]), Err(Error::Truncated));
    assert_eq!(
        Message::parse(&[0x40, 1, 0, 0, 0xb5, b'a']),
        Err(Error::Truncated)
    );
    assert_eq!(
        Message::parse(&[0x40, 1, 0, 0, 0xf0]),
        Err(Error::ReservedOptionNibble)
    );
    assert_eq!(
        Message::parse(&[0x40, 1, 0, 0, 0x0f]),
        Err(Error::ReservedOptionNibble)
    );
    assert_eq!(
        Message::parse(&[0x40, 1, 0, 0, 0xd0]),
        Err(Error::Truncated)
    );
    assert_eq!(
        Message::parse(&[0x40, 1, 0, 0, 0xe0, 0xff]),
        Err(Error::Truncated)
    );
    assert_eq!(
        Message::parse(&[0x40, 1, 0, 0, 0xff]),
        Err(Error::EmptyPayloadAfterMarker)
    );
    assert_eq!(
        Message::parse(&[0x41, 0, 0, 0, 1]),
        Err(Error::NonEmptyEmptyMessage)
    );
    // Two options of delta 65535+: number overflow.
    assert_eq!(
        Message::parse(&[0x40, 1, 0, 0, 0xe0, 0xfe, 0xf2, 0xe0, 0xfe, 0xf2]),
        Err(Error::OptionNumberOverflow)
    );
}

#[test]
fn empty_ack_and_rst() {
    let ack = empty(MessageType::Acknowledgement, 7);
    let m = Message::parse(&ack).unwrap();
    assert_eq!(
        (m.mtype, m.code, m.message_id),
        (MessageType::Acknowledgement, Code::EMPTY, 7)
    );
    let rst = empty(MessageType::Reset, 8);
    assert_eq!(Message::parse(&rst).unwrap().mtype, MessageType::Reset);
}

#[test]
fn builder_enforces_order_and_room() {
    let mut buf = [0u8; 8];
    let mut b = MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, 1, &[]).unwrap();
    b.option(option::URI_PATH, b"a").unwrap();
    assert_eq!(b.option(option::ETAG, b"a").err(), Some(Error::OptionOrder));
    assert_eq!(
        b.option(option::URI_PATH, b"abcdef").err(),
        Some(Error::BufferTooSmall)
    );
    let mut small = [0u8; 3];
    assert!(MessageBuilder::new(&mut small, MessageType::Confirmable, Code::GET, 1, &[]).is_err());
    let mut buf2 = [0u8; 16];
    assert!(
        MessageBuilder::new(&mut buf2, MessageType::Confirmable, Code::GET, 1, &[0; 9]).is_err()
    );
}

#[test]
fn unknown_critical_options_are_reported() {
    let mut buf = [0u8; 32];
    let mut b = MessageBuilder::new(&mut buf, MessageType::Confirmable, Code::GET, 1, &[]).unwrap();
    b.option(option::URI_PATH, b"a").unwrap();
    b.option(2049, b"x").unwrap();
    let n = b.finish();
    assert_eq!(
        Message::parse(&buf[..n]).unwrap().unknown_critical_option(),
        Some(2049)
    );
}

#[test]
fn code_display() {
    assert_eq!(Code::FORBIDDEN.to_string(), "4.03");
    assert_eq!(Code::CONTENT.to_string(), "2.05");
    assert!(Code::GET.is_request());
    assert!(Code::CHANGED.is_success());
}
