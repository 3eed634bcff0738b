//! Record intake and output for both the handshake and the established connection: epochs,
//! sequence numbers, replay windows, connection IDs (RFC 9146) and record protection.

use crate::extensions::MAX_CID;
use crate::flight::MAX_DATAGRAM;
use crate::protection::{self, Aead, RecordKeys};
#[cfg(feature = "record-carrier")]
use crate::record::HEADER_LEN;
use crate::record::{plaintext_record, Record, ReplayWindow};
use crate::wire::{AlertDescription, AlertLevel, ContentType, ProtocolVersion};
use crate::{Error, Reader};
use sigil_crypto::CryptoProvider;

/// Epoch-1 keys, both directions.
pub(crate) struct Epoch1 {
    pub write: RecordKeys,
    pub read: RecordKeys,
}

/// Epochs, sequence numbers, replay windows, connection IDs and record protection: what both
/// the handshake and the established connection need.
pub(crate) struct RecordLayer {
    pub aead: Aead,
    pub keys: Option<Epoch1>,
    pub read_epoch: u16,
    pub write_epoch: u16,
    pub write_seq: [u64; 2],
    pub replay: [ReplayWindow; 2],
    own_cid: [u8; MAX_CID],
    own_cid_len: u8,
    peer_cid: [u8; MAX_CID],
    peer_cid_len: u8,
}

impl RecordLayer {
    pub fn new(aead: Aead) -> Self {
        Self {
            aead,
            keys: None,
            read_epoch: 0,
            write_epoch: 0,
            write_seq: [0; 2],
            replay: [ReplayWindow::new(); 2],
            own_cid: [0; MAX_CID],
            own_cid_len: 0,
            peer_cid: [0; MAX_CID],
            peer_cid_len: 0,
        }
    }

    /// The connection ID the peer puts in its records to us (RFC 9146).
    pub fn own_cid(&self) -> &[u8] {
        &self.own_cid[..usize::from(self.own_cid_len)]
    }

    /// The connection ID this side puts in its records to the peer (RFC 9146).
    pub fn peer_cid(&self) -> &[u8] {
        &self.peer_cid[..usize::from(self.peer_cid_len)]
    }

    /// Sets the connection IDs (each at most [`MAX_CID`] bytes, checked by the decoder).
    pub fn set_cids(&mut self, own: &[u8], peer: &[u8]) -> Result<(), Error> {
        if own.len() > MAX_CID || peer.len() > MAX_CID {
            return Err(Error::Decode("connection_id"));
        }
        self.own_cid[..own.len()].copy_from_slice(own);
        self.own_cid_len = own.len() as u8;
        self.peer_cid[..peer.len()].copy_from_slice(peer);
        self.peer_cid_len = peer.len() as u8;
        Ok(())
    }

    /// Bytes a record of `epoch` adds around its plaintext.
    #[cfg(feature = "record-carrier")]
    pub fn overhead(&self, epoch: u16) -> usize {
        if epoch == 0 {
            HEADER_LEN
        } else {
            self.aead.overhead()
                + if self.peer_cid_len > 0 {
                    usize::from(self.peer_cid_len) + 1
                } else {
                    0
                }
        }
    }

    /// One record in `epoch` (0: plaintext; 1: protected) with the next sequence number.
    pub fn seal<C: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &C,
        ct: ContentType,
        epoch: u16,
        plain: &[u8],
        out: &mut [u8],
    ) -> Result<usize, Error> {
        let e = usize::from(epoch.min(1));
        let seq = self.write_seq[e];
        if seq > crate::record::MAX_SEQUENCE {
            return Err(Error::SequenceExhausted);
        }
        self.write_seq[e] += 1;
        if epoch == 0 {
            return plaintext_record(ct, seq, |w| w.bytes(plain), out);
        }
        let keys = self.keys.as_ref().ok_or(Error::NotEstablished)?;
        self.write_epoch = 1;
        if self.peer_cid_len > 0 {
            let cid = &self.peer_cid[..usize::from(self.peer_cid_len)];
            return protection::seal_cid(crypto, &keys.write, ct, 1, seq, cid, plain, out);
        }
        protection::seal(crypto, &keys.write, ct, 1, seq, plain, out)
    }

    /// Checks a received record (version, epoch, replay window, connection ID), removes its
    /// protection and moves the replay window. Returns the real content type, the epoch and
    /// the plaintext (in `buf`).
    pub fn open<'b, C: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &C,
        rec: &Record<'_>,
        buf: &'b mut [u8; MAX_DATAGRAM],
    ) -> Result<(ContentType, u16, &'b [u8]), Error> {
        let mut h = rec.header;
        if h.version != ProtocolVersion::DTLS_1_2 && h.version != ProtocolVersion::DTLS_1_0 {
            return Err(Error::BadRecordVersion(h.version.0));
        }
        // Only epochs this side holds read keys for: 0, and 1 once the peer's
        // ChangeCipherSpec arrived. Older and future epochs are dropped (RFC 6347 §4.1).
        if h.epoch > self.read_epoch || h.epoch > 1 {
            return Err(Error::UnknownEpoch(h.epoch));
        }
        self.replay[usize::from(h.epoch)].check(h.sequence)?;
        // With a connection ID of ours, protected records must carry it (RFC 9146 §4);
        // without one, no record may. Unauthenticated, so dropped like a bad MAC.
        let cid_record = h.content_type == ContentType::TLS12_CID;
        if cid_record != (h.epoch > 0 && self.own_cid_len > 0) {
            return Err(Error::BadRecordMac);
        }
        if cid_record && rec.cid != self.own_cid() {
            return Err(Error::BadRecordMac);
        }
        // Nothing this side sends is longer than a datagram it builds; a longer record is
        // unauthenticated yet (anyone can send one), so it is dropped, not fatal.
        let frag = buf
            .get_mut(..rec.fragment.len())
            .ok_or(Error::Unauthenticated("record longer than a datagram"))?;
        frag.copy_from_slice(rec.fragment);
        let plain: &[u8] = if h.epoch == 0 {
            frag
        } else {
            let keys = self.keys.as_ref().ok_or(Error::UnknownEpoch(1))?;
            if cid_record {
                let (real, plain) = protection::open_cid(crypto, &keys.read, &h, rec.cid, frag)?;
                h.content_type = real;
                plain
            } else {
                protection::open(crypto, &keys.read, &h, frag)?
            }
        };
        // Authenticated (or epoch 0): now the window may move.
        self.replay[usize::from(h.epoch)].accept(h.sequence);
        Ok((h.content_type, h.epoch, plain))
    }

    /// The fatal alert `e` warrants, as a record in the current write epoch.
    pub fn alert_record<C: CryptoProvider + ?Sized>(
        &mut self,
        crypto: &C,
        e: &Error,
        out: &mut [u8; 64],
    ) -> Option<usize> {
        let desc = e.alert()?;
        let epoch = if self.write_epoch == 1 && self.keys.is_some() {
            1
        } else {
            0
        };
        self.seal(
            crypto,
            ContentType::ALERT,
            epoch,
            &[AlertLevel::FATAL.0, desc.0],
            out,
        )
        .ok()
    }
}

/// Reads an alert record: a fatal alert or close_notify ends the connection (returned as the
/// error it records); a warning is ignored.
pub(crate) fn read_alert(plain: &[u8]) -> Result<Option<Error>, Error> {
    let mut r = Reader::new(plain);
    let level = AlertLevel(r.u8("alert")?);
    let desc = AlertDescription(r.u8("alert")?);
    r.finish("alert")?;
    Ok(
        (level == AlertLevel::FATAL || desc == AlertDescription::CLOSE_NOTIFY)
            .then_some(Error::PeerAlert(desc.0)),
    )
}
