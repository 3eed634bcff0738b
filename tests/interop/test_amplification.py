"""coap:// is no reflector (RFC 9175 §2.4): a request from an address that has not shown it
receives gets an answer at most three times its size; a larger answer waits for the client to
repeat the request with the Echo value of a 4.01. aiocoap and libcoap's coap-client do that on
their own; a raw socket shows what a spoofed request would reflect."""
import shutil
import socket
import subprocess

import cbor2
from aiocoap import GET, PUT, Message
from aiocoap.numbers.codes import Code

from test_aiocoap_pycose import Ed25519Device, register, request, run, senml

CLIENT = shutil.which("coap-client-notls") or shutil.which("coap-client") or shutil.which("coap-client-gnutls")


def topic_with_history(server, readings=20):
    dev = Ed25519Device()
    server.provision(dev.identity)
    topic = register(server, dev)
    for seq in range(1, readings + 1):
        r = run(request(PUT, f"{server.uri}/{topic}", dev.sign(seq, senml(20.0 + seq)), content_format=18))
        assert r.code == Code.CHANGED
    return topic


def option_bytes(delta: int, value: bytes) -> bytes:
    """One option (RFC 7252 §3.1), deltas and lengths up to 268."""
    def nibble(n):
        return (n, b"") if n < 13 else (13, bytes([n - 13]))
    d, dx = nibble(delta)
    ln, lx = nibble(len(value))
    return bytes([d << 4 | ln]) + dx + lx + value


def get(path: str, mid: int, echo: bytes = None) -> bytes:
    """A Confirmable GET with a 1-byte token, encoded by hand."""
    p, _, q = path.partition("?")
    opts = [(11, seg.encode()) for seg in p.split("/")] + [(15, x.encode()) for x in q.split("&") if x]
    if echo is not None:
        opts.append((252, echo))
    out, last = bytearray([0x41, 0x01, mid >> 8, mid & 0xFF, 0x07]), 0
    for number, value in opts:
        out += option_bytes(number - last, value)
        last = number
    return bytes(out)


def exchange(sock, port, datagram: bytes) -> bytes:
    sock.sendto(datagram, ("127.0.0.1", port))
    data, _ = sock.recvfrom(4096)
    return data


def test_aiocoap_completes_a_large_get_through_echo(server):
    topic = topic_with_history(server)
    resp = run(request(GET, f"{server.uri}/{topic}?n=100"))
    assert resp.code == Code.CONTENT
    assert len(cbor2.loads(resp.payload)) == 20
    assert len(resp.payload) > 1024  # more than one block, each behind the Echo check
    lookup = run(request(GET, f"{server.uri}/rd-lookup/res"))
    assert lookup.code == Code.CONTENT and topic.encode() in lookup.payload


def test_libcoap_repeats_the_request_with_echo(server):
    topic = topic_with_history(server)
    out = subprocess.run([CLIENT, "-m", "get", "-B", "20", f"{server.uri}/rd-lookup/res"],
                         capture_output=True, timeout=60)
    assert topic.encode() in out.stdout, out


def test_a_small_unverified_request_gets_at_most_three_times_its_size(server):
    topic = topic_with_history(server)
    for i, path in enumerate([f"{topic}?n=100", "rd-lookup/res", "ps"]):
        # A new socket: an address and port the server has not seen.
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.settimeout(5)
        try:
            req = get(path, 100 + 2 * i)
            answer = exchange(sock, server.port, req)
            assert len(answer) <= 3 * len(req), (path, len(answer), len(req))
            challenge = Message.decode(answer)
            assert challenge.code == Code.UNAUTHORIZED and challenge.opt.echo, path
            full = exchange(sock, server.port, get(path, 101 + 2 * i, challenge.opt.echo))
            assert Message.decode(full).code == Code.CONTENT, path
            assert len(full) > 3 * len(req), (path, len(full), len(req))
            # The address is verified now: the next request gets its answer at once.
            again = Message.decode(exchange(sock, server.port, get(path, 300 + i)))
            assert again.code == Code.CONTENT
        finally:
            sock.close()
