//! What the device keeps across reboots: its key, its sequence reservation and its pairing.

use crate::pairing::PairingStorage;
use sigil_ace::Pairing;
use sigil_crypto::SecretKey;

/// Persistent storage of the device. Writes must be durable when they return.
pub trait DeviceStorage {
    type Error: core::fmt::Debug;
    fn load_key(&mut self) -> Result<Option<SecretKey>, Self::Error>;
    fn store_key(&mut self, key: &SecretKey) -> Result<(), Self::Error>;
    fn load_reservation(&mut self) -> Result<Option<u64>, Self::Error>;
    fn store_reservation(&mut self, reserved_until: u64) -> Result<(), Self::Error>;
    /// Factory reset: forget the key and the reservation (and the pairing, where the storage
    /// keeps one).
    fn erase(&mut self) -> Result<(), Self::Error>;
}

/// Storage in RAM, for tests and emulation.
#[derive(Clone, Debug, Default)]
pub struct MemoryStorage {
    pub key: Option<SecretKey>,
    pub reservation: Option<u64>,
    /// Number of reservation writes (what flash wear would count).
    pub reservation_writes: u32,
    pub pairing: Option<Pairing>,
}

impl DeviceStorage for MemoryStorage {
    type Error = core::convert::Infallible;
    fn load_key(&mut self) -> Result<Option<SecretKey>, Self::Error> {
        Ok(self.key.clone())
    }
    fn store_key(&mut self, key: &SecretKey) -> Result<(), Self::Error> {
        self.key = Some(key.clone());
        Ok(())
    }
    fn load_reservation(&mut self) -> Result<Option<u64>, Self::Error> {
        Ok(self.reservation)
    }
    fn store_reservation(&mut self, v: u64) -> Result<(), Self::Error> {
        self.reservation = Some(v);
        self.reservation_writes += 1;
        Ok(())
    }
    fn erase(&mut self) -> Result<(), Self::Error> {
        self.key = None;
        self.reservation = None;
        self.pairing = None;
        Ok(())
    }
}

impl PairingStorage for MemoryStorage {
    fn load_pairing(&mut self) -> Result<Option<Pairing>, Self::Error> {
        Ok(self.pairing)
    }
    fn store_pairing(&mut self, pairing: &Pairing) -> Result<(), Self::Error> {
        self.pairing = Some(*pairing);
        Ok(())
    }
}

/// Adapts [`DeviceStorage`] to the freshness crate's store.
pub(crate) struct Reservation<'a, S>(pub &'a mut S);

impl<S: DeviceStorage> sigil_freshness::SequenceStore for Reservation<'_, S> {
    type Error = S::Error;
    fn load(&mut self) -> Result<Option<u64>, S::Error> {
        self.0.load_reservation()
    }
    fn store(&mut self, v: u64) -> Result<(), S::Error> {
        self.0.store_reservation(v)
    }
}
