//! The emulator's cycle tables (`energy.rs`) are copies of what `scripts/bench-device`
//! measured; this fails when they drift from its machine-readable output,
//! `docs/device-cycles.json` (written by tools/devbench/report.py with docs/device-costs.md).

use sigil_netsim::energy::{CycleTable, AVR, CORTEX_M4_FAST, CORTEX_M4_PORTABLE};
use std::path::PathBuf;

fn measured() -> serde_json::Value {
    // The workspace root is the nearest ancestor holding docs/device-cycles.json.
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        let path = dir.join("docs/device-cycles.json");
        if path.exists() {
            return serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        }
        assert!(
            dir.pop(),
            "docs/device-cycles.json not found above the crate"
        );
    }
}

/// Every field of the table, by the harness's operation name.
fn entries(t: &CycleTable) -> Vec<(&'static str, Option<u64>)> {
    vec![
        ("sign_ed25519", t.sign_ed25519),
        ("verify_ed25519", t.verify_ed25519),
        ("keygen_ed25519", t.keygen_ed25519),
        ("sign_p256", t.sign_p256),
        ("verify_p256", t.verify_p256),
        ("keygen_p256", t.keygen_p256),
        ("ecdh_p256", t.ecdh_p256),
        ("x25519", t.x25519),
        ("sha256_256", Some(t.sha256_256)),
        ("ccm8_16", Some(t.ccm8_16)),
        ("ccm8_256", Some(t.ccm8_256)),
    ]
}

#[test]
fn cycle_tables_match_the_device_cost_run() {
    let doc = measured();
    for (table, variant) in [
        (&CORTEX_M4_PORTABLE, "m4-rustcrypto"),
        (&CORTEX_M4_FAST, "m4-fast"),
        (&AVR, "avr-s"),
    ] {
        let run = doc["cycles"][variant]
            .as_object()
            .unwrap_or_else(|| panic!("{variant} missing from docs/device-cycles.json"));
        for (op, cycles) in entries(table) {
            // A table prices exactly what was measured: a number where the run has one,
            // `None` (refuse to price) where it has none.
            assert_eq!(
                cycles,
                run.get(op).map(|v| v.as_u64().unwrap()),
                "{} {op}: energy.rs disagrees with docs/device-cycles.json ({variant})",
                table.name
            );
        }
    }
}
