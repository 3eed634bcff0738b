#![no_main]
//! sigil-identity's text formats: the key announcement read from any link's attributes (and,
//! when accepted, emitted and read back to the same value), and the identity list (every
//! refusal names a line of the input).
use libfuzzer_sys::fuzz_target;
use sigil_identity::KeyAnnouncement;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(links) = sigil_coap::link::parse(text) {
        for l in links.flatten() {
            if let Ok(Some(a)) = KeyAnnouncement::parse(l.attrs().map(|a| (a.name, a.value))) {
                let group: Vec<_> = a.group().collect();
                let mut out = String::new();
                a.emit(&mut out, &group).expect("String never refuses");
                let again: Vec<(&str, Option<&str>)> = out
                    .split(';')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (n, v) = p.split_once('=').expect("name=value");
                        (n, Some(v.trim_matches('"')))
                    })
                    .collect();
                let b = KeyAnnouncement::parse(again).expect("emitted text parses").unwrap();
                assert_eq!(b.key(), a.key());
                assert_eq!(b.other_info(), a.other_info());
                assert_eq!(b.group().collect::<Vec<_>>(), group);
            }
        }
    }
    let lines = text.lines().count();
    for e in sigil_identity::list::entries(text) {
        match e {
            Ok(entry) => assert!(entry.line >= 1 && entry.line <= lines),
            Err(err) => assert!(err.line() >= 1 && err.line() <= lines),
        }
    }
});
