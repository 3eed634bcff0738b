//! The registration (`POST /rd`, in Block1 blocks when it does not fit) and its refresh
//! (`POST /rd/N`), each carrying a signed statement of a fresh sequence number (§8.2).

use super::{fmt_into, Device, DeviceError, Exchange, B64, MAX_REG_PAYLOAD};
use crate::exchange::{registration, require_option};
use crate::storage::{DeviceStorage, Reservation};
use base64::Engine;
use core::fmt::{self, Write};
use sigil_coap::blockwise::Sender;
use sigil_coap::message::option;
use sigil_coap::MessageBuilder;
use sigil_crypto::{CryptoProvider, Signature};
use sigil_identity::KeyAnnouncement;
use sigil_objects::json::SliceWriter;
use sigil_objects::resync::{self, OperationKind};
use sigil_time::Instant;

impl<C: CryptoProvider> Device<C> {
    /// Writes the registration payload (RFC 6690 link format, §7 step 1) into `out`.
    pub(super) fn registration_payload(&self, out: &mut [u8]) -> Result<usize, DeviceError> {
        let mut w = SliceWriter::new(out);
        let r: fmt::Result = (|| {
            write!(
                w,
                "</{}>;rt=\"{}\";ct={}",
                self.config.resource.href,
                self.config.resource.rt,
                self.config.format.content_format()
            )?;
            // The key announcement (docs/wire-formats.md); `other` is at most MAX_OTHER_INFO.
            KeyAnnouncement::new(self.public, &self.other[..self.other_len])
                .ok_or(fmt::Error)?
                .emit(&mut w, self.group.iter().flatten())?;
            Ok(())
        })();
        r.map_err(|_| DeviceError::TooLarge)?;
        Ok(w.len())
    }

    pub(super) fn start_registration<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
        upload: Option<Sender>,
    ) -> Result<(), DeviceError> {
        // The announced number is consumed, so every later reading is above it (§8.2).
        let seq = if upload.is_none() {
            self.counter.next(&mut Reservation(storage))?
        } else {
            self.counter.peek().saturating_sub(1)
        };
        // Hashing the payload, signing and building the message are sibling calls, so the
        // signature's stack and the registration buffers are never live at once
        // (docs/device-costs.md: stack depth).
        let digest = self.registration_digest()?;
        let sig = self.sign_statement(seq, &digest)?;
        self.send_registration(now, upload, seq, sig)
    }

    /// The operation digest of the registration this device sends (`sigil_objects::resync`).
    #[inline(never)]
    fn registration_digest(&self) -> Result<[u8; 32], DeviceError> {
        let mut payload = [0u8; MAX_REG_PAYLOAD];
        let plen = self.registration_payload(&mut payload)?;
        resync::Operation {
            kind: OperationKind::Register,
            lifetime: Some(self.config.lifetime_secs()),
            base: None,
            payload: &payload[..plen],
        }
        .digest(&self.crypto)
        .ok_or(DeviceError::Encoding)
    }

    /// Signs the registration statement for `seq` and the operation `digest`.
    #[inline(never)]
    fn sign_statement(&self, seq: u64, digest: &[u8; 32]) -> Result<Signature, DeviceError> {
        self.crypto
            .sign(&self.key, &resync::statement(&self.identity, seq, digest))
            .map_err(|_| DeviceError::Encoding)
    }

    #[inline(never)]
    fn send_registration(
        &mut self,
        now: Instant,
        upload: Option<Sender>,
        seq: u64,
        sig: Signature,
    ) -> Result<(), DeviceError> {
        let mut payload = [0u8; MAX_REG_PAYLOAD];
        let plen = self.registration_payload(&mut payload)?;
        let id_hex = self.identity.hex();
        let lifetime = self.config.lifetime_secs();
        // The message core's Block1 sender (RFC 7959 §2.3): the first block, or the one the
        // server's 2.31 Continue asked for next.
        let upload = upload.unwrap_or(Sender::new(plen, self.config.block_szx));
        let signed = self.config.require_signed_answers;
        self.ep.begin(
            &self.crypto,
            now,
            Exchange::Register(upload),
            true,
            |buf, mid, token| {
                let mut b = registration(buf, mid, token, &id_hex, lifetime)?;
                statement_options(&mut b, seq, &sig)?;
                if let Some(blk) = upload.block() {
                    let (v, vn) = blk.encode().map_err(|_| DeviceError::TooLarge)?;
                    b.option(option::BLOCK1, &v[..vn])
                        .map_err(|_| DeviceError::TooLarge)?;
                    b.uint_option(option::SIZE1, plen as u32)
                        .map_err(|_| DeviceError::TooLarge)?;
                    require_option(&mut b, signed)?;
                    let part = payload.get(upload.range()).ok_or(DeviceError::TooLarge)?;
                    b.finish_with_payload(part)
                        .map_err(|_| DeviceError::TooLarge)
                } else {
                    require_option(&mut b, signed)?;
                    b.finish_with_payload(&payload[..plen])
                        .map_err(|_| DeviceError::TooLarge)
                }
            },
        )
    }

    /// `POST /rd/N?sq=…&ss=…`: the refresh carries a statement of its own (a fresh number,
    /// bound to the update), since only the registration's owner may change it.
    pub(super) fn start_update<S: DeviceStorage>(
        &mut self,
        now: Instant,
        storage: &mut S,
    ) -> Result<(), DeviceError> {
        let seq = self.counter.next(&mut Reservation(storage))?;
        let digest = resync::Operation {
            kind: OperationKind::Update,
            lifetime: None,
            base: None,
            payload: &[],
        }
        .digest(&self.crypto)
        .ok_or(DeviceError::Encoding)?;
        let sig = self.sign_statement(seq, &digest)?;
        let signed = self.config.require_signed_answers;
        self.ep.start_update(&self.crypto, now, |b| {
            statement_options(b, seq, &sig)?;
            require_option(b, signed)
        })
    }
}

/// Adds `sq=<seq>` and `ss=<base64url signature>` (the registration statement).
fn statement_options(
    b: &mut MessageBuilder<'_>,
    seq: u64,
    sig: &Signature,
) -> Result<(), DeviceError> {
    let mut q = [0u8; 128];
    let n = fmt_into(&mut q, format_args!("sq={seq}"))?;
    b.option(option::URI_QUERY, &q[..n])
        .map_err(|_| DeviceError::TooLarge)?;
    q[..3].copy_from_slice(b"ss=");
    let sn = B64
        .encode_slice(sig.0, &mut q[3..])
        .map_err(|_| DeviceError::TooLarge)?;
    b.option(option::URI_QUERY, &q[..3 + sn])
        .map_err(|_| DeviceError::TooLarge)?;
    Ok(())
}
