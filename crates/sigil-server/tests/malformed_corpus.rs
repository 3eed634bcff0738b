//! Every file in tests/malformed goes through every parser and through the server's request
//! handling: each yields an error or a reply, never a panic.

use sigil_coap::Message;
use sigil_objects::{cose::CoseSign1, senml, ReadingFormat, SignedReading};
use sigil_server::{Reply, Request, Service, ServiceConfig};
use sigil_server::{Stats, Store};
use sigil_time::UnixTime;

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/malformed");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    assert!(v.len() >= 15, "corpus went missing");
    v
}

#[test]
fn every_parser_rejects_the_corpus_without_panicking() {
    for (name, data) in corpus() {
        let coap = Message::parse(&data);
        let link = std::str::from_utf8(&data).ok().map(sigil_coap::link::parse);
        let cbor = senml::Pack::parse_cbor(&data);
        let json = senml::parse_json(&data);
        let cose = CoseSign1::parse(&data);
        let jws = SignedReading::parse(ReadingFormat::Jws, &data);
        // Each file is named after the parser it targets; that parser must refuse it.
        let refused = match name.split('-').next().unwrap() {
            "coap" => coap.is_err(),
            "link" => link.is_some_and(|l| l.is_err()),
            "cbor" => cbor.is_err(),
            "cose" => cose.is_err(),
            "jws" => jws.is_err(),
            "senml" => {
                json.map(|r| senml::resolve(r.iter().map(|x| x.as_record())).is_err())
                    .unwrap_or(true)
                    && cbor.is_err()
            }
            other => panic!("corpus file {name} names no parser ({other})"),
        };
        assert!(refused, "{name} was accepted");
    }
}

#[test]
fn the_service_answers_every_corpus_file_as_a_publication_and_a_registration() {
    let mut svc = Service::new(
        Store::open_in_memory().unwrap(),
        ServiceConfig::default(),
        Stats::default(),
    )
    .unwrap();
    for (_, data) in corpus() {
        for (code, path, query, cf) in [
            (
                sigil_coap::Code::PUT,
                vec!["ps", "1", "m"],
                vec![],
                Some(18),
            ),
            (
                sigil_coap::Code::PUT,
                vec!["ps", "1", "m"],
                vec![],
                Some(65100),
            ),
            (
                sigil_coap::Code::POST,
                vec!["rd"],
                vec!["ep=06af05053d7deaac9aef246d4b188825"],
                Some(40),
            ),
        ] {
            let req = Request {
                message_id: Some(1),
                path: path.into_iter().map(String::from).collect(),
                query: query.into_iter().map(String::from).collect(),
                content_format: cf,
                payload: data.clone(),
                ..Request::new("127.0.0.1:1".parse().unwrap(), code)
            };
            let replies = svc.handle_batch(&[req], UnixTime::from_secs(1_700_000_000));
            assert_eq!(replies.len(), 1);
            match &replies[0] {
                Reply::Response(r) => assert!(r.code.class() == 4, "{:?}", r.code),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
