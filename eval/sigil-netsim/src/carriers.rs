//! The DTLS handshake over its second carrier, DTLS as a CoAP resource (`sigil-dtls-coap`):
//! each flight is the payload of a Confirmable request or of its piggybacked response,
//! Block1 and Block2 (RFC 7959) cut large flights, and only the client retransmits (RFC 7252
//! §4.2, one request outstanding: NSTART = 1). [`crate::dtls::handshake`] runs the record
//! carrier (`sigil_dtls::Connection`: DTLS fragments, a flight timer at each end); this runs
//! `sigil_dtls_coap::Client` against `sigil_dtls_coap::Endpoint` on the same emulated path,
//! with the same seeds, credentials, 6LoWPAN framing, latency model and device cycle costs,
//! so the two are compared on equal terms.

use crate::dtls::{ms, Chains, Handshake, SimTrust, Suite};
use crate::energy::{CycleTable, Metered};
use crate::net::{Emulator, End, LinkConfig};
use crate::SeededRng;
use sigil_coap::{Code, Message, MessageType, TransmissionParameters};
use sigil_crypto::RustCrypto;
use sigil_dtls::Config;
use sigil_dtls_coap::{CarrierConfig, Client, Endpoint, EndpointConfig, MAX_DATAGRAM};

/// The endpoint's view of the device's address (the record carrier's cookie is bound to the
/// same bytes).
const DEVICE_ADDRESS: &[u8] = b"device";

/// Sessions the emulated endpoint can hold: one handshake at a time, and a spare.
const SESSIONS: usize = 2;

/// The two ways a DTLS handshake crosses the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Carrier {
    /// `sigil_dtls::Connection`: flights as DTLS records cut to the path MTU, each end
    /// retransmitting its whole last flight on a timer (RFC 6347 §4.2.4).
    Records,
    /// `sigil_dtls_coap`: flights as CoAP payloads, Block1/Block2, the client's Confirmable
    /// retransmission.
    Coap,
}

impl Carrier {
    pub const BOTH: [Carrier; 2] = [Carrier::Records, Carrier::Coap];

    pub fn name(self) -> &'static str {
        match self {
            Carrier::Records => "DTLS records",
            Carrier::Coap => "CoAP resource",
        }
    }
}

/// How the CoAP carrier is set up on both ends.
#[derive(Clone, Copy, Debug)]
pub struct CoapCarrier {
    /// Block size exponent (RFC 7959 §2.2: 2^(szx+4) bytes) of the client's Block1 requests,
    /// the Block2 blocks it asks for and the endpoint's responses.
    pub block_szx: u8,
    /// ACK_TIMEOUT, ACK_RANDOM_FACTOR, MAX_RETRANSMIT (RFC 7252 §4.8).
    pub transmission: TransmissionParameters,
}

impl CoapCarrier {
    /// RFC 7252's transmission parameters with blocks of `block_bytes` (16..=1024, a power
    /// of two; other values round down to one).
    pub fn with_block(block_bytes: usize) -> Self {
        let szx = (usize::BITS - 1 - block_bytes.clamp(16, 1024).leading_zeros()) as u8 - 4;
        Self {
            block_szx: szx,
            transmission: TransmissionParameters::default(),
        }
    }

    pub fn block_bytes(&self) -> usize {
        1 << (self.block_szx + 4)
    }
}

/// What the CoAP layer put on the air during one handshake, both directions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoapTally {
    /// Requests the client sent, by method, retransmissions included.
    pub put: u32,
    pub post: u32,
    pub get: u32,
    /// Of those, sent again after ACK_TIMEOUT (RFC 7252 §4.2).
    pub retransmissions: u32,
    /// Responses the endpoint sent (answers from its cache to retransmitted requests
    /// included), of which 2.31 Continue (one per Block1 block before the last).
    pub responses: u32,
    pub continues: u32,
    /// Bytes of CoAP header, token and options in every datagram (the rest of each is the
    /// DTLS records of a flight).
    pub header_bytes: u64,
}

impl CoapTally {
    fn request(&mut self, datagram: &[u8]) {
        let Ok(m) = Message::parse(datagram) else {
            return;
        };
        match m.code {
            Code::PUT => self.put += 1,
            Code::POST => self.post += 1,
            Code::GET => self.get += 1,
            _ => {}
        }
        self.header_bytes += (datagram.len() - m.payload.len()) as u64;
    }

    fn response(&mut self, datagram: &[u8]) {
        let Ok(m) = Message::parse(datagram) else {
            return;
        };
        if m.mtype == MessageType::Acknowledgement {
            self.responses += 1;
        }
        if m.code == Code::CONTINUE {
            self.continues += 1;
        }
        self.header_bytes += (datagram.len() - m.payload.len()) as u64;
    }

    /// Requests sent, retransmissions included: the exchanges the handshake took.
    pub fn requests(&self) -> u32 {
        self.put + self.post + self.get
    }
}

/// Runs one handshake of `suite` over the CoAP carrier on `link`, the device (client) priced
/// on `table`. The run ends when the client is established, gives up (MAX_RETRANSMIT) or
/// `deadline_ms` of virtual time passed.
pub fn handshake_over_coap(
    link: LinkConfig,
    table: CycleTable,
    suite: Suite,
    carrier: CoapCarrier,
    deadline_ms: u64,
    seed: u64,
) -> Result<(Handshake, CoapTally), sigil_dtls_coap::Error> {
    let chains = Chains::new();
    let offer = suite.server_offer(&chains);
    let mut server: Endpoint<'_, RustCrypto, SimTrust, SESSIONS> = Endpoint::new(
        RustCrypto,
        SimTrust(None),
        offer,
        EndpointConfig {
            dtls: Config::default(),
            block_szx: carrier.block_szx,
            ..EndpointConfig::default()
        },
        [seed as u8; 32],
    );
    let meter = Metered::new(table);
    let mut emu = Emulator::new(link, seed);
    let mut client_rng = SeededRng(seed ^ 0xc1);
    let mut server_rng = SeededRng(seed ^ 0x5e);
    let mut client = Client::connect(
        meter.clone(),
        SimTrust(Some(meter.clone())),
        CarrierConfig {
            dtls: Config::default(),
            coap: carrier.transmission,
            block_szx: carrier.block_szx,
        },
        &mut client_rng,
        suite.client_credentials(&chains),
        ms(0),
    )?;
    emu.compute(End::Device, meter.cycles());
    let mut charged = meter.cycles();
    let mut tally = CoapTally::default();
    let mut datagram = [0u8; MAX_DATAGRAM];
    let mut response = [0u8; MAX_DATAGRAM];
    // The client arms a request's timer when the request leaves, once the device's
    // computation of its flight is done: when the outstanding request first left, and the
    // longest wait from sending a request to its response.
    let mut armed_at: Option<u64> = None;
    let mut longest_ms = 0;
    let mut done_at = None;
    loop {
        let leaves_us = emu.cpu_free_at_us(End::Device);
        let leaves = sigil_time::Instant::from_millis(leaves_us / 1000);
        while let Some(n) = client.poll_transmit(leaves, &mut datagram) {
            tally.request(&datagram[..n]);
            armed_at.get_or_insert(leaves_us);
            emu.send(End::Device, &datagram[..n]);
        }
        if client.is_established() {
            done_at = Some(emu.cpu_free_at_us(End::Device));
            break;
        }
        if client.failure().is_some() || emu.now_ms() > deadline_ms {
            break;
        }
        let next = [
            emu.next_arrival_us(),
            client.poll_timeout().map(|t| t.as_millis() * 1000),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { break };
        let arrived = emu.advance(next.max(emu.now_us()));
        let now = emu.instant();
        let _ = client.handle_timeout(now);
        for (to, d) in arrived {
            match to {
                End::Device => {
                    if let Some(t) = armed_at.take() {
                        longest_ms = longest_ms.max(emu.now_us().saturating_sub(t) / 1000);
                    }
                    let _ = client.handle_datagram(now, &d, &mut client_rng);
                }
                End::Server => {
                    if let Some(n) = server.handle_datagram(
                        now,
                        DEVICE_ADDRESS,
                        &d,
                        &mut server_rng,
                        &mut response,
                    ) {
                        tally.response(&response[..n]);
                        emu.send(End::Server, &response[..n]);
                    }
                }
            }
        }
        emu.compute(End::Device, meter.cycles() - charged);
        charged = meter.cycles();
    }
    tally.retransmissions = client.retransmissions();
    let completed = done_at.is_some() && server.counters().established == 1;
    let handshake = Handshake {
        completed,
        time_ms: done_at.unwrap_or(emu.now_us()) as f64 / 1000.0,
        device: emu.device_activity(),
        device_ops: meter.ops(),
        net: emu.stats.clone(),
        // The client's: from sending a request (arming its timer) to the response. The
        // endpoint has no timer: it only answers.
        longest_wait_ms: [longest_ms, 0],
    };
    Ok((handshake, tally))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_map_to_their_exponents() {
        for (bytes, szx) in [(16, 0), (64, 2), (100, 2), (128, 3), (1024, 6), (4096, 6)] {
            assert_eq!(CoapCarrier::with_block(bytes).block_szx, szx, "{bytes}");
        }
        assert_eq!(CoapCarrier::with_block(256).block_bytes(), 256);
    }
}
