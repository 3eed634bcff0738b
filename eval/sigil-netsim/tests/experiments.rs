//! The evaluation's quick run: deterministic (the same plan gives the same numbers, thread
//! count included), and its figures say what the protocols must.

use sigil_netsim::experiments::{run_all, Plan};

#[test]
fn the_quick_evaluation_is_deterministic_and_consistent() {
    let mut a = run_all(Plan {
        quick: true,
        threads: 2,
    });
    let mut b = run_all(Plan {
        quick: true,
        threads: 1,
    });
    a["elapsed_s"] = 0.into();
    b["elapsed_s"] = 0.into();
    assert_eq!(a, b, "same plan, same results");

    // Fig. 5: every secured echo is slower than the plain one, by at least its 29 bytes.
    for s in a["fig5"]["series"].as_array().unwrap() {
        let p = s["plain_ms"].as_array().unwrap();
        let d = s["dtls_ms"].as_array().unwrap();
        for (p, d) in p.iter().zip(d) {
            assert!(d.as_f64().unwrap() >= p.as_f64().unwrap() + 29.0 * 0.072);
        }
    }
    // Fig. 7: every handshake completes on a clean link, and loss never makes one faster.
    let cells = a["fig7"]["seed_timers"].as_array().unwrap();
    for c in cells {
        if c["loss"] == 0.0 {
            assert_eq!(c["completed"], c["runs"], "{c}");
        }
    }
    for m in [64, 512, 1024] {
        let at = |l: f64| {
            cells
                .iter()
                .find(|c| c["pmtu"] == m && (c["loss"].as_f64().unwrap() - l).abs() < 1e-9)
                .unwrap()["median_s"]
                .as_f64()
                .unwrap()
        };
        assert!(at(0.1) > at(0.0), "MTU {m}");
    }
    // Carriers: both complete every clean-link run; the CoAP carrier's DTLS bytes are the
    // record carrier's (or fewer, without fragment headers), CoAP's header on top. The two
    // ECDSA signatures a mutual handshake sends may each be a byte longer or shorter in DER,
    // as their nonces differ between the runs.
    for c in a["carriers"]["cells"].as_array().unwrap() {
        if c["loss"] == 0.0 {
            assert_eq!(c["in_time"], c["runs"], "{c}");
        }
    }
    let clean = a["carriers"]["clean"].as_array().unwrap();
    for pair in clean.chunks(2) {
        let (records, coap) = (&pair[0], &pair[1]);
        assert_eq!(records["size"], coap["size"]);
        assert!(coap["coap_bytes"].as_u64().unwrap() > 0);
        let calibrated = records["calibrated"]["udp_bytes"].as_u64().unwrap();
        assert!(
            coap["dtls_bytes"].as_u64().unwrap() <= calibrated + 2,
            "{coap}"
        );
    }
    // Fig. 9: the CCM-8 record overhead measured on a real session.
    assert_eq!(a["fig9"]["ccm8_overhead"], 29);
    // Crossover: every reading of every scheme arrives on the clean link; DTLS PSK pays for
    // its handshake within a few readings; the signed reading is the only one that needs a
    // signature per reading besides CryptoDiet.
    for p in a["crossover"]["periods"].as_array().unwrap() {
        let schemes = p["schemes"].as_array().unwrap();
        for s in schemes {
            assert_eq!(
                s["reading"]["delivered"], s["reading"]["readings"],
                "{}",
                s["name"]
            );
        }
        let psk = schemes.iter().find(|s| s["name"] == "DTLS PSK").unwrap();
        assert!(psk["crossover_n"].as_f64().unwrap() <= 3.0);
    }
}
