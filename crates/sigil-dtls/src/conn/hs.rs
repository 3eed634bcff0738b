//! The carrier-independent handshake: one state per expected message ([`Hs`]), what a
//! transition works with ([`Cx`]), and the buffers every carrier needs ([`HsIo`]: the
//! transcript and this side's flight).

use super::{Config, Epoch1, RecordLayer, State};
use crate::finished::{ExpectCcs, ExpectFinished};
use crate::flight::{Flight, MAX_MESSAGE, MAX_TRANSCRIPT};
use crate::handshake::{Fragment, HEADER_LEN as HS_HEADER_LEN};
use crate::keys::{self, KeyBlock, Side};
use crate::protection::Aead;
use crate::trust::Trust;
use crate::wire::{ContentType, HandshakeType};
use crate::{client, server, Error, Writer};
use sigil_crypto::CryptoProvider;

/// One handshake state per expected message (named after it, hence the common prefix).
// With `rsa`, the server's RSA key rides inline in the client's last states (no allocation).
#[allow(clippy::enum_variant_names)]
#[cfg_attr(feature = "rsa", allow(clippy::large_enum_variant))]
pub(crate) enum Hs {
    ExpectHelloVerifyOrServerHello(client::ExpectHelloVerifyOrServerHello),
    ExpectServerCertificate(client::ExpectCertificate),
    ExpectServerKeyExchange(client::ExpectServerKeyExchange),
    ExpectServerHelloDone(client::ExpectServerHelloDone),
    ExpectClientCertificate(server::ExpectCertificate),
    ExpectClientKeyExchange(server::ExpectClientKeyExchange),
    ExpectCertificateVerify(server::ExpectCertificateVerify),
    ExpectChangeCipherSpec(ExpectCcs),
    ExpectFinished(ExpectFinished),
}

/// What a transition leads to: the next handshake state, or the established connection.
/// No heap, so no boxing: the states are moved, and the sizes are what they hold.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Next {
    Hs(Hs),
    Traffic(crate::traffic::Established),
}

impl From<Hs> for Next {
    fn from(h: Hs) -> Self {
        Next::Hs(h)
    }
}

impl Hs {
    pub(crate) fn name(&self) -> State {
        match self {
            Self::ExpectHelloVerifyOrServerHello(_) => State::ExpectHelloVerifyOrServerHello,
            Self::ExpectServerCertificate(_) => State::ExpectServerCertificate,
            Self::ExpectServerKeyExchange(_) => State::ExpectServerKeyExchange,
            Self::ExpectServerHelloDone(_) => State::ExpectServerHelloDone,
            Self::ExpectClientCertificate(_) => State::ExpectClientCertificate,
            Self::ExpectClientKeyExchange(_) => State::ExpectClientKeyExchange,
            Self::ExpectCertificateVerify(_) => State::ExpectCertificateVerify,
            Self::ExpectChangeCipherSpec(_) => State::ExpectChangeCipherSpec,
            Self::ExpectFinished(_) => State::ExpectFinished,
        }
    }

    /// The one transition: this state consumes itself and one whole handshake message.
    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        self,
        m: &Fragment<'_>,
        epoch: u16,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        // Every handshake message but Finished travels in epoch 0.
        if epoch != 0 && m.msg_type != HandshakeType::FINISHED {
            return Err(Error::UnexpectedHandshake(m.msg_type.0));
        }
        match self {
            Self::ExpectHelloVerifyOrServerHello(s) => s.handle(m, cx),
            Self::ExpectServerCertificate(s) => s.handle(m, cx),
            Self::ExpectServerKeyExchange(s) => s.handle(m, cx),
            Self::ExpectServerHelloDone(s) => s.handle(m, cx),
            Self::ExpectClientCertificate(s) => s.handle(m, cx),
            Self::ExpectClientKeyExchange(s) => s.handle(m, cx),
            Self::ExpectCertificateVerify(s) => s.handle(m, cx),
            // A handshake message where the ChangeCipherSpec belongs: the peer skipped it (a
            // Finished sent without switching keys is refused here).
            Self::ExpectChangeCipherSpec(_) => Err(Error::UnexpectedHandshake(m.msg_type.0)),
            Self::ExpectFinished(s) => s.handle(m, epoch, cx),
        }
    }
}

/// What a transition works with besides its own state: the caller's crypto, trust and
/// configuration, the record layer, and the handshake buffers.
pub(crate) struct Cx<'a, C, T> {
    pub crypto: &'a C,
    pub trust: &'a T,
    pub config: &'a Config,
    pub rl: &'a mut RecordLayer,
    pub io: &'a mut HsIo,
}

impl<C: CryptoProvider, T> Cx<'_, C, T> {
    /// Marks the flight built in [`HsIo::flight`] as ready: the carrier sends it once the
    /// transition returns (the record carrier as a new flight, with a fresh timer and budget).
    pub fn send_flight(&mut self) -> Result<(), Error> {
        self.io.flight_ready = true;
        Ok(())
    }

    /// Adds ChangeCipherSpec and this side's Finished (over the transcript so far) to the
    /// flight; returns the verify_data.
    pub fn queue_ccs_finished(
        &mut self,
        master: &[u8; 48],
        side: Side,
    ) -> Result<[u8; keys::VERIFY_DATA_LEN], Error> {
        self.io
            .flight
            .push(ContentType::CHANGE_CIPHER_SPEC, 0, &[1])?;
        let vd = keys::verify_data(
            self.crypto,
            master,
            side,
            &self.io.transcript.hash(self.crypto),
        );
        self.io
            .queue_handshake_epoch(HandshakeType::FINISHED, &vd, 1)?;
        Ok(vd)
    }

    /// Installs the epoch-1 keys from the master secret and this handshake's randoms.
    pub fn install_keys(
        &mut self,
        aead: Aead,
        master: &[u8; 48],
        client_random: &[u8; 32],
        server_random: &[u8; 32],
        side: Side,
    ) {
        let KeyBlock { client, server } =
            keys::key_block(self.crypto, aead, master, client_random, server_random);
        self.rl.keys = Some(match side {
            Side::Client => Epoch1 {
                write: client,
                read: server,
            },
            Side::Server => Epoch1 {
                write: server,
                read: client,
            },
        });
    }
}

/// The handshake messages so far, each as if sent in one fragment (RFC 6347 §4.2.6): the
/// input of the extended master secret, the CertificateVerify and the Finished hashes.
pub(crate) struct Transcript {
    buf: [u8; MAX_TRANSCRIPT],
    len: usize,
}

impl Transcript {
    pub(crate) const fn new() -> Self {
        Self {
            buf: [0; MAX_TRANSCRIPT],
            len: 0,
        }
    }

    pub fn add(&mut self, f: &Fragment<'_>) -> Result<(), Error> {
        let mut w = Writer::new(&mut self.buf[self.len..]);
        Fragment { offset: 0, ..*f }
            .write(&mut w)
            .map_err(|_| Error::MessageTooLarge {
                length: f.length,
                capacity: MAX_TRANSCRIPT,
            })?;
        self.len += w.len();
        Ok(())
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub fn hash<C: CryptoProvider + ?Sized>(&self, crypto: &C) -> [u8; 32] {
        crypto.sha256(&[self.bytes()])
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// The handshake's buffers every carrier needs: the transcript and this side's current
/// flight (whole messages, as built by the transitions).
pub(crate) struct HsIo {
    pub transcript: Transcript,
    pub flight: Flight,
    pub next_send_msg: u16,
    /// The transition finished a flight; the carrier sends it and clears this.
    pub flight_ready: bool,
}

impl HsIo {
    pub(crate) const fn new() -> Self {
        Self {
            transcript: Transcript::new(),
            flight: Flight::new(),
            next_send_msg: 0,
            flight_ready: false,
        }
    }

    /// Adds a handshake message (epoch 0) to the flight and the transcript.
    pub fn queue_handshake(&mut self, t: HandshakeType, body: &[u8]) -> Result<(), Error> {
        self.queue_handshake_epoch(t, body, 0)
    }

    pub fn queue_handshake_epoch(
        &mut self,
        t: HandshakeType,
        body: &[u8],
        epoch: u16,
    ) -> Result<(), Error> {
        let f = Fragment {
            msg_type: t,
            length: body.len() as u32,
            message_seq: self.next_send_msg,
            offset: 0,
            body,
        };
        self.next_send_msg = next_seq(self.next_send_msg)?;
        let mut msg = [0u8; MAX_MESSAGE + HS_HEADER_LEN];
        let mut w = Writer::new(&mut msg);
        f.write(&mut w)?;
        let n = w.len();
        self.flight.push(ContentType::HANDSHAKE, epoch, &msg[..n])?;
        self.transcript.add(&f)
    }
}

/// The next handshake message_seq; a handshake never needs 2^16 messages.
pub(crate) fn next_seq(seq: u16) -> Result<u16, Error> {
    seq.checked_add(1).ok_or(Error::Decode("message_seq"))
}
