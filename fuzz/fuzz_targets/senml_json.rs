#![no_main]
//! SenML-JSON: decode and resolve any bytes; decoded packs re-encode and decode again.
use libfuzzer_sys::fuzz_target;
use sigil_objects::senml;

fuzz_target!(|data: &[u8]| {
    if let Ok(recs) = senml::parse_json(data) {
        let records: Vec<_> = recs.iter().map(|r| r.as_record()).collect();
        let _ = senml::resolve(records.iter().copied());
        let mut buf = vec![0u8; data.len() * 4 + 64];
        if let Ok(n) = senml::encode_json(&records, &mut buf) {
            senml::parse_json(&buf[..n]).expect("our own SenML-JSON parses");
        }
    }
});
