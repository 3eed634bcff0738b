//! AEAD record protection (RFC 6347 §4.1.2.1): AES-128-CCM-8 (RFC 6655 §3) and AES-128-GCM
//! (RFC 5288 §3).
//!
//! GenericAEADCipher: `nonce_explicit (8) || ciphertext || tag (8 for CCM-8, 16 for GCM)`. The nonce is the 4-byte
//! implicit salt from the key block followed by the explicit part, which Sigil sets to the
//! record's `epoch || sequence_number` (unique per key, as RFC 6655 §3 requires). The additional
//! data is `epoch || sequence_number || type || version || plaintext length`.

use crate::record::{RecordHeader, HEADER_LEN};
use crate::wire::{ContentType, ProtocolVersion};
use crate::{Error, Writer};
use sigil_crypto::{CryptoProvider, CCM8_TAG_LEN, GCM_TAG_LEN};

/// Length of the explicit nonce carried in each record.
pub const EXPLICIT_NONCE_LEN: usize = 8;
/// Bytes a CCM-8 protected record adds to its plaintext: header, explicit nonce, tag.
pub const OVERHEAD: usize = HEADER_LEN + EXPLICIT_NONCE_LEN + CCM8_TAG_LEN;

/// The AEAD of a suite. Both use a 16-byte key and a 4-byte implicit nonce part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aead {
    Ccm8,
    Gcm,
}

impl Aead {
    pub const fn tag_len(self) -> usize {
        match self {
            Self::Ccm8 => CCM8_TAG_LEN,
            Self::Gcm => GCM_TAG_LEN,
        }
    }

    /// Bytes a protected record adds to its plaintext.
    pub const fn overhead(self) -> usize {
        HEADER_LEN + EXPLICIT_NONCE_LEN + self.tag_len()
    }
}

/// One direction's keys: the AEAD, the write key and the implicit part of the nonce.
#[derive(Clone)]
pub struct RecordKeys {
    pub aead: Aead,
    pub key: [u8; 16],
    pub salt: [u8; 4],
}

impl core::fmt::Debug for RecordKeys {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "RecordKeys({:?}, <redacted>)", self.aead)
    }
}

fn additional_data(h: &RecordHeader, plaintext_len: usize) -> Result<[u8; 13], Error> {
    let mut aad = [0u8; 13];
    aad[..8].copy_from_slice(&h.seq_num());
    aad[8] = h.content_type.0;
    aad[9..11].copy_from_slice(&h.version.0.to_be_bytes());
    let n = u16::try_from(plaintext_len).map_err(|_| Error::RecordOverflow)?;
    aad[11..].copy_from_slice(&n.to_be_bytes());
    Ok(aad)
}

fn nonce(keys: &RecordKeys, explicit: &[u8; 8]) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[..4].copy_from_slice(&keys.salt);
    n[4..].copy_from_slice(explicit);
    n
}

/// Writes the protected record for `plaintext` into `out`; returns its length.
pub fn seal<C: CryptoProvider + ?Sized>(
    crypto: &C,
    keys: &RecordKeys,
    content_type: ContentType,
    epoch: u16,
    sequence: u64,
    plaintext: &[u8],
    out: &mut [u8],
) -> Result<usize, Error> {
    let tag_len = keys.aead.tag_len();
    let total = keys.aead.overhead() + plaintext.len();
    let length = u16::try_from(total - HEADER_LEN).map_err(|_| Error::RecordOverflow)?;
    if out.len() < total {
        return Err(Error::BufferTooSmall);
    }
    let header = RecordHeader {
        content_type,
        version: ProtocolVersion::DTLS_1_2,
        epoch,
        sequence,
        length,
    };
    let explicit = header.seq_num();
    let mut w = Writer::new(out);
    header.write(&mut w)?;
    w.bytes(&explicit)?;
    w.bytes(plaintext)?;
    let aad = additional_data(&header, plaintext.len())?;
    let body = &mut out
        [HEADER_LEN + EXPLICIT_NONCE_LEN..HEADER_LEN + EXPLICIT_NONCE_LEN + plaintext.len()];
    let n = nonce(keys, &explicit);
    match keys.aead {
        Aead::Ccm8 => {
            let tag = crypto.aes128_ccm8_seal(&keys.key, &n, &aad, body)?;
            out[total - tag_len..total].copy_from_slice(&tag);
        }
        Aead::Gcm => {
            let tag = crypto.aes128_gcm_seal(&keys.key, &n, &aad, body)?;
            out[total - tag_len..total].copy_from_slice(&tag);
        }
    }
    Ok(total)
}

/// Authenticates and decrypts a record's fragment in place; returns the plaintext, a prefix
/// of `fragment`'s storage after the explicit nonce. Any failure is [`Error::BadRecordMac`]:
/// nothing about why leaks to the peer (and the record is dropped, RFC 6347 §4.1.2.7).
pub fn open<'a, C: CryptoProvider + ?Sized>(
    crypto: &C,
    keys: &RecordKeys,
    header: &RecordHeader,
    fragment: &'a mut [u8],
) -> Result<&'a [u8], Error> {
    let tag_len = keys.aead.tag_len();
    if fragment.len() < EXPLICIT_NONCE_LEN + tag_len {
        return Err(Error::BadRecordMac);
    }
    let (explicit, rest) = fragment.split_at_mut(EXPLICIT_NONCE_LEN);
    let explicit: [u8; 8] = (&*explicit).try_into().map_err(|_| Error::BadRecordMac)?;
    let body_len = rest.len() - tag_len;
    let (body, tag) = rest.split_at_mut(body_len);
    let aad = additional_data(header, body_len)?;
    let n = nonce(keys, &explicit);
    let r = match keys.aead {
        Aead::Ccm8 => {
            let tag: [u8; CCM8_TAG_LEN] = (&*tag).try_into().map_err(|_| Error::BadRecordMac)?;
            crypto.aes128_ccm8_open(&keys.key, &n, &aad, body, &tag)
        }
        Aead::Gcm => {
            let tag: [u8; GCM_TAG_LEN] = (&*tag).try_into().map_err(|_| Error::BadRecordMac)?;
            crypto.aes128_gcm_open(&keys.key, &n, &aad, body, &tag)
        }
    };
    r.map_err(|_| Error::BadRecordMac)?;
    Ok(body)
}

/// RFC 9146 §5 additional data of a `tls12_cid` record.
fn cid_additional_data(
    h: &RecordHeader,
    cid: &[u8],
    inner_len: usize,
    out: &mut [u8; 8 + 3 + 10 + 255 + 2],
) -> Result<usize, Error> {
    let mut w = Writer::new(out);
    w.bytes(&[0xff; 8])?;
    w.u8(ContentType::TLS12_CID.0)?;
    w.u8(u8::try_from(cid.len()).map_err(|_| Error::IllegalParameter("connection ID"))?)?;
    w.u8(ContentType::TLS12_CID.0)?;
    w.u16(h.version.0)?;
    w.u16(h.epoch)?;
    w.u48(h.sequence)?;
    w.bytes(cid)?;
    w.u16(u16::try_from(inner_len).map_err(|_| Error::RecordOverflow)?)?;
    Ok(w.len())
}

/// Writes a `tls12_cid` record (RFC 9146 §4): the header names the connection ID `cid`, the
/// encrypted `DTLSInnerPlaintext` is `plaintext || real content type` (no padding).
#[allow(clippy::too_many_arguments)]
pub fn seal_cid<C: CryptoProvider + ?Sized>(
    crypto: &C,
    keys: &RecordKeys,
    content_type: ContentType,
    epoch: u16,
    sequence: u64,
    cid: &[u8],
    plaintext: &[u8],
    out: &mut [u8],
) -> Result<usize, Error> {
    let tag_len = keys.aead.tag_len();
    let inner_len = plaintext.len() + 1;
    let head = HEADER_LEN + cid.len();
    let total = head + EXPLICIT_NONCE_LEN + inner_len + tag_len;
    if out.len() < total {
        return Err(Error::BufferTooSmall);
    }
    let length = u16::try_from(EXPLICIT_NONCE_LEN + inner_len + tag_len)
        .map_err(|_| Error::RecordOverflow)?;
    let header = RecordHeader {
        content_type: ContentType::TLS12_CID,
        version: ProtocolVersion::DTLS_1_2,
        epoch,
        sequence,
        length,
    };
    let explicit = header.seq_num();
    let mut w = Writer::new(out);
    w.u8(ContentType::TLS12_CID.0)?;
    w.u16(header.version.0)?;
    w.u16(epoch)?;
    w.u48(sequence)?;
    w.bytes(cid)?;
    w.u16(length)?;
    w.bytes(&explicit)?;
    w.bytes(plaintext)?;
    w.u8(content_type.0)?;
    let mut aad = [0u8; 8 + 3 + 10 + 255 + 2];
    let an = cid_additional_data(&header, cid, inner_len, &mut aad)?;
    let start = head + EXPLICIT_NONCE_LEN;
    let body = &mut out[start..start + inner_len];
    let n = nonce(keys, &explicit);
    match keys.aead {
        Aead::Ccm8 => {
            let tag = crypto.aes128_ccm8_seal(&keys.key, &n, &aad[..an], body)?;
            out[total - tag_len..total].copy_from_slice(&tag);
        }
        Aead::Gcm => {
            let tag = crypto.aes128_gcm_seal(&keys.key, &n, &aad[..an], body)?;
            out[total - tag_len..total].copy_from_slice(&tag);
        }
    }
    Ok(total)
}

/// Authenticates and decrypts a `tls12_cid` record's fragment in place; returns the real
/// content type and the plaintext. Failures are [`Error::BadRecordMac`].
pub fn open_cid<'a, C: CryptoProvider + ?Sized>(
    crypto: &C,
    keys: &RecordKeys,
    header: &RecordHeader,
    cid: &[u8],
    fragment: &'a mut [u8],
) -> Result<(ContentType, &'a [u8]), Error> {
    let tag_len = keys.aead.tag_len();
    if fragment.len() < EXPLICIT_NONCE_LEN + tag_len + 1 {
        return Err(Error::BadRecordMac);
    }
    let (explicit, rest) = fragment.split_at_mut(EXPLICIT_NONCE_LEN);
    let explicit: [u8; 8] = (&*explicit).try_into().map_err(|_| Error::BadRecordMac)?;
    let inner_len = rest.len() - tag_len;
    let (body, tag) = rest.split_at_mut(inner_len);
    let mut aad = [0u8; 8 + 3 + 10 + 255 + 2];
    let an = cid_additional_data(header, cid, inner_len, &mut aad)?;
    let n = nonce(keys, &explicit);
    let r = match keys.aead {
        Aead::Ccm8 => {
            let tag: [u8; CCM8_TAG_LEN] = (&*tag).try_into().map_err(|_| Error::BadRecordMac)?;
            crypto.aes128_ccm8_open(&keys.key, &n, &aad[..an], body, &tag)
        }
        Aead::Gcm => {
            let tag: [u8; GCM_TAG_LEN] = (&*tag).try_into().map_err(|_| Error::BadRecordMac)?;
            crypto.aes128_gcm_open(&keys.key, &n, &aad[..an], body, &tag)
        }
    };
    r.map_err(|_| Error::BadRecordMac)?;
    // DTLSInnerPlaintext: content, real type, zero padding (RFC 9146 §4).
    let end = body
        .iter()
        .rposition(|b| *b != 0)
        .ok_or(Error::UnexpectedMessage("empty DTLSInnerPlaintext"))?;
    let real = ContentType(body[end]);
    Ok((real, &body[..end]))
}
