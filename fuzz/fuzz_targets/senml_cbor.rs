#![no_main]
//! SenML-CBOR: parse, iterate and resolve any bytes; generic CBOR skipping never overflows.
use libfuzzer_sys::fuzz_target;
use sigil_objects::senml;

fuzz_target!(|data: &[u8]| {
    let _ = sigil_objects::cbor::Decoder::new(data).skip();
    if let Ok(pack) = senml::Pack::parse_cbor(data) {
        assert_eq!(pack.records().count(), pack.len());
        let _ = senml::resolve(pack.records());
    }
});
