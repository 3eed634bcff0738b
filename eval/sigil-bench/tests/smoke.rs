//! Each benchmark subcommand runs end to end on a small load and reports numbers that hang
//! together. Timings are not asserted (this machine is shared); counts and bytes are.

use std::process::Command;

fn bench(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_sigil-bench"))
        .args(args)
        .output()
        .expect("run sigil-bench");
    assert!(
        out.status.success(),
        "sigil-bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("sigil-bench --json prints JSON")
}

#[test]
fn wire_reports_every_form_within_its_frame_budget() {
    let rows = bench(&["wire", "--json"]);
    let rows = rows.as_array().expect("an array of forms");
    assert!(rows.len() >= 4, "{rows:?}");
    for r in rows {
        let payload = r["payload"].as_u64().unwrap();
        let message = r["coap_message"].as_u64().unwrap();
        let signed = !r["form"].as_str().unwrap().starts_with("unsigned");
        assert_eq!(
            signed,
            payload > 64,
            "a signed reading carries a signature: {r}"
        );
        assert!(message > payload, "the CoAP message wraps the payload: {r}");
        assert_eq!(
            r["fits_one_frame"].as_bool().unwrap(),
            message <= r["budget"].as_u64().unwrap(),
            "{r}"
        );
    }
}

#[test]
fn server_acknowledges_every_reading_it_was_sent() {
    // Enough readings that the server's CPU time spans several of the kernel's 10 ms
    // accounting ticks, so CPU per reading is measured rather than rounded to zero.
    let v = bench(&[
        "server",
        "--sensors",
        "4",
        "--readings",
        "100",
        "--runs",
        "1",
        "--json",
    ]);
    let run = &v["runs"][0];
    assert_eq!(run["sensors"], 4);
    assert_eq!(run["readings"], 400, "{run}");
    assert_eq!(run["acknowledged"], 400, "{run}");
    assert!(
        run["server_cpu_us_per_reading"].as_f64().unwrap() > 0.0,
        "{run}"
    );
    assert!(v["median_ratio_per_core"].as_f64().unwrap() > 0.0);
}

#[test]
fn dtls_measures_sigil_beside_openssl() {
    let v = bench(&["dtls", "--runs", "1", "--json"]);
    let rows = v["handshakes"].as_array().unwrap();
    let row = |imp: &str, mode: &str| {
        rows.iter()
            .find(|r| r["implementation"] == imp && r["mode"] == mode)
            .unwrap_or_else(|| panic!("no {imp} {mode} row in {rows:?}"))
    };
    let ours = row("sigil", "PSK-CCM8");
    let theirs = row("OpenSSL 3", "PSK-CCM8");
    assert!(
        ours["bytes"].as_u64() < theirs["bytes"].as_u64(),
        "no session ticket and no padding: {ours} vs {theirs}"
    );
    for r in [ours, theirs] {
        assert!(r["datagrams"].as_u64().unwrap() >= 4, "{r}");
        assert!(r["bytes"].as_u64().unwrap() > 200, "{r}");
    }
    let overhead = v["record_overhead"].as_array().unwrap();
    assert!(
        overhead.iter().any(|o| o[1] == 29),
        "CCM-8 adds 13 bytes of header, 8 of explicit nonce and 8 of tag: {overhead:?}"
    );
}
