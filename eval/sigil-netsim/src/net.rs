//! The emulated network: a device and a server joined by a path of 802.15.4 hops, in virtual
//! time. Datagrams go in as bytes, are cut into real 6LoWPAN frames, cross each hop (loss,
//! link-layer retries, the latency model, one frame at a time per hop and direction), and come
//! out reassembled at the other end, or not at all.
//!
//! Multi-hop paths are mesh-under: forwarders pass frames on without reassembling them. The
//! device may sleep: with its radio off, frames that reach it are lost (and counted); with
//! low-power listening it checks the channel periodically and a frame for it waits for the
//! next check (decided when the frame is scheduled). The
//! device's radio time, listening time, sleep time and CPU cycles are kept as an
//! [`Activity`]; the server side is mains-powered and only its traffic is counted.

use crate::channel::{air_us, Channel, Latency, Loss, SplitMix};
use crate::energy::Activity;
use crate::lowpan::{self, Datagram, Path, Reassembler};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The two ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum End {
    Device,
    Server,
}

impl End {
    pub fn addr(self) -> u16 {
        match self {
            End::Device => 0x0001,
            End::Server => 0x0002,
        }
    }
    pub fn peer(self) -> End {
        match self {
            End::Device => End::Server,
            End::Server => End::Device,
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// The path between device and server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    pub hops: u8,
    /// Per-frame loss on every hop, each direction its own process.
    pub loss: Loss,
    pub latency: Latency,
    /// 802.15.4 retransmissions after a lost frame (macMaxFrameRetries; 0 = none, as in the
    /// two-way-authentication paper's loss experiments; the standard's default is 3).
    pub mac_retries: u8,
    /// Device CPU clock, for turning metered cycles into busy time.
    pub device_hz: f64,
    /// Low-power listening while the device sleeps: every `device_wake_interval_us` it turns
    /// its radio on for `device_check_us` to sample the channel, and a frame for it is sent
    /// (strobed, ContikiMAC style) until its next check. 0: the radio is off while it sleeps
    /// and frames for it are lost.
    pub device_wake_interval_us: u64,
    pub device_check_us: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            hops: 1,
            loss: Loss::None,
            latency: Latency::default(),
            mac_retries: 0,
            device_hz: 48e6,
            device_wake_interval_us: 0,
            device_check_us: 0,
        }
    }
}

/// What the network did, both directions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    pub datagrams_sent: u64,
    pub datagrams_delivered: u64,
    /// Frames handed to the first hop (link-layer retries not counted again).
    pub frames_sent: u64,
    /// Transmissions on any hop, retries and forwarding included.
    pub transmissions: u64,
    pub frames_lost: u64,
    /// Frames that reached a sleeping device.
    pub frames_to_sleeping: u64,
    /// Frame bytes (MAC header and FCS included) handed to the first hop.
    pub frame_bytes: u64,
    /// UDP payload bytes handed to the network, both directions.
    pub udp_bytes: u64,
    /// Of which the device sent.
    pub udp_bytes_from_device: u64,
    /// Datagrams refused by a reassembler (bad fragment, busy, checksum...).
    pub refused: u64,
}

struct Node {
    reassembler: Reassembler,
    /// The device's radio is on (the server's always is).
    awake: bool,
    awake_since: u64,
    awake_total: u64,
    cpu_free_at: u64,
    cpu_us_total: u64,
    activity: Activity,
}

impl Node {
    fn new() -> Self {
        Self {
            reassembler: Reassembler::default(),
            awake: true,
            awake_since: 0,
            awake_total: 0,
            cpu_free_at: 0,
            cpu_us_total: 0,
            activity: Activity::default(),
        }
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Arrival {
    at: u64,
    order: u64,
    to: End,
    frame: Vec<u8>,
}

pub struct Emulator {
    now: u64,
    config: LinkConfig,
    rng: SplitMix,
    /// Per hop: [towards the server, towards the device].
    channels: Vec<[Channel; 2]>,
    busy_until: Vec<[u64; 2]>,
    arrivals: BinaryHeap<Reverse<Arrival>>,
    nodes: [Node; 2],
    order: u64,
    tag: u16,
    mac_seq: u8,
    pub stats: NetStats,
}

impl Emulator {
    pub fn new(config: LinkConfig, seed: u64) -> Self {
        let hops = usize::from(config.hops.max(1));
        Self {
            now: 0,
            config,
            rng: SplitMix(seed),
            channels: (0..hops)
                .map(|_| {
                    let slot = config.latency.per_frame_us;
                    [
                        Channel::new(config.loss, slot),
                        Channel::new(config.loss, slot),
                    ]
                })
                .collect(),
            busy_until: vec![[0, 0]; hops],
            arrivals: BinaryHeap::new(),
            nodes: [Node::new(), Node::new()],
            order: 0,
            tag: 0,
            mac_seq: 0,
            stats: NetStats::default(),
        }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Virtual time, microseconds.
    pub fn now_us(&self) -> u64 {
        self.now
    }

    pub fn now_ms(&self) -> u64 {
        self.now / 1000
    }

    /// Virtual time as the cores take it.
    pub fn instant(&self) -> sigil_time::Instant {
        sigil_time::Instant::from_millis(self.now_ms())
    }

    /// When the next frame arrives anywhere.
    pub fn next_arrival_us(&self) -> Option<u64> {
        self.arrivals.peek().map(|Reverse(a)| a.at)
    }

    /// When `end`'s CPU is free again (it is busy with operations charged by [`Self::compute`]).
    pub fn cpu_free_at_us(&self, end: End) -> u64 {
        self.nodes[end.index()].cpu_free_at.max(self.now)
    }

    /// Charges `cycles` of CPU work to the device at the current time: what it sends next
    /// waits until the work is done. (The server's CPU is taken as free.)
    pub fn compute(&mut self, end: End, cycles: u64) {
        if end != End::Device || cycles == 0 {
            return;
        }
        let us = (cycles as f64 / self.config.device_hz * 1e6).round() as u64;
        let n = &mut self.nodes[end.index()];
        n.cpu_free_at = n.cpu_free_at.max(self.now) + us;
        n.cpu_us_total += us;
        n.activity.cpu_cycles += cycles;
    }

    /// The device turns its radio on.
    pub fn wake(&mut self) {
        let now = self.now;
        let n = &mut self.nodes[End::Device.index()];
        if !n.awake {
            n.awake = true;
            n.awake_since = now;
        }
    }

    /// The device turns its radio off (frames that reach it now are lost).
    pub fn sleep(&mut self) {
        let now = self.now.max(self.nodes[0].cpu_free_at);
        let n = &mut self.nodes[End::Device.index()];
        if n.awake {
            n.awake = false;
            n.awake_total += now - n.awake_since;
        }
    }

    pub fn is_awake(&self) -> bool {
        self.nodes[End::Device.index()].awake
    }

    /// Sends a UDP datagram from `from` to the other end. Returns the frames it took.
    pub fn send(&mut self, from: End, payload: &[u8]) -> usize {
        let d = Datagram {
            src: from.addr(),
            dst: from.peer().addr(),
            src_port: 5684,
            dst_port: 5684,
            payload: payload.to_vec(),
        };
        self.tag = self.tag.wrapping_add(1);
        let path = Path {
            hops: self.config.hops,
        };
        let Ok(parts) = lowpan::fragment(&d, path, self.tag) else {
            self.stats.refused += 1;
            return 0;
        };
        self.stats.datagrams_sent += 1;
        self.stats.udp_bytes += payload.len() as u64;
        if from == End::Device {
            self.stats.udp_bytes_from_device += payload.len() as u64;
        }
        let start = self.cpu_free_at_us(from);
        for p in &parts {
            self.transmit(from, start, p);
        }
        parts.len()
    }

    fn transmit(&mut self, from: End, start: u64, lowpan_payload: &[u8]) {
        let hops = self.channels.len();
        let dir = from.index();
        self.mac_seq = self.mac_seq.wrapping_add(1);
        // The frame as the first hop carries it (the last hop's differs only in its MAC
        // addresses and hops-left, which do not change its length).
        let first = lowpan::frame(self.mac_seq, from.addr(), 0x0100, lowpan_payload);
        let len = first.len();
        self.stats.frames_sent += 1;
        self.stats.frame_bytes += len as u64;
        let mut t = start;
        let order: Vec<usize> = if from == End::Device {
            (0..hops).collect()
        } else {
            (0..hops).rev().collect()
        };
        let lpl = self.config.device_wake_interval_us;
        for (i, &h) in order.iter().enumerate() {
            let mut delivered = false;
            for _attempt in 0..=self.config.mac_retries {
                let mut begin = t.max(self.busy_until[h][dir]);
                if from == End::Server && i + 1 == hops && lpl > 0 && !self.nodes[0].awake {
                    // The sender strobes until the sleeping device's next channel check.
                    begin = begin.div_ceil(lpl) * lpl;
                }
                let end = begin + self.config.latency.frame_us(len);
                self.busy_until[h][dir] = end;
                self.stats.transmissions += 1;
                if i == 0 && from == End::Device {
                    let a = &mut self.nodes[0].activity;
                    a.tx_us += air_us(len);
                    a.frames_tx += 1;
                    a.bytes_tx += len as u64;
                }
                t = end;
                if !self.channels[h][dir].lose(&mut self.rng, begin) {
                    delivered = true;
                    break;
                }
            }
            if !delivered {
                self.stats.frames_lost += 1;
                return;
            }
        }
        let to = from.peer();
        let last_src = if hops > 1 {
            0x0100 + hops as u16
        } else {
            from.addr()
        };
        let mut body = lowpan_payload.to_vec();
        if hops > 1 {
            body[0] = (body[0] & 0xf0) | 1; // hops left at the last hop
        }
        let frame = lowpan::frame(self.mac_seq, last_src, to.addr(), &body);
        self.order += 1;
        self.arrivals.push(Reverse(Arrival {
            at: t,
            order: self.order,
            to,
            frame,
        }));
    }

    /// Moves time to `t_us` (never backwards) and returns the datagrams that arrived by then,
    /// in arrival order.
    pub fn advance(&mut self, t_us: u64) -> Vec<(End, Vec<u8>)> {
        let mut out = vec![];
        while let Some(Reverse(a)) = self.arrivals.peek() {
            if a.at > t_us {
                break;
            }
            let Reverse(a) = self.arrivals.pop().expect("peeked");
            self.now = self.now.max(a.at);
            if let Some(d) = self.receive(a.to, &a.frame) {
                out.push((a.to, d));
            }
        }
        self.now = self.now.max(t_us);
        out
    }

    fn receive(&mut self, to: End, frame: &[u8]) -> Option<Vec<u8>> {
        let now_ms = self.now / 1000;
        let node = &mut self.nodes[to.index()];
        if to == End::Device {
            if !node.awake && self.config.device_wake_interval_us == 0 {
                self.stats.frames_to_sleeping += 1;
                return None;
            }
            node.activity.rx_us += air_us(frame.len());
            node.activity.frames_rx += 1;
            node.activity.bytes_rx += frame.len() as u64;
        }
        let Ok(v) = lowpan::parse_frame(frame) else {
            self.stats.refused += 1;
            return None;
        };
        let src = v.mesh.map_or(v.mac_src, |(origin, _, _)| origin);
        match node.reassembler.push(now_ms, src, to.addr(), v.lowpan) {
            Ok(Some(d)) => {
                self.stats.datagrams_delivered += 1;
                Some(d.payload)
            }
            Ok(None) => None,
            Err(_) => {
                self.stats.refused += 1;
                None
            }
        }
    }

    /// The device's activity up to now: radio time, CPU, and listening and sleeping time
    /// (listening = radio on and idle; the radio is off while the CPU computes).
    pub fn device_activity(&self) -> Activity {
        let n = &self.nodes[End::Device.index()];
        let mut a = n.activity;
        let end = self.now.max(n.cpu_free_at);
        let awake = n.awake_total + if n.awake { end - n.awake_since } else { 0 };
        a.listen_us = awake.saturating_sub(a.tx_us + a.rx_us + n.cpu_us_total);
        a.sleep_us = end.saturating_sub(awake);
        // Channel checks while asleep are listening time.
        if let Some(checks) = a.sleep_us.checked_div(self.config.device_wake_interval_us) {
            let on = (checks * self.config.device_check_us).min(a.sleep_us);
            a.listen_us += on;
            a.sleep_us -= on;
        }
        a
    }

    /// Reassembly refusals at each end, by reason.
    pub fn reassembly(&self, end: End) -> &lowpan::ReassemblyStats {
        &self.nodes[end.index()].reassembler.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(config: LinkConfig, seed: u64, sizes: &[usize]) -> (NetStats, Vec<(End, Vec<u8>)>, u64) {
        let mut e = Emulator::new(config, seed);
        for (i, &n) in sizes.iter().enumerate() {
            let from = if i % 2 == 0 { End::Device } else { End::Server };
            e.send(from, &vec![i as u8; n]);
        }
        let got = e.advance(u64::MAX / 2);
        let t = e.arrivals.len() as u64;
        (e.stats.clone(), got, t)
    }

    #[test]
    fn a_clean_link_delivers_everything_with_the_expected_frames_and_time() {
        let c = LinkConfig::default();
        let (s, got, _) = run(c, 1, &[50, 300, 1000]);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (End::Server, vec![0u8; 50]));
        let frames: usize = [50, 300, 1000]
            .iter()
            .map(|&n| lowpan::frames_for(n, Path { hops: 1 }))
            .sum();
        assert_eq!(s.frames_sent as usize, frames);
        assert_eq!(s.frames_lost, 0);
        // One 50-byte datagram: one frame of 11 + 9 + 50 = 70 bytes, a + 70 b.
        let mut e = Emulator::new(c, 1);
        e.send(End::Device, &[0; 50]);
        assert_eq!(e.next_arrival_us(), Some(27_368 + 70 * 72));
    }

    #[test]
    fn multi_hop_paths_take_longer_and_lose_more() {
        let one = LinkConfig::default();
        let four = LinkConfig { hops: 4, ..one };
        let mut a = Emulator::new(one, 1);
        let mut b = Emulator::new(four, 1);
        a.send(End::Device, &[0; 40]);
        b.send(End::Device, &[0; 40]);
        let ta = a.next_arrival_us().unwrap();
        let tb = b.next_arrival_us().unwrap();
        assert!(tb > 4 * ta - 4 * 5 * 72, "{ta} {tb}");
        assert_eq!(b.advance(u64::MAX / 2).len(), 1);
        // With 10% per hop, about 1 - 0.9^4 = 34% of single-frame datagrams are lost.
        let lossy = LinkConfig {
            loss: Loss::Bernoulli { p: 0.1 },
            ..four
        };
        let (s, got, _) = run(lossy, 7, &vec![40; 4000]);
        let rate = 1.0 - got.len() as f64 / 4000.0;
        assert!((rate - (1.0 - 0.9f64.powi(4))).abs() < 0.03, "{rate}");
        assert_eq!(s.datagrams_delivered as usize, got.len());
    }

    #[test]
    fn link_layer_retries_recover_frames() {
        let c = LinkConfig {
            loss: Loss::Bernoulli { p: 0.2 },
            mac_retries: 3,
            ..Default::default()
        };
        let (s, got, _) = run(c, 3, &vec![40; 2000]);
        let rate = 1.0 - got.len() as f64 / 2000.0;
        assert!((rate - 0.2f64.powi(4)).abs() < 0.01, "{rate}");
        assert!(s.transmissions > s.frames_sent);
    }

    #[test]
    fn a_fragment_lost_loses_the_datagram_and_the_run_is_deterministic() {
        let c = LinkConfig {
            loss: Loss::Bernoulli { p: 0.05 },
            ..Default::default()
        };
        let sizes = vec![600; 500];
        let (s1, g1, _) = run(c, 11, &sizes);
        let (s2, g2, _) = run(c, 11, &sizes);
        assert_eq!(s1, s2);
        assert_eq!(g1, g2);
        let frames = lowpan::frames_for(600, Path { hops: 1 }) as i32;
        let expect = 0.95f64.powi(frames);
        let got = g1.len() as f64 / 500.0;
        assert!((got - expect).abs() < 0.06, "{got} vs {expect}");
    }

    #[test]
    fn a_duty_cycled_device_gets_frames_at_its_next_check_and_pays_for_its_checks() {
        let c = LinkConfig {
            device_wake_interval_us: 125_000,
            device_check_us: 1_250,
            ..Default::default()
        };
        let mut e = Emulator::new(c, 1);
        e.sleep();
        e.advance(1_000_000 + 10_000);
        e.send(End::Server, &[3; 20]);
        // The next check after 1.01 s is at 1.125 s; the frame follows it.
        assert_eq!(
            e.next_arrival_us(),
            Some(1_125_000 + c.latency.frame_us(40))
        );
        assert_eq!(e.advance(2_000_000).len(), 1);
        assert_eq!(e.stats.frames_to_sleeping, 0);
        // An hour asleep: 1 % of it listening.
        let mut idle = Emulator::new(c, 1);
        idle.sleep();
        idle.advance(3_600_000_000);
        let a = idle.device_activity();
        assert_eq!(a.listen_us, 3_600_000_000 / 125_000 * 1_250);
        assert_eq!(a.listen_us + a.sleep_us, 3_600_000_000);
    }

    #[test]
    fn a_sleeping_device_misses_frames_and_accounts_its_time() {
        let mut e = Emulator::new(LinkConfig::default(), 1);
        e.sleep();
        e.send(End::Server, &[1; 20]);
        assert!(e.advance(1_000_000).is_empty());
        assert_eq!(e.stats.frames_to_sleeping, 1);
        e.wake();
        e.send(End::Server, &[2; 20]);
        assert_eq!(e.advance(2_000_000).len(), 1);
        e.compute(End::Device, 48_000); // 1 ms at 48 MHz
        let a = e.device_activity();
        assert_eq!(a.sleep_us, 1_000_000);
        assert_eq!(a.rx_us, air_us(11 + 9 + 20));
        assert_eq!(a.cpu_cycles, 48_000);
        assert_eq!(a.listen_us, 1_000_000 + 1_000 - a.rx_us - 1_000);
    }
}
