//! What comes back: acknowledgements, Resets, answers (checked against the trusted server's
//! key when signed answers are required), and what a failed exchange leads to (back-off,
//! re-registration, a reading published again).

use super::{
    Device, DeviceError, Event, Exchange, PublishOutcome, State, MAX_LOCATION, MAX_REG_PAYLOAD,
};
use crate::storage::DeviceStorage;
use core::time::Duration;
use sigil_coap::exchange::client::{Incoming, RequestId};
use sigil_coap::message::option;
use sigil_coap::{Code, Message};
use sigil_crypto::CryptoProvider;
use sigil_objects::answer::{self, Answer, AnswerError, RequestDigest};
use sigil_time::Instant;

impl<C: CryptoProvider> Device<C> {
    /// Back-off after `failures` failures in a row: 10 s, 20 s, 40 s ... capped at the
    /// lifetime.
    fn backoff(&self, failures: u32) -> Duration {
        (Duration::from_secs(5) * (1u32 << failures.min(10))).min(self.config.lifetime)
    }

    pub(super) fn exchange_failed(&mut self, now: Instant, exchange: Exchange, code: Option<Code>) {
        match exchange {
            Exchange::Publish { seq } => match code {
                Some(c) if c == Code::NOT_FOUND || c == Code::UNSUPPORTED_CONTENT_FORMAT => {
                    // The broker no longer holds the registration this reading was made for
                    // (expired, or its links changed): register again in full, then publish
                    // the same reading again. Immediately the first time; if it is refused
                    // again after a fresh registration, back off as registration does.
                    self.push_event(Event::Published {
                        seq,
                        outcome: PublishOutcome::Republishing(c),
                    });
                    self.republish = true;
                    self.republish_at = now;
                    let retry_at = if self.refusals == 0 {
                        now
                    } else {
                        now + self.backoff(self.refusals)
                    };
                    self.refusals = self.refusals.saturating_add(1);
                    self.state = State::Unregistered { retry_at };
                }
                _ => {
                    let outcome = code.map_or(PublishOutcome::TimedOut, PublishOutcome::Rejected);
                    self.push_event(Event::Published { seq, outcome });
                }
            },
            Exchange::Register { .. } | Exchange::Update => {
                if let Some(code) = code {
                    self.push_event(Event::RegistrationFailed { code });
                }
                if exchange == Exchange::Update && code == Some(Code::NOT_FOUND) {
                    self.state = State::Unregistered { retry_at: now };
                    return;
                }
                self.reg_failures = self.reg_failures.saturating_add(1);
                self.state = State::Unregistered {
                    retry_at: now + self.backoff(self.reg_failures),
                };
            }
        }
    }

    /// Feeds one received datagram. Malformed or unexpected input is counted and ignored.
    pub fn handle_datagram<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        datagram: &[u8],
    ) -> Result<(), DeviceError> {
        let Ok(msg) = Message::parse(datagram) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        match self.requests.handle_message(&msg, now) {
            Incoming::Handled => Ok(()),
            Incoming::Unexpected => {
                self.stats.unexpected += 1;
                Ok(())
            }
            Incoming::Reset(id) => {
                if self.config.require_signed_answers {
                    // Anyone can send a Reset: only a signed answer resynchronises.
                    self.stats.resets_refused = self.stats.resets_refused.saturating_add(1);
                    return Ok(());
                }
                self.on_reset(now, id);
                Ok(())
            }
            Incoming::Response(id) => self.on_response(now, storage, &msg, id),
        }
    }

    fn on_reset(&mut self, now: Instant, id: RequestId) {
        match self.requests.remove(id) {
            Some(Exchange::Publish { seq }) => self.resynchronise(now, seq),
            Some(x) => self.exchange_failed(now, x, None),
            None => {}
        }
    }

    /// §8.2: the broker finds our number out of window. Re-register with the current number,
    /// then publish the same reading again under a new number.
    fn resynchronise(&mut self, now: Instant, seq: u64) {
        self.push_event(Event::Published {
            seq,
            outcome: PublishOutcome::Reset,
        });
        self.push_event(Event::Resynchronising);
        self.republish = true;
        self.republish_at = now;
        self.state = State::Unregistered { retry_at: now };
    }

    /// Checks the signature of `msg`, an answer to request `id`, under the trusted server key.
    #[inline(never)]
    fn check_answer(&self, id: RequestId, msg: &Message<'_>) -> Result<(), AnswerError> {
        let key = self.answer_key().ok_or(AnswerError::BadSignature)?;
        let (Some(o), Some(sent)) = (self.requests.get(id), self.requests.bytes(id)) else {
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
        let Some(exchange) = self.requests.get(id).map(|o| o.exchange()) else {
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
        match exchange {
            Exchange::Register { mut upload } if msg.code == Code::CONTINUE => {
                // 2.31 is only valid as the echo of a block sent with the "more" flag (RFC
                // 7959 §2.3); the message core's sender checks it and follows a smaller size
                // the server asks for (§2.5).
                if upload.continued(msg.block1().and_then(Result::ok)).is_err() {
                    self.stats.unexpected += 1;
                    self.exchange_failed_with(now, id, msg.code);
                    return Ok(());
                }
                self.requests.remove(id);
                self.start_registration(now, storage, Some(upload))
            }
            Exchange::Register { .. } if msg.code == Code::CREATED => {
                self.requests.remove(id);
                let mut loc = [0u8; MAX_LOCATION];
                let mut n = 0;
                for seg in msg.option_values(option::LOCATION_PATH) {
                    let need = seg.len() + usize::from(n > 0);
                    if n + need > MAX_LOCATION {
                        // The request has left the table: nothing to fail, the registration
                        // is tried again at the next timeout.
                        return Ok(());
                    }
                    if n > 0 {
                        loc[n] = b'/';
                        n += 1;
                    }
                    loc[n..n + seg.len()].copy_from_slice(seg);
                    n += seg.len();
                }
                self.location = loc;
                self.location_len = n;
                self.reg_failures = 0;
                self.state = State::Registered {
                    refresh_at: now + self.config.lifetime / 5 * 4,
                };
                self.push_event(Event::Registered);
                if self.republish {
                    self.publish_again(now, storage)?;
                }
                Ok(())
            }
            Exchange::Update if msg.code == Code::CHANGED => {
                self.requests.remove(id);
                self.state = State::Registered {
                    refresh_at: now + self.config.lifetime / 5 * 4,
                };
                self.push_event(Event::RegistrationRefreshed);
                Ok(())
            }
            Exchange::Publish { seq } if msg.code == Code::CHANGED || msg.code == Code::CREATED => {
                self.requests.remove(id);
                self.refusals = 0;
                self.server_errors = 0;
                self.push_event(Event::Published {
                    seq,
                    outcome: PublishOutcome::Acknowledged,
                });
                Ok(())
            }
            Exchange::Publish { seq }
                if self.config.require_signed_answers && msg.code.0 == answer::RESYNC_CODE =>
            {
                // The signed form of the §8.2 Reset (checked above).
                self.requests.remove(id);
                self.resynchronise(now, seq);
                Ok(())
            }
            Exchange::Publish { seq } if msg.code.class() == 5 => {
                // The broker stored nothing (a failed batch commits nothing): keep the
                // reading and send it again later, still registered.
                self.requests.remove(id);
                let secs = crate::exchange::retry_delay(msg, &mut self.server_errors);
                self.push_event(Event::Published {
                    seq,
                    outcome: PublishOutcome::Deferred {
                        code: msg.code,
                        retry_after_secs: secs,
                    },
                });
                self.republish = true;
                self.republish_at = now + Duration::from_secs(u64::from(secs));
                Ok(())
            }
            _ => {
                self.exchange_failed_with(now, id, msg.code);
                Ok(())
            }
        }
    }

    fn exchange_failed_with(&mut self, now: Instant, id: RequestId, code: Code) {
        if let Some(x) = self.requests.remove(id) {
            self.exchange_failed(now, x, Some(code));
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
            | (Exchange::Register { .. }, Code::CONTINUE)
    )
}
