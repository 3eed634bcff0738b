#![no_main]
//! CoRE Link Format: parse any text; every attribute of a parsed document is reachable.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(links) = sigil_coap::link::parse(text) {
        for l in links {
            let l = l.expect("validated document yields only links");
            for a in l.attrs() {
                let _ = (a.name, a.value);
            }
            let _ = l.attr("key");
            let _ = l.has_value("rt", "x");
        }
    }
});
