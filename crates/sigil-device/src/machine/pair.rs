//! Pairing (RFC 8387 §4.1): a device applies one pairing message, once, and keeps it.

use super::{Device, DeviceError};
use crate::pairing::{PairingRefusal, PairingStorage};
use sigil_crypto::CryptoProvider;
use sigil_identity::Identity;

impl<C: CryptoProvider> Device<C> {
    /// The pairing this device applied or restored, if any (RFC 8387 §4.1).
    pub fn pairing(&self) -> Option<&sigil_ace::Pairing> {
        self.pairing.as_ref()
    }

    /// Reads the pairing kept in `storage` (after [`Device::boot`]), so [`Device::pairing`]
    /// answers from the first moment.
    pub fn restore_pairing<S: PairingStorage>(
        &mut self,
        storage: &mut S,
    ) -> Result<Option<sigil_ace::Pairing>, DeviceError> {
        self.pairing = storage.load_pairing().map_err(|_| DeviceError::Storage)?;
        Ok(self.pairing)
    }

    /// Applies a pairing message (RFC 8387 §4.1) exactly once: it must be for this device,
    /// decrypt under its key, and be signed by the server it names; if `configured_server`
    /// is given (the identity fed at installation), by that server. A device already paired
    /// refuses every pairing message, its own as a replay. The pairing is one storage
    /// write; until it returns, nothing was applied.
    pub fn apply_pairing<S: PairingStorage>(
        &mut self,
        storage: &mut S,
        message: &[u8],
        configured_server: Option<&Identity>,
    ) -> Result<sigil_ace::Pairing, PairingRefusal> {
        let result = self.try_pairing(storage, message, configured_server);
        if result.is_err() {
            self.stats.pairings_refused = self.stats.pairings_refused.saturating_add(1);
        }
        result
    }

    fn try_pairing<S: PairingStorage>(
        &mut self,
        storage: &mut S,
        message: &[u8],
        configured_server: Option<&Identity>,
    ) -> Result<sigil_ace::Pairing, PairingRefusal> {
        let stored = storage
            .load_pairing()
            .map_err(|_| PairingRefusal::Storage)?;
        let trusted = stored.as_ref().map(|p| &p.server).or(configured_server);
        let pairing =
            sigil_ace::open_pairing(message, &self.key, &self.identity, trusted, &self.crypto)
                .map_err(PairingRefusal::Invalid)?;
        if let Some(stored) = stored {
            self.pairing = Some(stored);
            return Err(if stored.serial == pairing.serial {
                PairingRefusal::Replayed {
                    serial: pairing.serial,
                }
            } else {
                PairingRefusal::AlreadyPaired {
                    server: stored.server,
                    serial: stored.serial,
                }
            });
        }
        storage
            .store_pairing(&pairing)
            .map_err(|_| PairingRefusal::Storage)?;
        self.pairing = Some(pairing);
        Ok(pairing)
    }
}
