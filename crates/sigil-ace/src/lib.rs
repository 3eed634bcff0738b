//! Access tokens for Sigil's authorization (ACE, RFC 9200): CBOR Web Tokens (RFC 8392) with
//! proof-of-possession keys (RFC 8747) and AIF scopes over pub-sub topics and the resource
//! directory (RFC 9237, draft-ietf-ace-coap-pubsub-profile).
//!
//! The access-control server (AC) makes tokens with [`encode_signed`], [`encode_encrypted`] or
//! [`encode_maced`]; a resource server (broker, RD, a sensor serving its own readings) checks
//! them with [`validate`] and asks the result [`AccessToken::allows`]. Every refusal has a
//! reason ([`TokenError`]). No heap, no I/O, no clock: the caller passes the current time, its
//! buffers and its crypto provider. The wire layout and the measured sizes are in
//! `docs/wire-formats.md`, "Access tokens".
//!
//! A device that serves its own resources (a sensor's readings) takes tokens at `/authz-info`
//! and decides on requests with [`rs::ResourceServer`].
//!
//! The same server also pairs a freshly labelled device with itself (RFC 8387 §4.1): the
//! [`pairing`] message, encrypted to the device's key and signed by the server.
#![no_std]
#![forbid(unsafe_code)]

pub mod cnf;
pub mod error;
pub mod pairing;
pub mod params;
pub mod rs;
pub mod scope;
pub mod token;

pub use cnf::Confirmation;
pub use error::{Claim, Malformed, TokenError};
pub use pairing::{
    open_pairing, parse_pairing, seal_pairing, Pairing, PairingContent, PairingError,
    MAX_PAIRING_LEN,
};
pub use params::{
    req_cnf_pop_input, AceError, AceErrorCode, TokenRequest, TokenResponse,
    CONTENT_FORMAT_ACE_CBOR, CONTENT_FORMAT_CWT, PROFILE_COAP_DTLS, REQ_CNF_POP_INPUT_MAX,
};
pub use scope::{Permissions, Scope, ScopeEntry, RD_OBJECT};
pub use token::{
    check, encode_encrypted, encode_maced, encode_signed, hmac_256_64_tag, open, validate,
    AcMacKey, AcSharedKey, AcSigningKey, AcTrust, AccessToken, Claims, TokenForm, MAC_KEY_LEN,
    MAX_TOKEN_LEN,
};
