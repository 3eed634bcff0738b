//! Publishing: a reading signed (COSE or JWS) with its freshness, to `/ps/N/<href>`.

use super::register::require_option;
use super::{
    Device, DeviceError, Event, Exchange, PublishOutcome, MAX_DATAGRAM, MAX_LOCATION, MAX_SENML,
};
use crate::storage::{DeviceStorage, Reservation};
use sigil_coap::message::option;
use sigil_coap::{Code, MessageBuilder, MessageType};
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
        if !self.is_registered() {
            return Err(DeviceError::NotRegistered);
        }
        if !self.can_publish() {
            return Err(DeviceError::Busy);
        }
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
        self.last_senml[..n].copy_from_slice(&senml_buf[..n]);
        self.last_senml_len = n;
        self.last_timestamp = timestamp;
        self.republish = false;
        self.send_reading(now, storage, false)
    }

    pub(super) fn publish_again<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        self.republish = false;
        if self.last_senml_len > 0 {
            // Confirmable, so a reading sent again is known to have arrived.
            self.send_reading(now, storage, true)?;
        }
        Ok(())
    }

    /// Signs the pending SenML pack into `out`. Not inlined, so its scratch buffer is not
    /// part of the caller's frame.
    #[inline(never)]
    fn sign_reading(&self, fresh: &Freshness, out: &mut [u8]) -> Result<usize, DeviceError> {
        let mut scratch = [0u8; MAX_SENML + 128];
        reading::sign_reading(
            &self.crypto,
            &self.key,
            &self.identity,
            self.config.format,
            fresh,
            &self.last_senml[..self.last_senml_len],
            &mut scratch,
            out,
        )
        .map_err(|_| DeviceError::Encoding)
    }

    fn send_reading<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        confirm: bool,
    ) -> Result<u64, DeviceError> {
        let seq = self.counter.next(&mut Reservation(storage))?;
        let fresh = Freshness {
            seq,
            lsb_bits: self.config.lsb_bits,
            timestamp: self.last_timestamp,
        };
        let mut reading = [0u8; MAX_DATAGRAM];
        let sn = self.sign_reading(&fresh, &mut reading)?;
        self.publishes = self.publishes.wrapping_add(1);
        let confirmable = confirm
            || (self.config.confirm_every != 0 && self.publishes % self.config.confirm_every == 0);
        let mut loc = [0u8; MAX_LOCATION];
        let ll = self.location_len;
        loc[..ll].copy_from_slice(&self.location[..ll]);
        let href = self.config.resource.href;
        let cf = self.config.format.content_format();
        let signed = self.config.require_signed_answers;
        let mtype = if confirmable {
            MessageType::Confirmable
        } else {
            MessageType::NonConfirmable
        };
        self.begin(
            now,
            Exchange::Publish { seq },
            confirmable,
            |buf, mid, token| {
                let mut b = MessageBuilder::new(buf, mtype, Code::PUT, mid, token)
                    .map_err(|_| DeviceError::TooLarge)?;
                b.option(option::URI_PATH, b"ps")
                    .map_err(|_| DeviceError::TooLarge)?;
                // The topic of registration rd/N is ps/N/<href>.
                if let Some(n) = loc[..ll].split(|c| *c == b'/').nth(1) {
                    b.option(option::URI_PATH, n)
                        .map_err(|_| DeviceError::TooLarge)?;
                }
                b.option(option::URI_PATH, href.as_bytes())
                    .map_err(|_| DeviceError::TooLarge)?;
                b.uint_option(option::CONTENT_FORMAT, u32::from(cf))
                    .map_err(|_| DeviceError::TooLarge)?;
                require_option(&mut b, signed)?;
                b.finish_with_payload(&reading[..sn])
                    .map_err(|_| DeviceError::TooLarge)
            },
        )?;
        if !confirmable {
            self.push_event(Event::Published {
                seq,
                outcome: PublishOutcome::Sent,
            });
        }
        Ok(seq)
    }
}
