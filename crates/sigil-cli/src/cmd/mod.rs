//! One module per command: its arguments and a `run` that drives the library crates.

pub mod app;
pub mod backup;
pub mod demo;
pub mod diet;
pub mod get;
pub mod get_rs;
pub mod identity;
pub mod provision;
pub mod sensor;
pub mod server;
pub mod soak;
pub mod token;
pub mod verify;
