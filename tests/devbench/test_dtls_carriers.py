"""The DTLS carrier comparison's checks (tools/devbench/dtls_carriers.py): the record-carrier
symbol detector and what fails a run. Needs no image."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "devbench"))

import dtls_carriers  # noqa: E402
from dtls_carriers import RECORD_CARRIER, check, symbol_path  # noqa: E402


def test_rust_symbols_are_read_as_paths():
    assert symbol_path("_ZN10sigil_dtls4conn11Handshaking15handle_fragment17h48814256cfa6590bE") == \
        "sigil_dtls::conn::Handshaking::handle_fragment"
    assert symbol_path("_ZN10sigil_dtls4conn23Connection$LT$C$C$T$GT$5state17h0123456789abcdefE") == \
        "sigil_dtls::conn::Connection<C,T>::state"
    assert symbol_path("memcpy") == "memcpy"


def test_the_record_carriers_code_is_recognised_and_the_shared_code_is_not():
    for path in ("sigil_dtls::conn::record_carrier::Handshaking::handle_fragment",
                 "sigil_dtls::conn::record_carrier::RecordIo::send_flight",
                 "sigil_dtls::conn::connection::Connection<C,T>::poll_transmit",
                 "sigil_dtls::conn::record_layer::RecordLayer::overhead", "sigil_dtls::flight::Timer::expired",
                 "sigil_dtls::flight::Ahead::keep", "sigil_dtls::handshake::Reassembler<512>::add"):
        assert RECORD_CARRIER.search(path), path
    for path in ("sigil_dtls::whole::Handshaking::intake", "sigil_dtls::conn::record_layer::RecordLayer::seal",
                 "sigil_dtls::flight::Queue<0>::pop", "sigil_dtls::traffic::TrafficCore::send",
                 "sigil_dtls_coap::client::Client<C,T>::handle_datagram"):
        assert not RECORD_CARRIER.search(path), path


def run_result(carrier, record_carrier):
    n = dtls_carriers.SESSIONS
    return {"carrier": carrier, "halt_code": 0, "handshakes": n, "answers": n,
            "server": f"handshakes {n} requests {n}", "server_log": "", "record_carrier": record_carrier}


def test_a_coap_carrier_image_with_record_carrier_code_fails():
    assert check("m4-dtls-coap", run_result("coap", [])) == []
    why = check("m4-dtls-coap", run_result("coap", [("sigil_dtls::conn::RecordIo::send_flight", 880)]))
    assert len(why) == 1 and "record carrier" in why[0]


def test_a_record_layer_image_without_record_carrier_code_fails():
    assert check("m4-dtls-records", run_result("records", [("sigil_dtls::conn::Handshaking::fail", 122)])) == []
    assert check("m4-dtls-records", run_result("records", [])) != []


def test_an_unfinished_handshake_fails():
    r = run_result("records", [("x", 1)])
    r["handshakes"] = 1
    r["server"] = "handshakes 1 requests 1"
    assert len(check("m4-dtls-records", r)) == 2
