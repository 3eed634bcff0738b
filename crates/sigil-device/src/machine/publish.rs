//! Publishing: a reading signed (COSE or JWS) with its freshness, to `/ps/N/<href>`.

use super::{Device, DeviceError, MAX_DATAGRAM};
use crate::exchange::{Put, MAX_SENML};
use crate::storage::{DeviceStorage, Reservation};
use sigil_crypto::CryptoProvider;
use sigil_objects::senml::{self, Record};
use sigil_objects::{reading, Freshness, ReadingFormat};
use sigil_time::{Instant, UnixTime};

impl<C: CryptoProvider> Device<C> {
    /// Signs `records` as one reading and queues it for the broker. `timestamp` goes into the
    /// signed header when the device trusts its clock (a time before 1970 is left out).
    /// Returns the sequence number.
    pub fn publish<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        records: &[Record<'_>],
        timestamp: Option<UnixTime>,
    ) -> Result<u64, DeviceError> {
        let timestamp = timestamp.and_then(|t| u64::try_from(t.as_secs()).ok());
        self.ep.check_publish()?;
        let mut senml_buf = [0u8; MAX_SENML];
        let n = match self.config.format {
            ReadingFormat::Cose => senml::encode_cbor(records, &mut senml_buf),
            #[cfg(feature = "jws")]
            ReadingFormat::Jws => senml::encode_json(records, &mut senml_buf),
            // SenML-JSON needs float formatting (about 10 kB of flash on Cortex-M).
            #[cfg(not(feature = "jws"))]
            ReadingFormat::Jws => return Err(DeviceError::Config),
        }
        .map_err(|_| DeviceError::TooLarge)?;
        self.ep.keep_reading(&senml_buf[..n], timestamp)?;
        self.send_reading(now, storage, false)
    }

    /// Signs the pending SenML pack into `out`. Not inlined, so its scratch buffer is not
    /// part of the caller's frame.
    #[inline(never)]
    fn sign_reading(&self, fresh: &Freshness, out: &mut [u8]) -> Result<usize, DeviceError> {
        let mut scratch = [0u8; MAX_SENML + 128];
        let (senml, _) = self.ep.last_reading();
        reading::sign_reading(
            &self.crypto,
            &self.key,
            &self.identity,
            self.config.format,
            fresh,
            senml,
            &mut scratch,
            out,
        )
        .map_err(|_| DeviceError::Encoding)
    }

    pub(super) fn send_reading<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        confirm: bool,
    ) -> Result<u64, DeviceError> {
        let seq = self.counter.next(&mut Reservation(storage))?;
        let fresh = Freshness {
            seq,
            lsb_bits: self.config.lsb_bits,
            timestamp: self.ep.last_reading().1,
        };
        let mut reading = [0u8; MAX_DATAGRAM];
        let sn = self.sign_reading(&fresh, &mut reading)?;
        let put = Put {
            href: self.config.resource.href,
            content_format: self.config.format.content_format(),
            confirm_every: self.config.confirm_every,
            require_signed: self.config.require_signed_answers,
        };
        let crypto = &self.crypto;
        self.ep
            .send_reading(crypto, now, seq, confirm, put, &reading[..sn])?;
        Ok(seq)
    }
}
