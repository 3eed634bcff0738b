//! Prints every measured operation's output on the host (RustCrypto backend), one line each:
//! `name hex` (or `name error`). A tool for writing and reviewing `vectors/device-kat.json`;
//! the check itself is `tests/kat.rs`.
//!
//! ```text
//! cargo run -p sigil-devbench --example print-kat
//! cargo run -p sigil-devbench --features rsa --example print-kat   # and the RSA operations
//! ```

use sigil_crypto::RustCrypto;
use sigil_devbench::{operations, MAX_OUTPUT};

fn main() {
    let ops = operations::<RustCrypto>().into_iter();
    #[cfg(feature = "rsa")]
    let ops = ops.chain(sigil_devbench::rsa::operations::<RustCrypto>());
    for op in ops {
        let mut out = [0u8; MAX_OUTPUT];
        match (op.run)(&RustCrypto, &mut out) {
            Ok(n) => println!("{} {}", op.name, hex::encode(&out[..n])),
            Err(e) => println!("{} error {e:?}", op.name),
        }
    }
}
