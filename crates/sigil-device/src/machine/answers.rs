//! What comes back: acknowledgements, Resets, answers (checked against the trusted server's
//! key when signed answers are required), and what a failed exchange leads to (back-off,
//! re-registration, a reading published again).

use super::{Device, DeviceError, Exchange, MAX_REG_PAYLOAD};
use crate::exchange::Location;
use crate::storage::DeviceStorage;
use sigil_coap::exchange::client::RequestId;
use sigil_coap::{Code, Message};
use sigil_crypto::CryptoProvider;
use sigil_objects::answer::{self, Answer, AnswerError, RequestDigest};
use sigil_time::Instant;

impl<C: CryptoProvider> Device<C> {
    /// Feeds one received datagram. Malformed or unexpected input is counted and ignored.
    pub fn handle_datagram<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        datagram: &[u8],
    ) -> Result<(), DeviceError> {
        let resets = !self.config.require_signed_answers;
        let lifetime = self.config.lifetime;
        let stats = &mut self.stats;
        match self.ep.receive(now, datagram, stats, resets, lifetime) {
            Some((msg, id)) => self.on_response(now, storage, &msg, id),
            None => Ok(()),
        }
    }

    /// Checks the signature of `msg`, an answer to request `id`, under the trusted server key.
    #[inline(never)]
    fn check_answer(&self, id: RequestId, msg: &Message<'_>) -> Result<(), AnswerError> {
        let key = self.answer_key().ok_or(AnswerError::BadSignature)?;
        let (Some(o), Some(sent)) = (self.ep.requests.get(id), self.ep.requests.bytes(id)) else {
            return Err(AnswerError::BadSignature);
        };
        let sent = Message::parse(sent).map_err(|_| AnswerError::BadSignature)?;
        let options = sent.options().map(|x| (x.number, x.value));
        let request = if sent.block1().is_some() {
            // The answer to the last block binds the whole body.
            let mut payload = [0u8; MAX_REG_PAYLOAD];
            let n = self
                .registration_payload(&mut payload)
                .map_err(|_| AnswerError::TooLong)?;
            RequestDigest::of(&self.crypto, sent.code.0, options, &payload[..n])
        } else {
            RequestDigest::of(&self.crypto, sent.code.0, options, sent.payload)
        };
        Answer {
            device: &self.identity,
            token: o.token().as_bytes(),
            code: msg.code.0,
            request: &request,
        }
        .verify(
            &self.crypto,
            &key,
            msg.options().map(|x| (x.number, x.value)),
        )
    }

    fn on_response<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        msg: &Message<'_>,
        id: RequestId,
    ) -> Result<(), DeviceError> {
        let Some(exchange) = self.ep.requests.get(id).map(|o| o.exchange()) else {
            return Ok(());
        };
        if self.config.require_signed_answers && needs_signature(exchange, msg.code) {
            match self.check_answer(id, msg) {
                Ok(()) => {}
                Err(AnswerError::Unsigned) => {
                    self.stats.unsigned_answers = self.stats.unsigned_answers.saturating_add(1);
                    return Ok(());
                }
                Err(_) => {
                    self.stats.bad_answer_signatures =
                        self.stats.bad_answer_signatures.saturating_add(1);
                    return Ok(());
                }
            }
        }
        let lifetime = self.config.lifetime;
        match exchange {
            Exchange::Register(mut upload) if msg.code == Code::CONTINUE => {
                // 2.31 is only valid as the echo of a block sent with the "more" flag (RFC
                // 7959 §2.3); the message core's sender checks it and follows a smaller size
                // the server asks for (§2.5).
                if upload.continued(msg.block1().and_then(Result::ok)).is_err() {
                    self.stats.unexpected += 1;
                    self.ep.failed_with(now, id, msg.code, lifetime);
                    return Ok(());
                }
                self.ep.requests.remove(id);
                self.start_registration(now, storage, Some(upload))
            }
            Exchange::Register(_) if msg.code == Code::CREATED => {
                self.ep.requests.remove(id);
                let Some(location) = Location::of(msg) else {
                    // The request has left the table: nothing to fail, the registration is
                    // tried again at the next timeout.
                    return Ok(());
                };
                self.ep.registered(now, location, lifetime);
                if self.ep.has_pending_republication() && self.ep.take_republication() {
                    self.send_reading(now, storage, true)?;
                }
                Ok(())
            }
            Exchange::Publish { seq }
                if self.config.require_signed_answers && msg.code.0 == answer::RESYNC_CODE =>
            {
                // The signed form of the §8.2 Reset (checked above).
                self.ep.requests.remove(id);
                self.ep.resynchronise(now, seq, lifetime);
                Ok(())
            }
            _ => {
                // An update's 2.04, a reading's acknowledgement or 5.xx, or a failure.
                self.ep.on_answer(now, msg, id, exchange, lifetime);
                Ok(())
            }
        }
    }
}

/// Whether the answer `code` to `exchange` must be signed before the device acts on it, when
/// signed answers are required: all but a publication's acknowledgement (which changes
/// nothing) and 2.31 Continue (the final block's answer binds the whole body).
fn needs_signature(exchange: Exchange, code: Code) -> bool {
    !matches!(
        (exchange, code),
        (Exchange::Publish { .. }, Code::CHANGED | Code::CREATED)
            | (Exchange::Register(_), Code::CONTINUE)
    )
}
