//! Observe (RFC 7641), both sides, without allocation.
//!
//! The server side is [`Observers`]: a table of observers over storage the caller sizes (an
//! array on a device, a `Vec` on a server), each entry one observation: who (`P`, the peer),
//! which host it counts against (`H`, for the per-host cap), what it observes (`R`) and the
//! token of its registration. The table decides what each notification is:
//!
//! - its sequence number: 24 bits, one more than the observer's last (§3.4, §4.4);
//! - Confirmable or not: Confirmable every [`ObserveParams::confirmable_every`] notifications
//!   and at least every [`ObserveParams::confirmable_interval`] (24 h, §4.5);
//! - none while a Confirmable one is unacknowledged (congestion control, §4.5.1: at most one
//!   in flight, so an observer that has gone, or an address that never asked, gets at most the
//!   retransmissions): the change is held, its retransmissions carry the current state, and
//!   the acknowledgement releases one notification of the state then ([`Observers::take_held`]);
//! - when to send it again (RFC 7252 §4.2 timing) and when to give up and forget the observer
//!   (§4.5: an observer that does not acknowledge is removed), or forget it on a Reset (§3.6).
//!
//! [`ObserveParams::refresh`] makes [`Observers::poll`] ask for the current state to be sent
//! again when nothing was sent to an observer for that long, so a client learns within a
//! Max-Age that its observation is still in place (§4.3.1), and an observer that has gone
//! is found by the Confirmable notifications.
//!
//! The client side is [`Ordering`], the §3.4 rule that discards a notification older than
//! one already received.

use super::Token;
use crate::reliability::{Retransmission, RetransmitDecision, TransmissionParameters};
use core::time::Duration;
use sigil_time::Instant;

/// How many of an observer's latest message IDs an ACK or a Reset may name.
const RECENT_MIDS: usize = 4;

/// Observe sequence numbers are 24 bits (§4.4: the option holds 0 to 3 bytes).
pub const SEQ_MASK: u32 = (1 << 24) - 1;
const HALF: u32 = 1 << 23;
/// §3.4: a notification received this long after the last is newer whatever its number.
pub const REORDER_WINDOW: Duration = Duration::from_secs(128);

/// §3.4: whether a notification numbered `v2` received at `t2` is newer than one numbered
/// `v1` received at `t1`.
pub fn is_newer(v1: u32, t1: Instant, v2: u32, t2: Instant) -> bool {
    let (v1, v2) = (v1 & SEQ_MASK, v2 & SEQ_MASK);
    (v1 < v2 && v2 - v1 < HALF)
        || (v1 > v2 && v1 - v2 > HALF)
        || t2.saturating_since(t1) > REORDER_WINDOW
}

/// One observation as its client sees it: which notifications to act on (§3.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ordering {
    last: Option<(u32, Instant)>,
}

impl Ordering {
    pub const fn new() -> Self {
        Self { last: None }
    }

    /// Whether a response or notification numbered `seq` (its Observe value) received at
    /// `now` is newer than every one accepted before; if so it is the one remembered. A stale
    /// or repeated one is to be discarded.
    pub fn accept(&mut self, seq: u32, now: Instant) -> bool {
        let fresh = match self.last {
            None => true,
            Some((v1, t1)) => is_newer(v1, t1, seq, now),
        };
        if fresh {
            self.last = Some((seq & SEQ_MASK, now));
        }
        fresh
    }

    /// Forgets every notification (a new registration starts a new order).
    pub fn reset(&mut self) {
        self.last = None;
    }
}

/// What an [`Observers`] table allows and how it notifies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObserveParams {
    /// Observers in all, at most the storage's length.
    pub max_observers: usize,
    /// Observers one host may hold.
    pub max_per_host: usize,
    /// Every this many notifications, one is Confirmable (1: all of them).
    pub confirmable_every: u16,
    /// A notification is Confirmable when none was acknowledged for this long (§4.5: 24 h).
    pub confirmable_interval: Duration,
    /// Ask for the current state to be sent again when nothing was sent for this long.
    pub refresh: Option<Duration>,
    /// The retransmission timing of Confirmable notifications (RFC 7252 §4.2).
    pub transmission: TransmissionParameters,
}

impl Default for ObserveParams {
    fn default() -> Self {
        Self {
            max_observers: usize::MAX,
            max_per_host: 64,
            confirmable_every: 16,
            confirmable_interval: Duration::from_secs(24 * 3600),
            refresh: None,
            transmission: TransmissionParameters::default(),
        }
    }
}

/// One observation in the server's table.
#[derive(Clone, Debug)]
pub struct Observer<P, H, R> {
    pub peer: P,
    pub host: H,
    pub resource: R,
    pub token: Token,
    /// The sequence number of the latest notification (or of the registration's response).
    seq: u32,
    /// The message IDs of the latest notifications, newest first: a Reset to one of them
    /// cancels (§3.6), and while a Confirmable one is unacknowledged an ACK to any of them
    /// acknowledges it (a notification that took an unacknowledged one's place has a new
    /// message ID, and the ACK of the one it replaced may still be on its way).
    mids: [Option<u16>; RECENT_MIDS],
    /// The unacknowledged Confirmable notification's retransmission state.
    pending: Option<Retransmission>,
    last_sent: Instant,
    last_acknowledged: Instant,
    since_confirmable: u16,
    /// The state changed while a Confirmable notification was unacknowledged.
    held: bool,
    generation: u32,
}

impl<P, H, R> Observer<P, H, R> {
    /// The sequence number of the latest notification sent.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// Whether a Confirmable notification waits for its acknowledgement.
    pub fn awaiting_ack(&self) -> bool {
        self.pending.is_some()
    }

    /// When the observer last acknowledged a notification (or registered).
    pub fn last_acknowledged(&self) -> Instant {
        self.last_acknowledged
    }
}

/// A handle on one observation; stale once that observation ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObserverId {
    index: u32,
    generation: u32,
}

/// Why a registration was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The table holds `max_observers`.
    Full,
    /// The host holds `max_per_host`.
    HostFull,
}

/// What to send for one notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    pub seq: u32,
    pub confirmable: bool,
    pub mid: u16,
    pub token: Token,
}

/// What [`Observers::poll`] asks the caller to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Due<P, R> {
    /// Send this observer's latest notification again, the same bytes ([`Observers::last`]).
    Resend(ObserverId),
    /// Nothing was sent to this observer for [`ObserveParams::refresh`]: send the current state
    /// ([`Observers::notification`]).
    Refresh(ObserverId),
    /// The observer acknowledged nothing through all retransmissions and is forgotten.
    GaveUp {
        id: ObserverId,
        peer: P,
        resource: R,
    },
}

/// The server's observers, over caller-sized storage `S` (`[Option<Observer>; N]` or a
/// `Vec`).
pub struct Observers<P, H, R, S> {
    slots: S,
    params: ObserveParams,
    len: usize,
    generation: u32,
    /// No timer is due before this.
    wake: Instant,
    _types: core::marker::PhantomData<(P, H, R)>,
}

impl<P, H, R, S> Observers<P, H, R, S>
where
    P: Clone + PartialEq,
    H: Clone + PartialEq,
    R: Clone + PartialEq,
    S: AsRef<[Option<Observer<P, H, R>>]> + AsMut<[Option<Observer<P, H, R>>]>,
{
    /// A table over `slots` (all `None`; their number bounds it whatever `max_observers`
    /// says).
    pub fn new(slots: S, params: ObserveParams) -> Self {
        Self {
            slots,
            params,
            len: 0,
            generation: 0,
            wake: Instant::NEVER,
            _types: core::marker::PhantomData,
        }
    }

    pub fn params(&self) -> &ObserveParams {
        &self.params
    }

    /// Observations in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Observations `host` holds.
    pub fn held_by(&self, host: &H) -> usize {
        self.iter().filter(|(_, o)| o.host == *host).count()
    }

    fn capacity(&self) -> usize {
        self.params.max_observers.min(self.slots.as_ref().len())
    }

    /// Registers `peer`'s observation of `resource` under `token` at `now` (§4.1): an entry
    /// with the same peer and token is replaced, keeping its sequence numbers. Returns its
    /// handle and the sequence number for the registration's response.
    pub fn register(
        &mut self,
        peer: P,
        host: H,
        resource: R,
        token: Token,
        now: Instant,
    ) -> Result<(ObserverId, u32), Refused> {
        if let Some(id) = self.find(&peer, &token) {
            let o = self.slot_mut(id).ok_or(Refused::Full)?;
            o.resource = resource;
            o.seq = o.seq.wrapping_add(1) & SEQ_MASK;
            o.last_sent = now;
            let seq = o.seq;
            self.lower_wake(self.refresh_at(now));
            return Ok((id, seq));
        }
        if self.len >= self.capacity() {
            return Err(Refused::Full);
        }
        if self.held_by(&host) >= self.params.max_per_host {
            return Err(Refused::HostFull);
        }
        let cap = self.capacity();
        let index = self.slots.as_ref()[..cap]
            .iter()
            .position(Option::is_none)
            .ok_or(Refused::Full)?;
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        self.slots.as_mut()[index] = Some(Observer {
            peer,
            host,
            resource,
            token,
            seq: 1,
            mids: [None; RECENT_MIDS],
            pending: None,
            last_sent: now,
            last_acknowledged: now,
            since_confirmable: 0,
            held: false,
            generation,
        });
        self.len += 1;
        self.lower_wake(self.refresh_at(now));
        let id = ObserverId {
            index: index as u32,
            generation,
        };
        Ok((id, 1))
    }

    /// The observation `peer` registered under `token`.
    pub fn find(&self, peer: &P, token: &Token) -> Option<ObserverId> {
        self.iter()
            .find(|(_, o)| o.peer == *peer && o.token == *token)
            .map(|(id, _)| id)
    }

    pub fn get(&self, id: ObserverId) -> Option<&Observer<P, H, R>> {
        self.slots
            .as_ref()
            .get(id.index as usize)?
            .as_ref()
            .filter(|o| o.generation == id.generation)
    }

    fn slot_mut(&mut self, id: ObserverId) -> Option<&mut Observer<P, H, R>> {
        self.slots
            .as_mut()
            .get_mut(id.index as usize)?
            .as_mut()
            .filter(|o| o.generation == id.generation)
    }

    /// Ends an observation; returns what it was.
    pub fn remove(&mut self, id: ObserverId) -> Option<Observer<P, H, R>> {
        self.get(id)?;
        let o = self.slots.as_mut()[id.index as usize].take();
        self.len -= 1;
        o
    }

    /// Ends the observation `peer` registered under `token` (a GET with Observe 1, §3.6).
    pub fn cancel(&mut self, peer: &P, token: &Token) -> Option<Observer<P, H, R>> {
        let id = self.find(peer, token)?;
        self.remove(id)
    }

    /// Every observation, with its handle.
    pub fn iter(&self) -> impl Iterator<Item = (ObserverId, &Observer<P, H, R>)> {
        self.slots.as_ref().iter().enumerate().filter_map(|(i, s)| {
            let o = s.as_ref()?;
            Some((
                ObserverId {
                    index: i as u32,
                    generation: o.generation,
                },
                o,
            ))
        })
    }

    /// The observations of `resource`.
    pub fn of<'a>(&'a self, resource: &'a R) -> impl Iterator<Item = ObserverId> + 'a {
        self.iter()
            .filter(move |(_, o)| o.resource == *resource)
            .map(|(id, _)| id)
    }

    /// Ends every observation for which `keep` is false; returns how many ended.
    pub fn retain(&mut self, mut keep: impl FnMut(&Observer<P, H, R>) -> bool) -> usize {
        let mut ended = 0;
        for s in self.slots.as_mut() {
            if s.as_ref().is_some_and(|o| !keep(o)) {
                *s = None;
                ended += 1;
            }
        }
        self.len -= ended;
        ended
    }

    /// The next notification to `id` at `now`, sent with message ID `mid`; `random` is the
    /// caller's jitter for a new retransmission timer. `None` for a stale handle, and while a
    /// Confirmable notification is unacknowledged: the change is held for
    /// [`Observers::take_held`].
    pub fn notification(
        &mut self,
        id: ObserverId,
        now: Instant,
        mid: u16,
        random: u32,
    ) -> Option<Notice> {
        let params = self.params;
        let o = self.slot_mut(id)?;
        if o.pending.is_some() {
            o.held = true;
            return None;
        }
        o.seq = o.seq.wrapping_add(1) & SEQ_MASK;
        let confirmable = o.since_confirmable.saturating_add(1) >= params.confirmable_every
            || now.saturating_since(o.last_acknowledged) >= params.confirmable_interval;
        if confirmable {
            o.since_confirmable = 0;
            o.pending = Some(Retransmission::start(now, &params.transmission, random));
        } else {
            o.since_confirmable = o.since_confirmable.saturating_add(1);
        }
        o.mids.rotate_right(1);
        o.mids[0] = Some(mid);
        o.last_sent = now;
        let n = Notice {
            seq: o.seq,
            confirmable,
            mid,
            token: o.token,
        };
        let wake = o.pending.as_ref().map(Retransmission::deadline);
        let wake = wake.unwrap_or_else(|| self.refresh_at(now));
        self.lower_wake(wake);
        Some(n)
    }

    /// The latest notification to `id`, to be sent again as it was.
    pub fn last(&self, id: ObserverId) -> Option<Notice> {
        let o = self.get(id)?;
        Some(Notice {
            seq: o.seq,
            confirmable: o.pending.is_some(),
            mid: o.mids[0]?,
            token: o.token,
        })
    }

    /// An acknowledgement from `peer` for message `mid` at `now`: the observation one of
    /// whose latest notifications it acknowledges. It proves the observer is there, so any
    /// unacknowledged Confirmable notification is settled with it (the ACK of one that was
    /// replaced by a newer notification counts, §4.5.2).
    pub fn on_ack(&mut self, peer: &P, mid: u16, now: Instant) -> Option<ObserverId> {
        let id = self
            .iter()
            .find(|(_, o)| o.peer == *peer && o.mids.contains(&Some(mid)))
            .map(|(id, _)| id)?;
        let o = self.slot_mut(id)?;
        o.pending = None;
        o.last_acknowledged = now;
        Some(id)
    }

    /// Whether the state changed while observation `id`'s Confirmable notification was
    /// unacknowledged (cleared): after its acknowledgement, send it one notification.
    pub fn take_held(&mut self, id: ObserverId) -> bool {
        self.slot_mut(id)
            .is_some_and(|o| core::mem::replace(&mut o.held, false))
    }

    /// A Reset from `peer` for message `mid`: the observation it rejects ends (§3.6).
    pub fn on_reset(&mut self, peer: &P, mid: u16) -> Option<(ObserverId, Observer<P, H, R>)> {
        let id = self
            .iter()
            .find(|(_, o)| o.peer == *peer && o.mids[0] == Some(mid))
            .map(|(id, _)| id)?;
        Some((id, self.remove(id)?))
    }

    fn lower_wake(&mut self, at: Instant) {
        self.wake = self.wake.min(at);
    }

    /// When a refresh is due for an observer last sent to at `sent`.
    fn refresh_at(&self, sent: Instant) -> Instant {
        self.params.refresh.map_or(Instant::NEVER, |r| sent + r)
    }

    /// When [`Observers::poll`] has something to do next, at the earliest.
    pub fn next_wake(&self) -> Option<Instant> {
        (self.len > 0 && self.wake != Instant::NEVER).then_some(self.wake)
    }

    /// The next thing due at `now`, one at a time: call until `None`.
    pub fn poll(&mut self, now: Instant) -> Option<Due<P, R>> {
        if self.len == 0 || now < self.wake {
            return None;
        }
        let params = self.params;
        let mut next = Instant::NEVER;
        let mut found = None;
        for (i, s) in self.slots.as_mut().iter_mut().enumerate() {
            let Some(o) = s.as_mut() else { continue };
            let id = ObserverId {
                index: i as u32,
                generation: o.generation,
            };
            if let Some(r) = o.pending.as_mut() {
                let decision = if now >= r.deadline() {
                    r.on_timer(now)
                } else {
                    RetransmitDecision::Wait
                };
                match decision {
                    RetransmitDecision::Resend => {
                        found = Some(Due::Resend(id));
                        break;
                    }
                    RetransmitDecision::GiveUp => {
                        let gone = s.take();
                        self.len -= 1;
                        found = gone.map(|o| Due::GaveUp {
                            id,
                            peer: o.peer,
                            resource: o.resource,
                        });
                        break;
                    }
                    RetransmitDecision::Wait => next = next.min(r.deadline()),
                }
                continue;
            }
            if let Some(refresh) = params.refresh {
                let at = o.last_sent + refresh;
                if now >= at {
                    // Marked as sent, so a caller that does not send asks nothing again
                    // before another period.
                    o.last_sent = now;
                    found = Some(Due::Refresh(id));
                    break;
                }
                next = next.min(at);
            }
        }
        // With something found, the scan stopped early: the next call scans again.
        self.wake = if found.is_some() { now } else { next };
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    type Table = Observers<u32, u8, u8, Vec<Option<Observer<u32, u8, u8>>>>;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn table(n: usize, params: ObserveParams) -> Table {
        Observers::new((0..n).map(|_| None).collect(), params)
    }

    fn tok(b: u8) -> Token {
        Token::new(&[b, b]).unwrap()
    }

    #[test]
    fn ordering_follows_rfc7641_section_3_4() {
        let t = at(1000);
        assert!(is_newer(1, t, 2, t));
        assert!(!is_newer(2, t, 1, t));
        assert!(!is_newer(5, t, 5, t));
        // Wrapping: 2^24 - 1 is older than 3.
        assert!(is_newer(SEQ_MASK, t, 3, t));
        assert!(!is_newer(3, t, SEQ_MASK, t));
        // More than half the space ahead counts as behind...
        assert!(!is_newer(0, t, HALF + 1, t));
        // ...unless 128 s have passed.
        assert!(is_newer(0, t, HALF + 1, at(1000 + 128_001)));
        let mut o = Ordering::new();
        assert!(o.accept(7, t));
        assert!(!o.accept(6, at(1100)), "a reordered older notification");
        assert!(!o.accept(7, at(1200)), "a duplicate");
        assert!(o.accept(8, at(1300)));
    }

    #[test]
    fn caps_per_host_and_in_total() {
        let mut t = table(
            8,
            ObserveParams {
                max_per_host: 3,
                max_observers: 5,
                ..Default::default()
            },
        );
        for i in 0..3 {
            t.register(i, 1, 0, tok(1), at(0)).unwrap();
        }
        assert_eq!(t.register(9, 1, 0, tok(1), at(0)), Err(Refused::HostFull));
        // A re-registration of the same token is no new entry.
        assert!(t.register(0, 1, 5, tok(1), at(0)).is_ok());
        assert_eq!(t.len(), 3);
        t.register(10, 2, 0, tok(1), at(0)).unwrap();
        t.register(11, 3, 0, tok(1), at(0)).unwrap();
        assert_eq!(t.register(12, 4, 0, tok(1), at(0)), Err(Refused::Full));
        let id = t.find(&10, &tok(1)).unwrap();
        t.remove(id).unwrap();
        assert!(
            t.get(id).is_none(),
            "a handle goes stale with its observation"
        );
        t.register(12, 4, 0, tok(1), at(0)).unwrap();
        assert!(
            t.get(id).is_none(),
            "the slot's new occupant is another observation"
        );
    }

    #[test]
    fn sequence_numbers_increase_and_wrap_at_24_bits() {
        let mut t = table(1, ObserveParams::default());
        let (id, first) = t.register(1, 1, 0, tok(1), at(0)).unwrap();
        t.slot_mut(id).unwrap().seq = SEQ_MASK - 1;
        let mut last = (SEQ_MASK - 1, at(0));
        for i in 0..4u16 {
            let n = t.notification(id, at(10), i, 0).unwrap();
            assert!(is_newer(last.0, last.1, n.seq, at(10)));
            assert!(n.seq <= SEQ_MASK);
            last = (n.seq, at(10));
        }
        assert_eq!(first, 1);
        assert_eq!(last.0, 2);
    }

    #[test]
    fn confirmable_every_nth_and_after_a_day_and_while_one_is_unacknowledged() {
        let mut t = table(
            1,
            ObserveParams {
                confirmable_every: 4,
                ..Default::default()
            },
        );
        let (id, _) = t.register(1, 1, 0, tok(1), at(0)).unwrap();
        let kinds: Vec<bool> = (0..8)
            .map(|i| {
                let n = t.notification(id, at(i), i as u16, 0).unwrap();
                if n.confirmable {
                    assert_eq!(t.on_ack(&1, n.mid, at(i)), Some(id));
                }
                n.confirmable
            })
            .collect();
        assert_eq!(
            kinds,
            [false, false, false, true, false, false, false, true]
        );
        // A day without an acknowledgement: the next is Confirmable.
        let day = 24 * 3600 * 1000;
        assert!(t.notification(id, at(day + 10), 50, 0).unwrap().confirmable);
        // Unacknowledged: nothing more goes out (one in flight); the change is held.
        assert_eq!(t.notification(id, at(day + 20), 51, 0), None);
        assert_eq!(t.notification(id, at(day + 25), 52, 0), None);
        assert!(t.get(id).unwrap().awaiting_ack());
        assert_eq!(t.on_ack(&2, 50, at(day + 30)), None, "another peer");
        assert_eq!(
            t.on_ack(&1, 49, at(day + 30)),
            None,
            "a message ID never sent"
        );
        assert_eq!(t.on_ack(&1, 50, at(day + 30)), Some(id));
        assert!(!t.get(id).unwrap().awaiting_ack());
        assert!(t.take_held(id), "the held change is released by the ACK");
        assert!(!t.take_held(id), "once");
        let n = t.notification(id, at(day + 31), 53, 0).unwrap();
        assert!(!n.confirmable);
        // An ACK for an earlier notification, late: the observer is alive.
        assert_eq!(t.on_ack(&1, 50, at(day + 40)), Some(id));
        assert_eq!(t.get(id).unwrap().last_acknowledged(), at(day + 40));
    }

    #[test]
    fn an_observer_that_never_acknowledges_is_dropped_after_the_retransmissions() {
        let params = ObserveParams {
            confirmable_every: 1,
            ..Default::default()
        };
        let mut t = table(2, params);
        let (id, _) = t.register(1, 1, 7, tok(1), at(0)).unwrap();
        let n = t.notification(id, at(0), 1, 0).unwrap();
        assert!(n.confirmable);
        let mut resent = Vec::new();
        let mut now = 0;
        let gone = loop {
            now += 250;
            match t.poll(at(now)) {
                Some(Due::Resend(r)) => {
                    assert_eq!(r, id);
                    assert_eq!(t.last(r).unwrap(), n, "sent again as it was");
                    resent.push(now);
                }
                Some(Due::GaveUp {
                    id: g,
                    peer,
                    resource,
                }) => {
                    assert_eq!(g, id);
                    break (peer, resource, now);
                }
                Some(other) => panic!("{other:?}"),
                None => {}
            }
            assert!(now < 200_000);
        };
        // RFC 7252 §4.2 with the default parameters and no jitter: 2, 6, 14, 30 s, then 62 s.
        assert_eq!(resent, [2000, 6000, 14000, 30000]);
        assert_eq!(gone, (1, 7, 62000));
        assert!(t.is_empty());
        assert_eq!(t.next_wake(), None);
    }

    #[test]
    fn reset_and_deregistration_end_an_observation() {
        let mut t = table(4, ObserveParams::default());
        let (a, _) = t.register(1, 1, 0, tok(1), at(0)).unwrap();
        let (b, _) = t.register(2, 1, 0, tok(2), at(0)).unwrap();
        let n = t.notification(a, at(1), 40, 0).unwrap();
        assert!(!n.confirmable);
        assert!(t.on_reset(&2, 40).is_none(), "a Reset from another peer");
        assert!(t.on_reset(&1, 40).is_some());
        assert!(t.get(a).is_none());
        assert!(t.cancel(&2, &tok(1)).is_none(), "another token");
        assert!(t.cancel(&2, &tok(2)).is_some());
        assert!(t.get(b).is_none());
        assert!(t.is_empty());
    }

    #[test]
    fn refresh_asks_for_the_state_again_when_nothing_was_sent() {
        let mut t = table(
            4,
            ObserveParams {
                refresh: Some(Duration::from_secs(60)),
                ..Default::default()
            },
        );
        let (a, _) = t.register(1, 1, 0, tok(1), at(0)).unwrap();
        let (b, _) = t.register(2, 1, 0, tok(2), at(30_000)).unwrap();
        assert_eq!(t.poll(at(59_999)), None);
        assert_eq!(t.next_wake(), Some(at(60_000)));
        assert_eq!(t.poll(at(60_000)), Some(Due::Refresh(a)));
        assert_eq!(t.poll(at(60_000)), None, "asked once per period");
        t.notification(b, at(80_000), 9, 0).unwrap();
        assert_eq!(t.poll(at(120_000)), Some(Due::Refresh(a)));
        assert_eq!(t.poll(at(120_000)), None);
        assert_eq!(t.poll(at(140_000)), Some(Due::Refresh(b)));
    }

    #[test]
    fn retain_ends_the_observations_it_is_told_to() {
        let mut t = table(4, ObserveParams::default());
        for p in 0..4 {
            t.register(p, p as u8, p as u8 % 2, tok(1), at(0)).unwrap();
        }
        assert_eq!(t.retain(|o| o.resource == 0), 2);
        assert_eq!(t.len(), 2);
        assert_eq!(t.of(&0).count(), 2);
        assert_eq!(t.of(&1).count(), 0);
    }
}
