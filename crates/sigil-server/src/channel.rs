//! Who sent a CoAP message and how it was protected on the way: the typed channel the
//! message layer ([`crate::coap`]) and the handlers see, instead of a flag.
//!
//! - [`Channel::Plain`]: the coap:// socket. The address is all the server knows of the
//!   sender, and anyone can write it, until the address answers an Echo challenge
//!   ([`crate::echo`]).
//! - [`Channel::Dtls`]: a DTLS session (coaps://, its records or the CoAP carrier): the
//!   session authenticated its peer, whose identity comes with the message
//!   ([`Inbound::auth`]).
//!
//! Object security (OSCORE) will be a third channel: a security context, not a session.

use crate::auth::PeerAuth;
use std::net::{IpAddr, SocketAddr};

/// How a message reached the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Channel {
    /// coap://: unprotected; the source address is unproven.
    Plain,
    /// coaps://: inside a DTLS session, which authenticated its peer.
    Dtls,
}

impl Channel {
    /// Whether the channel authenticates the sender (and answers cannot be spoofed to
    /// another address).
    pub fn is_protected(self) -> bool {
        matches!(self, Channel::Dtls)
    }

    /// The URI scheme requests on this channel were sent to.
    pub fn scheme(self) -> &'static str {
        match self {
            Channel::Plain => "coap",
            Channel::Dtls => "coaps",
        }
    }
}

/// Where a CoAP message came from: an address and the channel it came over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: SocketAddr,
    pub channel: Channel,
}

impl Endpoint {
    pub fn plain(addr: SocketAddr) -> Self {
        Self {
            addr,
            channel: Channel::Plain,
        }
    }

    pub fn dtls(addr: SocketAddr) -> Self {
        Self {
            addr,
            channel: Channel::Dtls,
        }
    }

    /// See [`Channel::is_protected`].
    pub fn is_protected(&self) -> bool {
        self.channel.is_protected()
    }
}

/// A CoAP message as received, with the identity its channel authenticated.
#[derive(Clone, Debug)]
pub struct Inbound {
    pub from: Endpoint,
    /// The address the datagram was sent to, when the socket reports it (a server on a
    /// wildcard address); links in answers are resolved against it.
    pub to: Option<IpAddr>,
    /// The peer the channel authenticated (a DTLS session's identity); `None` on
    /// [`Channel::Plain`].
    pub auth: Option<PeerAuth>,
    pub bytes: Vec<u8>,
}
