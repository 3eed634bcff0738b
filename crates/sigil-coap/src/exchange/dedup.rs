//! Received-message deduplication for a server endpoint (RFC 7252 §4.5): a message ID from a
//! peer seen within EXCHANGE_LIFETIME is the same message again, and gets the same answer
//! (the bytes sent the first time) instead of being acted on twice.
//!
//! The rules are [`Dedup`]'s: what is a duplicate, for how long an entry lives, what is
//! answered again, what is counted. Where the entries live and how room is made is a
//! [`DedupStore`]'s:
//!
//! - [`Slots`]: no allocation, at most `N` remembered messages, the answers in `BUF`-byte
//!   slots beside them, at most `per_peer` of them for one peer (`P`, the caller's idea of who
//!   sent it: an address, a host, a session), so that one peer cannot fill the table for the
//!   others. When there is no room the message is not remembered
//!   ([`Received::NotRemembered`] says why) and the caller decides (act on it without the
//!   memory, or refuse it); nothing remembered is dropped early to make room. A device
//!   serving its own resources uses it.
//! - a server's store (the Sigil server's budgeted cache): entries and answers charged to
//!   their host's byte budget, and a full table giving way at a bounded rate.
//!
//! Time comes from the caller.

use crate::reliability::TransmissionParameters;
use core::time::Duration;
use sigil_time::Instant;

/// What a received message ID is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received<'a> {
    /// Not seen before; now remembered. Record the answer with [`Dedup::answered`].
    New,
    /// Seen before and answered with these bytes: send them again.
    Again(&'a [u8]),
    /// Seen before, no answer kept (none recorded yet, or it did not fit a slot).
    Seen,
    /// Not seen before and not remembered: no room.
    NotRemembered(NoRoom),
}

/// Why a new message ID was not remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoRoom {
    /// The peer (or its host) already holds its share.
    Peer,
    /// The table is full.
    Table,
}

/// What the table has counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DedupStats {
    pub duplicates: u32,
    pub refused_peer: u32,
    pub refused_table: u32,
    /// Answers recorded without their bytes (longer than a slot, or over a budget).
    pub answers_not_kept: u32,
}

/// Where a [`Dedup`] keeps its entries, and how it makes room.
pub trait DedupStore<P> {
    /// What deciding room takes besides the peer: `()` for [`Slots`]; for a server, whether
    /// the sender's address is proven (it may spend more of the table's give-way).
    type Room: Copy;

    /// The remembered message `mid` of `peer`: `Some(answer)` (`None` inside when no answer
    /// is kept), `None` when it is not remembered. Expired entries may still be here until
    /// [`DedupStore::expire`]; [`Dedup`] expires before it looks.
    fn lookup(&self, peer: &P, mid: u16) -> Option<Option<&[u8]>>;

    /// Remembers `mid` of `peer` until `until`, or says why there is no room.
    fn insert(
        &mut self,
        peer: P,
        mid: u16,
        until: Instant,
        now: Instant,
        room: Self::Room,
    ) -> Result<(), NoRoom>;

    /// Keeps `answer` for the remembered `mid` of `peer`; false when it is not kept (not
    /// remembered, too long, over a budget: the store may then forget the entry).
    fn keep_answer(
        &mut self,
        peer: &P,
        mid: u16,
        answer: &[u8],
        now: Instant,
        room: Self::Room,
    ) -> bool;

    /// Forgets the entries whose time has come.
    fn expire(&mut self, now: Instant);

    /// When the next entry expires.
    fn next_expiry(&self) -> Option<Instant>;
}

/// The received-message rules of RFC 7252 §4.5 over a store `S`.
pub struct Dedup<P, S: DedupStore<P>> {
    lifetime: Duration,
    store: S,
    stats: DedupStats,
    _peer: core::marker::PhantomData<fn(P)>,
}

impl<P, S: DedupStore<P>> Dedup<P, S> {
    /// Entries live EXCHANGE_LIFETIME of `params`, in `store`.
    pub fn with_store(params: &TransmissionParameters, store: S) -> Self {
        Self {
            lifetime: params.exchange_lifetime(),
            store,
            stats: DedupStats::default(),
            _peer: core::marker::PhantomData,
        }
    }

    pub fn stats(&self) -> &DedupStats {
        &self.stats
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Message `mid` from `peer` arrived at `now`: new (and now remembered, if `room`
    /// allows), or a duplicate with the answer to send again.
    pub fn receive_with(&mut self, peer: P, mid: u16, now: Instant, room: S::Room) -> Received<'_> {
        self.store.expire(now);
        if self.store.lookup(&peer, mid).is_some() {
            self.stats.duplicates = self.stats.duplicates.saturating_add(1);
            return match self.store.lookup(&peer, mid) {
                Some(Some(answer)) => Received::Again(answer),
                _ => Received::Seen,
            };
        }
        match self.store.insert(peer, mid, now + self.lifetime, now, room) {
            Ok(()) => Received::New,
            Err(why) => {
                let n = match why {
                    NoRoom::Peer => &mut self.stats.refused_peer,
                    NoRoom::Table => &mut self.stats.refused_table,
                };
                *n = n.saturating_add(1);
                Received::NotRemembered(why)
            }
        }
    }

    /// Whether message `mid` from `peer` was received before (within its lifetime), without
    /// remembering it if not: `Some` with the answer to send again (`None` inside when none
    /// is kept), counted as a duplicate. For an endpoint that learns which table a request
    /// belongs to only after it knows it is new (a session found by its resource).
    pub fn seen(&mut self, peer: &P, mid: u16, now: Instant) -> Option<Option<&[u8]>> {
        self.store.expire(now);
        let found = self.store.lookup(peer, mid)?;
        self.stats.duplicates = self.stats.duplicates.saturating_add(1);
        Some(found)
    }

    /// Keeps `answer` for message `mid` of `peer` (received [`Received::New`]), to be sent
    /// again for a duplicate; false if it is not kept.
    pub fn answered_with(
        &mut self,
        peer: &P,
        mid: u16,
        answer: &[u8],
        now: Instant,
        room: S::Room,
    ) -> bool {
        if self.store.lookup(peer, mid).is_none() {
            return false;
        }
        let kept = self.store.keep_answer(peer, mid, answer, now, room);
        if !kept {
            self.stats.answers_not_kept = self.stats.answers_not_kept.saturating_add(1);
        }
        kept
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.store.next_expiry()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.store.expire(now);
    }
}

impl<P, S: DedupStore<P, Room = ()>> Dedup<P, S> {
    /// [`Dedup::receive_with`] for a store that needs nothing to decide room.
    pub fn receive(&mut self, peer: P, mid: u16, now: Instant) -> Received<'_> {
        self.receive_with(peer, mid, now, ())
    }

    /// [`Dedup::answered_with`] for a store that needs nothing to decide room; `now` does
    /// not matter to it.
    pub fn answered(&mut self, peer: P, mid: u16, answer: &[u8]) -> bool {
        self.answered_with(&peer, mid, answer, Instant::ZERO, ())
    }
}

impl<P: Copy + Eq, const N: usize, const BUF: usize> Dedup<P, Slots<P, N, BUF>> {
    /// `N` entries living EXCHANGE_LIFETIME of `params`, answers up to `BUF` bytes; one
    /// peer holds at most `per_peer`.
    pub fn new(params: &TransmissionParameters, per_peer: usize) -> Self {
        Self::with_store(params, Slots::new(per_peer))
    }

    pub fn len(&self) -> usize {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Entries `peer` holds.
    pub fn of_peer(&self, peer: &P) -> usize {
        self.store.of_peer(peer)
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry<P> {
    peer: P,
    mid: u16,
    until: Instant,
    /// Length of the kept answer; `None`: no answer kept.
    answer: Option<usize>,
}

impl<P> Entry<P> {
    fn new(peer: P, mid: u16, until: Instant) -> Self {
        Self {
            peer,
            mid,
            until,
            answer: None,
        }
    }

    /// Keeps `answer` in `slot` for this entry; one longer than the slot is not kept.
    fn keep<const BUF: usize>(&mut self, slot: &mut [u8; BUF], answer: &[u8]) -> bool {
        match slot.get_mut(..answer.len()) {
            Some(to) => {
                to.copy_from_slice(answer);
                self.answer = Some(answer.len());
                true
            }
            None => {
                self.answer = None;
                false
            }
        }
    }
}

/// A fixed store: `N` entries, answers up to `BUF` bytes, at most `per_peer` for one peer;
/// nothing is dropped early to make room.
pub struct Slots<P, const N: usize, const BUF: usize> {
    per_peer: usize,
    entries: [Option<Entry<P>>; N],
    answers: [[u8; BUF]; N],
}

impl<P: Copy + Eq, const N: usize, const BUF: usize> Slots<P, N, BUF> {
    pub fn new(per_peer: usize) -> Self {
        Self {
            per_peer,
            entries: [const { None }; N],
            answers: [[0; BUF]; N],
        }
    }

    pub fn len(&self) -> usize {
        self.entries.iter().filter(|e| e.is_some()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.iter().all(Option::is_none)
    }

    pub fn of_peer(&self, peer: &P) -> usize {
        self.entries
            .iter()
            .flatten()
            .filter(|e| e.peer == *peer)
            .count()
    }

    fn find(&self, peer: &P, mid: u16) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| e.peer == *peer && e.mid == mid))
    }
}

impl<P: Copy + Eq, const N: usize, const BUF: usize> DedupStore<P> for Slots<P, N, BUF> {
    type Room = ();

    fn lookup(&self, peer: &P, mid: u16) -> Option<Option<&[u8]>> {
        let i = self.find(peer, mid)?;
        let e = self.entries[i]?;
        Some(e.answer.map(|n| &self.answers[i][..n]))
    }

    fn insert(
        &mut self,
        peer: P,
        mid: u16,
        until: Instant,
        _now: Instant,
        _room: (),
    ) -> Result<(), NoRoom> {
        if self.of_peer(&peer) >= self.per_peer {
            return Err(NoRoom::Peer);
        }
        let slot = self
            .entries
            .iter_mut()
            .find(|e| e.is_none())
            .ok_or(NoRoom::Table)?;
        *slot = Some(Entry::new(peer, mid, until));
        Ok(())
    }

    fn keep_answer(&mut self, peer: &P, mid: u16, answer: &[u8], _now: Instant, _room: ()) -> bool {
        let Some(i) = self.find(peer, mid) else {
            return false;
        };
        match self.entries[i].as_mut() {
            Some(e) => e.keep(&mut self.answers[i], answer),
            None => false,
        }
    }

    fn expire(&mut self, now: Instant) {
        for e in self.entries.iter_mut() {
            if e.is_some_and(|e| now >= e.until) {
                *e = None;
            }
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.entries.iter().flatten().map(|e| e.until).min()
    }
}

/// A store of one: the latest message of a lock-step peer (one request at a time, NSTART 1)
/// and its answer, in `BUF` bytes; a new message takes the place of the last. For a table
/// per peer (a session), where the answer to the request before the latest is never asked for
/// again.
pub struct Latest<P, const BUF: usize> {
    entry: Option<Entry<P>>,
    answer: [u8; BUF],
}

impl<P: Copy + Eq, const BUF: usize> Latest<P, BUF> {
    pub const fn new() -> Self {
        Self {
            entry: None,
            answer: [0; BUF],
        }
    }

    /// The message ID of the latest message remembered.
    pub fn mid(&self) -> Option<u16> {
        self.entry.map(|e| e.mid)
    }
}

impl<P: Copy + Eq, const BUF: usize> Default for Latest<P, BUF> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Copy + Eq, const BUF: usize> DedupStore<P> for Latest<P, BUF> {
    type Room = ();

    fn lookup(&self, peer: &P, mid: u16) -> Option<Option<&[u8]>> {
        let e = self.entry.filter(|e| e.peer == *peer && e.mid == mid)?;
        Some(e.answer.map(|n| &self.answer[..n]))
    }

    fn insert(
        &mut self,
        peer: P,
        mid: u16,
        until: Instant,
        _now: Instant,
        _room: (),
    ) -> Result<(), NoRoom> {
        self.entry = Some(Entry::new(peer, mid, until));
        Ok(())
    }

    fn keep_answer(&mut self, peer: &P, mid: u16, answer: &[u8], _now: Instant, _room: ()) -> bool {
        match self.entry.as_mut() {
            Some(e) if e.peer == *peer && e.mid == mid => e.keep(&mut self.answer, answer),
            _ => false,
        }
    }

    fn expire(&mut self, now: Instant) {
        if self.entry.is_some_and(|e| now >= e.until) {
            self.entry = None;
        }
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.entry.map(|e| e.until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn table() -> Dedup<u8, Slots<u8, 4, 8>> {
        Dedup::new(&TransmissionParameters::default(), 2)
    }

    #[test]
    fn a_repeated_message_gets_the_same_answer_until_exchange_lifetime() {
        let mut d = table();
        assert_eq!(d.receive(1, 7, at(0)), Received::New);
        assert_eq!(d.receive(1, 7, at(1)), Received::Seen);
        assert!(d.answered(1, 7, b"answer"));
        assert_eq!(d.receive(1, 7, at(2)), Received::Again(b"answer"));
        // The same message ID from another peer is another message.
        assert_eq!(d.receive(2, 7, at(2)), Received::New);
        assert_eq!(d.poll_timeout(), Some(at(247_000)));
        assert_eq!(d.receive(1, 7, at(246_999)), Received::Again(b"answer"));
        assert_eq!(d.receive(1, 7, at(247_000)), Received::New);
        assert_eq!(d.stats().duplicates, 3);
    }

    #[test]
    fn an_answer_longer_than_a_slot_is_not_kept() {
        let mut d = table();
        d.receive(1, 7, at(0));
        assert!(!d.answered(1, 7, b"nine byte"));
        assert_eq!(d.receive(1, 7, at(1)), Received::Seen);
        assert!(!d.answered(1, 8, b"x"), "never received");
        assert_eq!(d.stats().answers_not_kept, 1);
    }

    #[test]
    fn one_peer_cannot_fill_the_table_and_nothing_is_dropped_for_room() {
        let mut d = table();
        assert_eq!(d.receive(1, 1, at(0)), Received::New);
        assert_eq!(d.receive(1, 2, at(0)), Received::New);
        assert_eq!(
            d.receive(1, 3, at(0)),
            Received::NotRemembered(NoRoom::Peer)
        );
        assert_eq!(d.receive(2, 1, at(0)), Received::New);
        assert_eq!(d.receive(3, 1, at(0)), Received::New);
        assert_eq!(
            d.receive(4, 1, at(0)),
            Received::NotRemembered(NoRoom::Table)
        );
        // Those remembered still are.
        assert_eq!(d.receive(1, 1, at(1)), Received::Seen);
        assert_eq!((d.stats().refused_peer, d.stats().refused_table), (1, 1));
        // Room again once they expire.
        d.handle_timeout(at(247_000));
        assert!(d.is_empty());
        assert_eq!(d.receive(4, 1, at(247_000)), Received::New);
    }

    /// Any sequence of receptions, answers and timers from a few peers: no panic; at most N
    /// entries and `per_peer` for each peer; a remembered message is never New within its
    /// lifetime; everything is forgotten EXCHANGE_LIFETIME after the last reception.
    #[test]
    fn property_bounded_and_never_new_twice_within_the_lifetime() {
        for seed in 0..300u64 {
            let mut x = seed;
            let mut next = |n: u64| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 16) % n
            };
            let mut d: Dedup<u8, Slots<u8, 6, 4>> =
                Dedup::new(&TransmissionParameters::default(), 3);
            let mut now = 0u64;
            let mut first: [[Option<u64>; 5]; 4] = [[None; 5]; 4];
            for _ in 0..400 {
                let (peer, mid) = (next(4) as u8, next(5) as u16);
                match next(4) {
                    0 => now += next(100_000),
                    1 => {
                        let len = next(7) as usize;
                        d.answered(peer, mid, &[0xaa; 6][..len]);
                    }
                    _ => {
                        let seen = &mut first[usize::from(peer)][usize::from(mid)];
                        if seen.is_some_and(|t| now >= t + 247_000) {
                            *seen = None;
                        }
                        match d.receive(peer, mid, at(now)) {
                            Received::New => {
                                assert!(seen.is_none(), "seed {seed}");
                                *seen = Some(now);
                            }
                            Received::Again(a) => assert!(a.len() <= 4 && seen.is_some()),
                            Received::Seen => assert!(seen.is_some()),
                            Received::NotRemembered(_) => assert!(seen.is_none()),
                        }
                    }
                }
                assert!(d.len() <= 6);
                assert!((0..4).all(|p| d.of_peer(&p) <= 3));
            }
            d.handle_timeout(at(now + 247_000));
            assert!(d.is_empty() && d.poll_timeout().is_none());
        }
    }

    #[test]
    fn the_latest_store_keeps_one_message_and_seen_does_not_remember() {
        let mut d: Dedup<u8, Latest<u8, 8>> =
            Dedup::with_store(&TransmissionParameters::default(), Latest::new());
        assert_eq!(d.seen(&1, 7, at(0)), None);
        assert_eq!(d.store().mid(), None, "seen remembers nothing");
        assert_eq!(d.receive(1, 7, at(0)), Received::New);
        assert!(d.answered(1, 7, b"seven"));
        assert_eq!(d.seen(&1, 7, at(1)), Some(Some(&b"seven"[..])));
        // The next message takes its place.
        assert_eq!(d.receive(1, 8, at(2)), Received::New);
        assert_eq!(d.seen(&1, 7, at(3)), None);
        assert_eq!(d.seen(&1, 8, at(3)), Some(None));
        assert_eq!(d.store().mid(), Some(8));
        assert_eq!(d.stats().duplicates, 2);
        d.handle_timeout(at(2 + 247_000));
        assert_eq!(d.store().mid(), None);
    }
}
