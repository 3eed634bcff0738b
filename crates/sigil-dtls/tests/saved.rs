//! Saved associations ([`sigil_dtls::saved`]): an established PSK association (with and
//! without connection IDs) saved, encoded, decoded and restored on both sides keeps working
//! without a handshake; the write sequence reserved ahead; decoding refuses what this side did
//! not write; and power cuts between any two storage writes of a device never make it seal
//! two records under the same (key, nonce).

use core::time::Duration;
use sigil_crypto::RustCrypto;
use sigil_dtls::record::Records;
use sigil_dtls::saved::{MAX_ENCODED_LEN, VERSION};
use sigil_dtls::{
    Config, Connection, Credentials, Error, SavedAssociation, SavedError, ServerCredentials,
    Traffic,
};
use sigil_testkit::dtls::{at, server, Link, Pair, SENSOR_PSK};
use sigil_testkit::Seeded;
use std::collections::BTreeSet;

const PSK: Credentials<'static> = Credentials::Psk {
    identity: b"sensor-1",
    key: b"0123456789abcdef",
};
const DEVICE_KEY: &[u8] = b"device storage key, 32 bytes....";
const SERVER_KEY: &[u8] = b"server storage key, 32 bytes....";

/// A completed PSK handshake in memory, both ends as [`Traffic`].
fn established(cid: bool) -> (Traffic<RustCrypto>, Traffic<RustCrypto>) {
    let config = Config {
        connection_id: cid,
        ..Config::default()
    };
    let client = Connection::connect(
        RustCrypto,
        SENSOR_PSK,
        config,
        &mut Seeded::new(1),
        PSK,
        at(0),
    )
    .unwrap();
    let offer = ServerCredentials {
        psk: true,
        issue_session_ids: true,
        connection_id: if cid { &[0xc1, 0xd0, 7, 7] } else { &[] },
        ..ServerCredentials::NONE
    };
    let accept = server(SENSOR_PSK, Config::default(), offer, Seeded::new(2));
    let mut pair = Pair::new(client, accept, Link::PERFECT);
    assert!(pair.run_until_established(Duration::from_secs(60)));
    let (c, s) = pair.into_parts();
    let c = c.into_traffic().ok().expect("client established");
    let s = s.unwrap().into_traffic().ok().expect("server established");
    (c, s)
}

/// Sends `data` from `a` to `b`; returns the datagram and what `b` delivered.
fn deliver<C: sigil_crypto::CryptoProvider>(
    a: &mut Traffic<C>,
    b: &mut Traffic<C>,
    data: &[u8],
) -> Result<(Vec<u8>, Option<Vec<u8>>), Error> {
    a.send(data)?;
    let mut d = [0u8; 1500];
    let n = a.poll_transmit(at(0), &mut d).expect("a datagram");
    b.handle_datagram(at(0), &d[..n])?;
    let mut app = [0u8; 1500];
    let got = b.poll_app_data(&mut app).map(|m| app[..m].to_vec());
    Ok((d[..n].to_vec(), got))
}

fn sequence_of(datagram: &[u8], cid_len: usize) -> u64 {
    let rec = Records::with_cid(datagram, cid_len)
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(rec.header.epoch, 1);
    rec.header.sequence
}

/// Saves with `ahead`, "stores" the encoding, and lets the connection use the reservation.
fn checkpoint(t: &mut Traffic<RustCrypto>, key: &[u8], ahead: u64) -> Vec<u8> {
    let saved = t.save(ahead).unwrap();
    let mut buf = [0u8; MAX_ENCODED_LEN];
    let n = saved.encode(&RustCrypto, key, &mut buf).unwrap();
    assert_eq!(n, saved.encoded_len());
    t.persisted(&saved);
    buf[..n].to_vec()
}

fn restore(bytes: &[u8], key: &[u8]) -> Traffic<RustCrypto> {
    Traffic::restore(
        RustCrypto,
        SavedAssociation::decode(&RustCrypto, key, bytes).unwrap(),
    )
}

#[test]
fn both_sides_restored_keep_talking_without_a_handshake() {
    for cid in [false, true] {
        let (mut c, mut s) = established(cid);
        let c_bytes = checkpoint(&mut c, DEVICE_KEY, 16);
        let s_bytes = checkpoint(&mut s, SERVER_KEY, 16);
        let (_, got) = deliver(&mut c, &mut s, b"before").unwrap();
        assert_eq!(got.as_deref(), Some(&b"before"[..]));
        let _ = (c, s);

        let mut c = restore(&c_bytes, DEVICE_KEY);
        let mut s = restore(&s_bytes, SERVER_KEY);
        assert_eq!(
            c.psk_identity(),
            b"sensor-1",
            "the client's proven peer came back"
        );
        assert_eq!(s.psk_identity(), b"sensor-1", "the proven peer came back");
        assert_eq!(c.session().unwrap().id, s.session().unwrap().id);
        assert_eq!(s.connection_id().is_empty(), !cid);
        checkpoint(&mut c, DEVICE_KEY, 16);
        checkpoint(&mut s, SERVER_KEY, 16);
        let (d, got) = deliver(&mut c, &mut s, b"after").unwrap();
        assert_eq!(got.as_deref(), Some(&b"after"[..]));
        let cid_len = if cid { 4 } else { 0 };
        assert!(
            sequence_of(&d, cid_len) >= 16,
            "written from the reservation"
        );
        let (_, got) = deliver(&mut s, &mut c, b"ack").unwrap();
        assert_eq!(got.as_deref(), Some(&b"ack"[..]));
        assert_eq!(s.dropped() + c.dropped(), 0);
    }
}

#[test]
fn nothing_is_sealed_beyond_the_persisted_reservation() {
    let (mut c, mut s) = established(false);
    let bytes = checkpoint(&mut c, DEVICE_KEY, 3);
    let mut c = restore(&bytes, DEVICE_KEY);
    let start = c.core().next_write_sequence();
    assert_eq!(c.send(b"x"), Err(Error::ReservationExhausted));
    assert!(c.poll_transmit(at(0), &mut [0u8; 256]).is_none());
    // Saved but not yet persisted: still refused.
    let saved = c.save(2).unwrap();
    assert_eq!(saved.reserved_until(), start + 2);
    assert_eq!(c.send(b"x"), Err(Error::ReservationExhausted));
    c.persisted(&saved);
    assert_eq!(c.core().reserved_left(), 2);
    for _ in 0..2 {
        let (_, got) = deliver(&mut c, &mut s, b"x").unwrap();
        assert_eq!(got.as_deref(), Some(&b"x"[..]));
    }
    assert_eq!(c.send(b"x"), Err(Error::ReservationExhausted));
    assert!(c.is_established(), "a refusal is not a failure");
    // An older reservation never lowers the limit.
    c.persisted(&saved);
    assert_eq!(c.core().write_limit(), start + 2);
}

#[test]
fn a_restored_read_window_drops_replays() {
    let (mut c, mut s) = established(false);
    checkpoint(&mut c, DEVICE_KEY, 8);
    let (d, _) = deliver(&mut c, &mut s, b"one").unwrap();
    let s_bytes = checkpoint(&mut s, SERVER_KEY, 8);
    let mut s = restore(&s_bytes, SERVER_KEY);
    s.handle_datagram(at(0), &d).unwrap();
    assert!(s.poll_app_data(&mut [0u8; 64]).is_none());
    assert_eq!(s.dropped(), 1, "the replay was dropped");
}

/// Saves with a read mark `read_ahead` past the highest record taken, and persists it.
fn mark_checkpoint(t: &mut Traffic<RustCrypto>, key: &[u8], read_ahead: u64) -> Vec<u8> {
    let saved = t.save_marking_reads(16, read_ahead).unwrap();
    let mut buf = [0u8; MAX_ENCODED_LEN];
    let n = saved.encode(&RustCrypto, key, &mut buf).unwrap();
    assert_eq!(n, saved.encoded_len());
    t.persisted(&saved);
    buf[..n].to_vec()
}

/// A side that keeps a read mark (stored before it acts on a record) takes none of the
/// records it acted on again after a restore, whenever the power was cut; the peer's next
/// record is taken. Saved without a mark, a record taken after the save passes again.
#[test]
fn a_read_mark_keeps_records_acted_on_from_passing_again_after_a_restore() {
    let (mut c, mut s) = established(true);
    checkpoint(&mut c, DEVICE_KEY, 64);
    let unmarked = checkpoint(&mut s, SERVER_KEY, 16);
    let mut stored = mark_checkpoint(&mut s, SERVER_KEY, 0);
    assert!(!s.core().read_mark_passed());
    let mut recorded = vec![];
    for i in 0..5u8 {
        let (d, got) = deliver(&mut c, &mut s, &[i]).unwrap();
        assert_eq!(got.as_deref(), Some(&[i][..]));
        assert!(s.core().read_mark_passed(), "a record above the mark");
        stored = mark_checkpoint(&mut s, SERVER_KEY, 0);
        assert!(!s.core().read_mark_passed());
        recorded.push(d);
    }
    let saved = SavedAssociation::decode(&RustCrypto, SERVER_KEY, &stored).unwrap();
    assert_eq!(saved.read_mark(), s.core().highest_read());
    let mut r = restore(&stored, SERVER_KEY);
    for d in &recorded {
        r.handle_datagram(at(0), d).unwrap();
        assert!(r.poll_app_data(&mut [0u8; 64]).is_none());
    }
    assert_eq!(r.dropped(), 5, "every recorded record dropped");
    let (_, got) = deliver(&mut c, &mut r, b"next").unwrap();
    assert_eq!(
        got.as_deref(),
        Some(&b"next"[..]),
        "the peer's next record taken"
    );
    assert!(r.core().read_mark_passed());

    // Without a mark the window is the one of the save: the records since pass again.
    let mut old = restore(&unmarked, SERVER_KEY);
    assert_eq!(
        SavedAssociation::decode(&RustCrypto, SERVER_KEY, &unmarked)
            .unwrap()
            .read_mark(),
        None
    );
    old.handle_datagram(at(0), &recorded[0]).unwrap();
    assert!(old.poll_app_data(&mut [0u8; 64]).is_some());

    // A mark reserved ahead: the peer's records up to it are dropped after a restore.
    let ahead = mark_checkpoint(&mut r, SERVER_KEY, 3);
    let mut r = restore(&ahead, SERVER_KEY);
    let mut taken = 0;
    for i in 0..4u8 {
        let (_, got) = deliver(&mut c, &mut r, &[i]).unwrap();
        taken += usize::from(got.is_some());
    }
    assert_eq!((taken, r.dropped()), (1, 3));
}

/// A read mark below a record the window holds cannot come from this side's encoder.
#[test]
fn a_read_mark_below_the_window_is_refused() {
    let (mut c, mut s) = established(false);
    checkpoint(&mut c, DEVICE_KEY, 8);
    deliver(&mut c, &mut s, b"a").unwrap();
    deliver(&mut c, &mut s, b"b").unwrap();
    let bytes = mark_checkpoint(&mut s, SERVER_KEY, 0);
    // The mark is the last 8 bytes before the MAC: lower it by one and MAC again.
    let body_len = bytes.len() - 32;
    let mut body = bytes[..body_len].to_vec();
    let last = body_len - 1;
    body[last] = body[last].wrapping_sub(1);
    let mut forged = body.clone();
    forged.extend_from_slice(&sigil_crypto::CryptoProvider::hmac_sha256(
        &RustCrypto,
        SERVER_KEY,
        &[b"sigil-dtls saved association", &body],
    ));
    assert_eq!(
        SavedAssociation::decode(&RustCrypto, SERVER_KEY, &forged).map(|_| ()),
        Err(SavedError::Field("read mark"))
    );
}

#[test]
fn decode_refuses_what_this_side_did_not_write() {
    let (mut c, _s) = established(true);
    let bytes = checkpoint(&mut c, DEVICE_KEY, 8);
    let d = |b: &[u8], k: &[u8]| SavedAssociation::decode(&RustCrypto, k, b).map(|_| ());
    assert_eq!(d(&bytes, DEVICE_KEY), Ok(()));
    assert_eq!(d(&bytes, SERVER_KEY), Err(SavedError::Mac));
    assert_eq!(d(&bytes, b"short"), Err(SavedError::StorageKey));
    for i in 5..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 0x40;
        assert_eq!(d(&b, DEVICE_KEY), Err(SavedError::Mac), "byte {i} altered");
    }
    for n in 0..bytes.len() {
        assert!(d(&bytes[..n], DEVICE_KEY).is_err(), "cut at {n}");
    }
    let mut b = bytes.clone();
    b[0] = b'X';
    assert_eq!(d(&b, DEVICE_KEY), Err(SavedError::Magic));
    let mut b = bytes.clone();
    b[4] = VERSION + 1;
    assert_eq!(d(&b, DEVICE_KEY), Err(SavedError::Version(VERSION + 1)));
    let mut b = bytes.clone();
    b.push(0);
    assert!(d(&b, DEVICE_KEY).is_err(), "a trailing byte");
    let saved = SavedAssociation::decode(&RustCrypto, DEVICE_KEY, &bytes).unwrap();
    assert_eq!(
        saved.encode(&RustCrypto, DEVICE_KEY, &mut [0u8; 40]),
        Err(SavedError::BufferTooSmall)
    );
    let mut again = [0u8; MAX_ENCODED_LEN];
    let n = saved.encode(&RustCrypto, DEVICE_KEY, &mut again).unwrap();
    assert_eq!(
        &again[..n],
        &bytes[..],
        "decode then encode gives the same bytes"
    );
}

/// A field inside a correctly MACed record that no encoder writes: refused by name.
#[test]
fn decode_checks_fields_under_a_valid_mac() {
    use sigil_crypto::CryptoProvider;
    let (mut c, _s) = established(false);
    let bytes = checkpoint(&mut c, DEVICE_KEY, 8);
    let remac = |mut b: Vec<u8>| {
        let body = b.len() - 32;
        let tag =
            RustCrypto.hmac_sha256(DEVICE_KEY, &[b"sigil-dtls saved association", &b[..body]]);
        b[body..].copy_from_slice(&tag);
        b
    };
    let d = |b: &[u8]| SavedAssociation::decode(&RustCrypto, DEVICE_KEY, b).map(|_| ());
    assert_eq!(d(&remac(bytes.clone())), Ok(()));
    let mut b = bytes.clone();
    b[5..7].copy_from_slice(&0x1234u16.to_be_bytes());
    assert_eq!(d(&remac(b)), Err(SavedError::UnknownSuite(0x1234)));
    // Own connection ID length (after header 7 and keys 40) beyond 16.
    let mut b = bytes.clone();
    b[47] = 17;
    assert_eq!(d(&remac(b)), Err(SavedError::Field("own connection ID")));
    // Peer kind after two empty CIDs.
    let mut b = bytes.clone();
    b[49] = 9;
    assert_eq!(d(&remac(b)), Err(SavedError::Field("peer")));
}

/// A device that sends readings and checkpoints its association whenever its reservation
/// runs out; power is cut at storage write `cut` (before it reaches storage, or after). It
/// restarts from what storage holds: the association if one was stored, else a new
/// handshake. Every record the server accepted has a sequence number never used before under
/// that association's key.
#[test]
fn power_cuts_between_storage_writes_never_reuse_a_nonce() {
    const AHEAD: u64 = 4;
    const READINGS: usize = 20;
    for cut in 0..5 {
        for persisted_before_cut in [false, true] {
            let (mut c, mut s) = established(false);
            // Storage: the device's last association record.
            let mut storage: Option<Vec<u8>> = None;
            let mut writes = 0;
            let mut powered = true;
            let mut seen: BTreeSet<u64> = BTreeSet::new();
            let mut handshakes = 1;
            let mut delivered = 0;
            // A fresh association is checkpointed before its first reading.
            let mut fresh = true;
            let mut cuts = 0;
            while delivered < READINGS {
                if !powered {
                    // Restart: the device's RAM is gone.
                    match &storage {
                        Some(b) => c = restore(b, DEVICE_KEY),
                        None => {
                            // Clean restart: a new handshake, new keys.
                            let (nc, ns) = established(false);
                            c = nc;
                            s = ns;
                            seen.clear();
                            handshakes += 1;
                            fresh = true;
                        }
                    }
                    powered = true;
                }
                if fresh || c.core().reserved_left() == 0 {
                    fresh = false;
                    let saved = c.save(AHEAD).unwrap();
                    let mut buf = [0u8; MAX_ENCODED_LEN];
                    let n = saved.encode(&RustCrypto, DEVICE_KEY, &mut buf).unwrap();
                    if writes == cut && !persisted_before_cut {
                        writes += 1;
                        cuts += 1;
                        powered = false;
                        continue;
                    }
                    storage = Some(buf[..n].to_vec());
                    writes += 1;
                    if writes - 1 == cut && persisted_before_cut {
                        cuts += 1;
                        powered = false;
                        continue;
                    }
                    c.persisted(&saved);
                }
                let (d, got) = deliver(&mut c, &mut s, b"reading").unwrap();
                let seq = sequence_of(&d, 0);
                assert!(seen.insert(seq), "cut {cut}: sequence {seq} sealed twice");
                assert_eq!(got.as_deref(), Some(&b"reading"[..]), "cut {cut}");
                delivered += 1;
            }
            assert_eq!(cuts, 1, "cut {cut}: the power was cut");
            assert_eq!(s.dropped(), 0, "cut {cut}: the server dropped nothing");
            // The first write comes right after the handshake: a cut there restarts cleanly
            // (before it reached storage) or resumes; every later cut resumes.
            let expected = if cut == 0 && !persisted_before_cut {
                2
            } else {
                1
            };
            assert_eq!(handshakes, expected, "cut {cut} {persisted_before_cut}");
        }
    }
}

#[test]
fn saved_association_fits_its_stated_bounds() {
    // The bound the module documents (`MAX_ENCODED_LEN`) and the in-memory size.
    assert_eq!(MAX_ENCODED_LEN, 390);
    // With `rsa` a `Peer` holds an RSA key inline (RSA peers are never saved, but the type
    // has room for one), so the in-memory bound is that of builds without it.
    #[cfg(not(feature = "rsa"))]
    assert!(core::mem::size_of::<SavedAssociation>() <= 512);
}

/// A restore is not a handshake: a PSK that was replaced, or an identity that is gone, must
/// not come back with the saved association.
#[test]
fn a_saved_peer_is_rechecked_against_the_current_trust() {
    use sigil_testkit::dtls::OnePsk;
    let (_c, mut s) = established(false);
    let bytes = checkpoint(&mut s, SERVER_KEY, 8);
    let saved = SavedAssociation::decode(&RustCrypto, SERVER_KEY, &bytes).unwrap();
    assert!(saved.still_trusted(&RustCrypto, &SENSOR_PSK, false));
    let replaced = OnePsk {
        identity: b"sensor-1",
        key: b"another key 0123",
    };
    assert!(!saved.still_trusted(&RustCrypto, &replaced, false));
    let gone = OnePsk {
        identity: b"sensor-2",
        key: b"0123456789abcdef",
    };
    assert!(!saved.still_trusted(&RustCrypto, &gone, false));
}
