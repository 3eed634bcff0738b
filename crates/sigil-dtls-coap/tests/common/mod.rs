//! An in-memory link between one carrier client and an endpoint, in virtual time, with a
//! hook that decides each datagram's fate (deliver, lose, duplicate, hold for later).
#![allow(dead_code)]

use sigil_coap::Message;
use sigil_crypto::RustCrypto;
use sigil_dtls::Trust;
use sigil_dtls_coap::{Client, Endpoint, MAX_DATAGRAM};
use sigil_testkit::Counter;
use sigil_time::Instant;
use std::collections::VecDeque;

pub fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    Server,
    Client,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Deliver,
    Lose,
    /// Delivered twice.
    Duplicate,
    /// Delivered after the next datagram in the same direction (reordered).
    Hold,
}

pub struct Sent {
    pub to: To,
    pub bytes: Vec<u8>,
    pub fate: Fate,
}

impl Sent {
    pub fn message(&self) -> Message<'_> {
        Message::parse(&self.bytes).unwrap()
    }
}

/// Decides each datagram's fate from its index in the log, direction and bytes.
type FateFn<'h> = Box<dyn FnMut(usize, To, &[u8]) -> Fate + 'h>;

pub struct Link<'h> {
    pub now: Instant,
    pub peer: Vec<u8>,
    pub log: Vec<Sent>,
    fate: FateFn<'h>,
    rng: Counter,
    held: Vec<(To, Vec<u8>)>,
}

impl<'h> Link<'h> {
    pub fn new(peer: &[u8]) -> Self {
        Self::with(peer, |_, _, _| Fate::Deliver)
    }

    pub fn with(peer: &[u8], fate: impl FnMut(usize, To, &[u8]) -> Fate + 'h) -> Self {
        Self {
            now: at(0),
            peer: peer.to_vec(),
            log: Vec::new(),
            fate: Box::new(fate),
            rng: Counter::new(77, 13),
            held: Vec::new(),
        }
    }

    fn route(&mut self, to: To, d: Vec<u8>, out: &mut VecDeque<(To, Vec<u8>)>) {
        let fate = (self.fate)(self.log.len(), to, &d);
        self.log.push(Sent {
            to,
            bytes: d.clone(),
            fate,
        });
        // What was held goes after this one.
        let held: Vec<_> = self
            .held
            .iter()
            .filter(|(t, _)| *t == to)
            .cloned()
            .collect();
        self.held.retain(|(t, _)| *t != to);
        match fate {
            Fate::Deliver => out.push_back((to, d)),
            Fate::Lose => {}
            Fate::Duplicate => {
                out.push_back((to, d.clone()));
                out.push_back((to, d));
            }
            Fate::Hold => self.held.push((to, d)),
        }
        out.extend(held);
    }

    /// Runs until the client is established or failed, or `limit_ms` of virtual time passed.
    pub fn run<C: Trust, S: Trust + Clone, const N: usize>(
        &mut self,
        client: &mut Client<RustCrypto, C>,
        server: &mut Endpoint<'_, RustCrypto, S, N>,
        limit_ms: u64,
    ) -> bool {
        let mut buf = [0u8; MAX_DATAGRAM];
        let mut wire = VecDeque::new();
        loop {
            while let Some(n) = client.poll_transmit(self.now, &mut buf) {
                self.route(To::Server, buf[..n].to_vec(), &mut wire);
            }
            if let Some((to, d)) = wire.pop_front() {
                match to {
                    To::Server => {
                        if let Some(n) = server.handle_datagram(
                            self.now,
                            &self.peer,
                            &d,
                            &mut self.rng,
                            &mut buf,
                        ) {
                            self.route(To::Client, buf[..n].to_vec(), &mut wire);
                        }
                    }
                    To::Client => {
                        let _ = client.handle_datagram(self.now, &d, &mut self.rng);
                    }
                }
                continue;
            }
            if client.is_established() || client.failure().is_some() {
                // Anything held back is delivered late.
                for (to, d) in std::mem::take(&mut self.held) {
                    match to {
                        To::Server => {
                            let _ = server.handle_datagram(
                                self.now,
                                &self.peer,
                                &d,
                                &mut self.rng,
                                &mut buf,
                            );
                        }
                        To::Client => {
                            let _ = client.handle_datagram(self.now, &d, &mut self.rng);
                        }
                    }
                }
                return client.is_established();
            }
            let Some(t) = client.poll_timeout() else {
                return false;
            };
            if t.as_millis() > limit_ms {
                return false;
            }
            self.now = self.now.max(t);
            let _ = client.handle_timeout(self.now);
        }
    }

    /// The requests the client sent (in order), as (method code, Block1 present, Block2 present).
    pub fn requests(&self) -> Vec<&Sent> {
        self.log.iter().filter(|s| s.to == To::Server).collect()
    }
}
