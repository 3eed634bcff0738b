//! The end of every handshake, for both roles: the peer's ChangeCipherSpec, then its Finished
//! (RFC 5246 §7.4.9). [`FinishedVerified`] is the proof that the Finished matched this side's
//! transcript under the negotiated keys, and only `verify_finished` makes one; the
//! established state cannot be built without it.

use crate::conn::{Cx, Next};
use crate::cookie::constant_time_eq;
use crate::handshake::Fragment;
use crate::keys::{self, Side};
use crate::traffic::Established;
use crate::trust::{Peer, Trust};
use crate::wire::{CipherSuite, HandshakeType};
use crate::Error;
use sigil_crypto::CryptoProvider;

/// Proof that the peer's Finished verified.
#[derive(Debug, PartialEq, Eq)]
pub struct FinishedVerified(());

impl FinishedVerified {
    /// The proof a saved association carries: its Finished verified before it was saved,
    /// and the save's MAC under this side's storage key says so ([`crate::saved`]).
    pub(crate) fn restored(_: &crate::saved::Vouched) -> Self {
        Self(())
    }
}

fn verify_finished<C: CryptoProvider + ?Sized>(
    crypto: &C,
    master: &[u8; 48],
    side: Side,
    transcript_hash: &[u8; 32],
    body: &[u8],
) -> Result<FinishedVerified, Error> {
    let expected = keys::verify_data(crypto, master, side, transcript_hash);
    if body.len() == expected.len() && constant_time_eq(body, &expected) {
        Ok(FinishedVerified(()))
    } else {
        Err(Error::BadFinished)
    }
}

/// Expects the peer's ChangeCipherSpec; the keys are installed already.
pub struct ExpectCcs {
    pub(crate) next: ExpectFinished,
}

impl ExpectCcs {
    /// The peer switched to epoch 1 (the record layer now reads it).
    pub(crate) fn handle_ccs(self) -> ExpectFinished {
        self.next
    }
}

/// Expects the peer's Finished in epoch 1.
pub struct ExpectFinished {
    /// This side's role.
    pub(crate) side: Side,
    pub(crate) suite: CipherSuite,
    pub(crate) master: [u8; 48],
    pub(crate) session_id: Option<[u8; 32]>,
    pub(crate) peer: Peer,
    pub(crate) resumed: bool,
}

impl ExpectFinished {
    pub(crate) fn handle<C: CryptoProvider, T: Trust>(
        self,
        m: &Fragment<'_>,
        epoch: u16,
        cx: &mut Cx<'_, C, T>,
    ) -> Result<Next, Error> {
        if m.msg_type != HandshakeType::FINISHED || epoch != 1 {
            return Err(Error::UnexpectedHandshake(m.msg_type.0));
        }
        let peer_side = match self.side {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        };
        let hash = cx.io.transcript.hash(cx.crypto);
        let finished = verify_finished(cx.crypto, &self.master, peer_side, &hash, m.body)?;
        cx.io.transcript.add(m)?;
        cx.io.flight.clear();
        // Whoever did not send Finished first answers with the final flight: the server in a
        // full handshake (flight 6), the client in an abbreviated one. The established state
        // keeps its Finished to answer a retransmission of the peer's final flight.
        let final_flight = if (self.side == Side::Client) == self.resumed {
            let seq = cx.io.next_send_msg;
            let vd = cx.queue_ccs_finished(&self.master, self.side)?;
            cx.send_flight()?;
            Some((vd, seq))
        } else {
            None
        };
        Ok(Next::Traffic(Established {
            finished,
            peer: self.peer,
            suite: self.suite,
            master: self.master,
            session_id: self.session_id,
            resumed: self.resumed,
            final_flight,
        }))
    }
}
