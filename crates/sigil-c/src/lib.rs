//! The Sigil C library (`libsigil.a` and `sigil.h`): identities (RFC 8387 §4, §4.1), the
//! sans-IO sensor of `sigil-device`, signing and verifying readings (`sigil-objects`), and
//! the IoT-CryptoDiet operations and node (`sigil-diet`, feature `diet`).
//!
//! Everything is caller-owned. State lives in opaque structs whose size and alignment the
//! header declares, so C can place them in static memory; buffers are passed in with their
//! lengths; the platform (randomness, storage) is a struct of callbacks; the clock is an
//! argument (`now_ms`). Nothing allocates. Every exported function checks its pointers and
//! lengths and answers a [`sigil_status`]; bad input never panics.
//!
//! The library sets no global allocator and no panic handler of its own choosing: on
//! bare-metal targets a panic (which valid use cannot reach) calls the integrator's
//! `sigil_panic_hook`; hosted builds use std's. docs/c-api.md is the guide.
#![no_std]
#![allow(non_camel_case_types)]
// The exported functions check every pointer before use; their safety contract is the C one
// written in each doc comment.
#![allow(clippy::missing_safety_doc)]

#[cfg(not(target_os = "none"))]
extern crate std;

mod device;
#[cfg(feature = "diet")]
mod diet;
#[cfg(feature = "dtls")]
mod dtls;
mod ffi;
mod identity;
mod reading;
mod status;

pub use device::*;
#[cfg(feature = "diet")]
pub use diet::*;
#[cfg(feature = "dtls")]
pub use dtls::*;
pub use identity::*;
pub use reading::*;
pub use status::sigil_status;

#[cfg(all(target_os = "none", feature = "panic-hook"))]
mod panic {
    extern "C" {
        /// Provided by the integrator: called on a panic, which valid use of the library
        /// cannot reach. It must not return (reset the device, or loop).
        fn sigil_panic_hook() -> !;
    }

    #[panic_handler]
    fn on_panic(_: &core::panic::PanicInfo<'_>) -> ! {
        // SAFETY: the integrator's hook takes no arguments and never returns.
        unsafe { sigil_panic_hook() }
    }
}
