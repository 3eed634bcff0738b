//! Pairing on the device (RFC 8387 §4.1): a message is applied exactly once, across reboots
//! and power cuts, and refused with a named reason when it is for another device, replayed,
//! tampered or signed by a server the device does not trust.

use sigil_ace::{seal_pairing, PairingContent, PairingError, MAX_PAIRING_LEN};
use sigil_crypto::{CryptoProvider, PublicKey, RustCrypto, SecretKey, SignatureAlgorithm};
use sigil_device::pairing::{decode_record, encode_record};
use sigil_device::{
    Device, DeviceConfig, DeviceStorage, MemoryStorage, Pairing, PairingRefusal, PairingStorage,
};
use sigil_identity::Identity;
use sigil_testkit::{Counter, Fixed};

fn config() -> DeviceConfig {
    DeviceConfig {
        algorithm: SignatureAlgorithm::EcdsaP256,
        ..DeviceConfig::default()
    }
}

fn boot<S: DeviceStorage>(storage: &mut S, seed: u8) -> Device<RustCrypto> {
    Device::boot(RustCrypto, config(), storage, &mut Fixed(seed), &[], &[]).unwrap()
}

struct Server {
    key: SecretKey,
    identity: Identity,
}

fn server(seed: u8) -> Server {
    let key = RustCrypto
        .generate(SignatureAlgorithm::Ed25519, &mut Fixed(seed))
        .unwrap();
    let public = RustCrypto.public_key(&key).unwrap();
    Server {
        identity: Identity::of_key(&RustCrypto, &public, b"").unwrap(),
        key,
    }
}

fn message(device: &Device<RustCrypto>, server: &Server, serial: u64) -> Vec<u8> {
    message_to(device.public_key(), *device.identity(), server, serial)
}

fn message_to(key: &PublicKey, identity: Identity, server: &Server, serial: u64) -> Vec<u8> {
    let content = PairingContent {
        device: identity,
        serial,
        server: server.identity,
        server_other: b"",
        server_uri: Some("coaps://server.example"),
        group: Identity::from_bytes([0x0a; 16]),
        subscriber: Identity::from_bytes([0x0b; 16]),
    };
    let mut out = [0u8; MAX_PAIRING_LEN];
    let n = seal_pairing(
        &content,
        key,
        &server.key,
        &RustCrypto,
        &mut Counter {
            next: serial as u8,
            step: 3,
        },
        &mut out,
    )
    .unwrap();
    out[..n].to_vec()
}

#[test]
fn applied_once_then_replay_and_second_pairing_are_refused() {
    let mut st = MemoryStorage::default();
    let mut d = boot(&mut st, 1);
    let server = server(9);
    let msg = message(&d, &server, 1);
    let p = d.apply_pairing(&mut st, &msg, None).unwrap();
    assert_eq!(p.server, server.identity);
    assert_eq!(p.group, Identity::from_bytes([0x0a; 16]));
    assert_eq!(p.subscriber, Identity::from_bytes([0x0b; 16]));
    assert_eq!(p.server_uri(), Some("coaps://server.example"));
    assert_eq!(d.pairing(), Some(&p));
    assert_eq!(
        d.apply_pairing(&mut st, &msg, None),
        Err(PairingRefusal::Replayed { serial: 1 })
    );
    assert_eq!(
        d.apply_pairing(&mut st, &message(&d, &server, 2), None),
        Err(PairingRefusal::AlreadyPaired {
            server: server.identity,
            serial: 1
        })
    );
    // Another server, once the device trusts this one.
    assert_eq!(
        d.apply_pairing(&mut st, &message(&d, &self::server(10), 3), None),
        Err(PairingRefusal::Invalid(PairingError::UntrustedServer))
    );
    assert_eq!(d.stats.pairings_refused, 3);
    // After a reboot, from storage.
    let mut d = boot(&mut st, 1);
    assert_eq!(d.restore_pairing(&mut st).unwrap(), Some(p));
    assert_eq!(
        d.apply_pairing(&mut st, &msg, None),
        Err(PairingRefusal::Replayed { serial: 1 })
    );
}

#[test]
fn refused_for_another_device_tampered_or_a_configured_server_mismatch() {
    let mut st = MemoryStorage::default();
    let mut d = boot(&mut st, 1);
    let mut other_st = MemoryStorage::default();
    let other = boot(&mut other_st, 2);
    let server = server(9);
    assert_eq!(
        d.apply_pairing(&mut st, &message(&other, &server, 1), None),
        Err(PairingRefusal::Invalid(PairingError::NotForThisDevice))
    );
    let mut tampered = message(&d, &server, 1);
    let at = tampered.len() / 2;
    tampered[at] ^= 0x20;
    assert!(matches!(
        d.apply_pairing(&mut st, &tampered, None),
        Err(PairingRefusal::Invalid(
            PairingError::BadTag | PairingError::Malformed(_) | PairingError::Cbor(_)
        ))
    ));
    let installed = Identity::from_bytes([0x77; 16]);
    assert_eq!(
        d.apply_pairing(&mut st, &message(&d, &server, 1), Some(&installed)),
        Err(PairingRefusal::Invalid(PairingError::UntrustedServer))
    );
    assert_eq!(st.pairing, None, "nothing refused was stored");
    assert!(d
        .apply_pairing(&mut st, &message(&d, &server, 1), Some(&server.identity))
        .is_ok());
}

/// An Ed25519 device (the default algorithm) is paired over X25519 from its own key, once,
/// and a message sealed to a P-256 key under its identity is refused.
#[test]
fn an_ed25519_device_is_paired_with_its_own_key() {
    let mut st = MemoryStorage::default();
    let mut d = Device::boot(
        RustCrypto,
        DeviceConfig::default(),
        &mut st,
        &mut Fixed(1),
        &[],
        &[],
    )
    .unwrap();
    assert_eq!(d.public_key().algorithm(), SignatureAlgorithm::Ed25519);
    let server = server(9);
    let p256 = RustCrypto
        .generate(SignatureAlgorithm::EcdsaP256, &mut Fixed(3))
        .unwrap();
    let p256 = RustCrypto.public_key(&p256).unwrap();
    assert!(matches!(
        d.apply_pairing(&mut st, &message_to(&p256, *d.identity(), &server, 1), None),
        Err(PairingRefusal::Invalid(PairingError::Malformed(_)))
    ));
    let msg = message(&d, &server, 2);
    let p = d.apply_pairing(&mut st, &msg, None).unwrap();
    assert_eq!(p.server, server.identity);
    assert_eq!(p.server_uri(), Some("coaps://server.example"));
    assert_eq!(
        d.apply_pairing(&mut st, &msg, None),
        Err(PairingRefusal::Replayed { serial: 2 })
    );
}

/// Where the power goes: before the pairing write is durable, or right after it, before the
/// device could act on it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    BeforeWrite,
    AfterWrite,
}

/// Memory storage whose pairing write loses power once.
struct PowerCut {
    inner: MemoryStorage,
    cut: Option<Cut>,
}

#[derive(Debug)]
struct PowerLost;

impl DeviceStorage for PowerCut {
    type Error = PowerLost;
    fn load_key(&mut self) -> Result<Option<SecretKey>, PowerLost> {
        Ok(self.inner.key.clone())
    }
    fn store_key(&mut self, key: &SecretKey) -> Result<(), PowerLost> {
        self.inner.key = Some(key.clone());
        Ok(())
    }
    fn load_reservation(&mut self) -> Result<Option<u64>, PowerLost> {
        Ok(self.inner.reservation)
    }
    fn store_reservation(&mut self, v: u64) -> Result<(), PowerLost> {
        self.inner.reservation = Some(v);
        Ok(())
    }
    fn erase(&mut self) -> Result<(), PowerLost> {
        self.inner = MemoryStorage::default();
        Ok(())
    }
}

impl PairingStorage for PowerCut {
    fn load_pairing(&mut self) -> Result<Option<Pairing>, PowerLost> {
        Ok(self.inner.pairing)
    }
    fn store_pairing(&mut self, p: &Pairing) -> Result<(), PowerLost> {
        match self.cut.take() {
            Some(Cut::BeforeWrite) => Err(PowerLost),
            Some(Cut::AfterWrite) => {
                self.inner.pairing = Some(*p);
                Err(PowerLost)
            }
            None => {
                self.inner.pairing = Some(*p);
                Ok(())
            }
        }
    }
}

#[test]
fn a_power_cut_before_the_write_leaves_the_device_unpaired_and_the_message_applies_once() {
    let mut st = PowerCut {
        inner: MemoryStorage::default(),
        cut: Some(Cut::BeforeWrite),
    };
    let mut d = boot(&mut st, 1);
    let server = server(9);
    let msg = message(&d, &server, 4);
    assert_eq!(
        d.apply_pairing(&mut st, &msg, None),
        Err(PairingRefusal::Storage)
    );
    assert_eq!(d.pairing(), None);
    let mut d = boot(&mut st, 1);
    assert_eq!(d.restore_pairing(&mut st).unwrap(), None);
    assert_eq!(d.apply_pairing(&mut st, &msg, None).unwrap().serial, 4);
    assert_eq!(
        d.apply_pairing(&mut st, &msg, None),
        Err(PairingRefusal::Replayed { serial: 4 })
    );
}

#[test]
fn a_power_cut_after_the_write_keeps_the_pairing_and_refuses_the_message_again() {
    let mut st = PowerCut {
        inner: MemoryStorage::default(),
        cut: Some(Cut::AfterWrite),
    };
    let mut d = boot(&mut st, 1);
    let server = server(9);
    let msg = message(&d, &server, 5);
    assert_eq!(
        d.apply_pairing(&mut st, &msg, None),
        Err(PairingRefusal::Storage)
    );
    let mut d = boot(&mut st, 1);
    assert_eq!(
        d.restore_pairing(&mut st).unwrap().map(|p| p.serial),
        Some(5)
    );
    assert_eq!(
        d.apply_pairing(&mut st, &msg, None),
        Err(PairingRefusal::Replayed { serial: 5 })
    );
}

#[test]
fn a_factory_reset_unpairs_and_the_new_identity_can_be_paired() {
    let mut st = MemoryStorage::default();
    let mut d = boot(&mut st, 1);
    let server = server(9);
    let old = message(&d, &server, 1);
    d.apply_pairing(&mut st, &old, None).unwrap();
    st.erase().unwrap();
    let mut d = boot(&mut st, 2);
    assert_eq!(d.restore_pairing(&mut st).unwrap(), None);
    assert_eq!(
        d.apply_pairing(&mut st, &old, None),
        Err(PairingRefusal::Invalid(PairingError::NotForThisDevice))
    );
    assert!(d
        .apply_pairing(&mut st, &message(&d, &server, 2), None)
        .is_ok());
}

#[test]
fn the_stored_record_round_trips() {
    let mut st = MemoryStorage::default();
    let mut d = boot(&mut st, 1);
    let p = d
        .apply_pairing(&mut st, &message(&d, &server(9), 77), None)
        .unwrap();
    let r = encode_record(&p);
    assert_eq!(decode_record(&r), Some(p));
    assert_eq!(decode_record(&r[1..]), None);
    let mut bad = r;
    bad[0] = 9;
    assert_eq!(decode_record(&bad), None);
}

/// Signed answers on coap:// are checked with the paired server's key (RFC 8387 §4.1), also
/// after a reboot; a key given by the integrator takes its place.
#[test]
fn signed_answers_are_checked_with_the_paired_servers_key() {
    let mut st = MemoryStorage::default();
    let mut d = boot(&mut st, 1);
    assert_eq!(d.answer_key(), None);
    let server = server(9);
    let server_key = RustCrypto.public_key(&server.key).unwrap();
    d.apply_pairing(&mut st, &message(&d, &server, 1), None)
        .unwrap();
    assert_eq!(d.answer_key(), Some(server_key));
    let mut d = boot(&mut st, 1);
    assert_eq!(d.answer_key(), None);
    d.restore_pairing(&mut st).unwrap();
    assert_eq!(d.answer_key(), Some(server_key));
    let other = RustCrypto.public_key(&self::server(10).key).unwrap();
    d.trust_server_key(other);
    assert_eq!(d.answer_key(), Some(other));
}
