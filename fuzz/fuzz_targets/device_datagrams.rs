#![no_main]
//! The device's inbound path: whatever a server or an attacker sends, in any order and with
//! timers firing in between, the device neither panics nor returns an error, and keeps its
//! queues bounded.
use libfuzzer_sys::fuzz_target;
use sigil_coap::{message::option, Code, Message, MessageBuilder, MessageType};
use sigil_crypto::{CryptoError, Rng, RustCrypto};
use sigil_device::{Device, DeviceConfig, MemoryStorage};
use sigil_objects::senml::{Record, Value};

struct Fixed;
impl Rng for Fixed {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        buf.fill(7);
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let mut st = MemoryStorage::default();
    let mut d = Device::boot(
        RustCrypto,
        DeviceConfig {
            block_szx: 0,
            ..Default::default()
        },
        &mut st,
        &mut Fixed,
        &[],
        &[],
    )
    .unwrap();
    let mut buf = [0u8; 1024];
    let mut now = sigil_time::Instant::ZERO;
    d.handle_timeout(now, &mut st).unwrap();
    let mut last: Option<(u16, Vec<u8>)> = None;
    for (i, part) in data.split(|b| *b == 0xa5).take(16).enumerate() {
        while let Some(n) = d.poll_transmit(&mut buf) {
            if let Ok(m) = Message::parse(&buf[..n]) {
                last = Some((m.message_id, m.token.to_vec()));
            }
        }
        // Every other input is made into a plausible answer to what the device sent last, so
        // the fuzzer reaches the registered state and the publish path.
        if i % 2 == 1 {
            if let Some((mid, token)) = &last {
                let mut out = [0u8; 256];
                let code = Code(part.first().copied().unwrap_or(0x41));
                let mut b =
                    MessageBuilder::new(&mut out, MessageType::Acknowledgement, code, *mid, token)
                        .unwrap();
                b.option(option::LOCATION_PATH, b"rd").unwrap();
                b.option(
                    option::LOCATION_PATH,
                    &part[part.len().min(1)..part.len().min(6)],
                )
                .unwrap();
                let n = b.finish();
                d.handle_datagram(now, &mut st, &out[..n]).unwrap();
            }
        } else {
            d.handle_datagram(now, &mut st, part).unwrap();
        }
        now += core::time::Duration::from_millis(u64::from(part.len() as u32) * 500);
        d.handle_timeout(now, &mut st).unwrap();
        if d.can_publish() {
            let r = [Record {
                name: Some("t"),
                value: Some(Value::Number(1.0)),
                ..Default::default()
            }];
            d.publish(now, &mut st, &r, None).unwrap();
        }
        while d.poll_event().is_some() {}
    }
});
