"""Fixtures for interop tests: a running `sigil server` and helpers written independently of
the Rust code (identities with hashlib, per docs/identity.md)."""
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import time

import pytest

SIGIL = os.environ.get("SIGIL_BIN") or os.path.join(os.path.dirname(__file__), "..", "..", "target", "debug", "sigil")

ALG_TAG = {"ed25519": 1, "p256": 2}


def identity_of(alg: str, key: bytes, other: bytes = b"") -> str:
    """I = h(P|O) with Sigil's layout v1 (docs/identity.md), computed from the spec."""
    data = b"sigil-identity-v1\x00" + bytes([ALG_TAG[alg], len(key)]) + key + struct.pack(">I", len(other)) + other
    return hashlib.sha256(data).digest()[:16].hex()


def group_of(keys):
    entries = sorted((ALG_TAG[a], k) for a, k in keys)
    data = b"sigil-group-v1\x00" + struct.pack(">H", len(entries))
    for tag, k in entries:
        data += bytes([tag, len(k)]) + k
    return hashlib.sha256(data).digest()[:16].hex()


def member_of(own, others):
    entries = sorted((ALG_TAG[a], k) for a, k in others)
    data = b"sigil-member-v1\x00" + bytes([ALG_TAG[own[0]], len(own[1])]) + own[1] + struct.pack(">H", len(entries))
    for tag, k in entries:
        data += bytes([tag, len(k)]) + k
    return hashlib.sha256(data).digest()[:16].hex()


async def request_with_echo(ctx, msg, timeout=30):
    """One aiocoap request over coap://, repeated once with the Echo value of a 4.01
    Unauthorized (RFC 9175 §2.4). aiocoap 0.4 answers Echo by itself only under OSCORE; the
    Sigil server asks for it before an answer larger than three times the request goes to an
    address that has not shown it receives. Later blocks of a Block2 answer are sent from the
    same address, which the server then remembers as verified."""
    import asyncio

    from aiocoap.numbers.codes import Code

    first = msg.copy()
    resp = await asyncio.wait_for(ctx.request(first).response, timeout)
    if resp.code == Code.UNAUTHORIZED and resp.opt.echo is not None:
        resp = await asyncio.wait_for(ctx.request(msg.copy(echo=resp.opt.echo)).response, timeout)
    return resp


def free_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def sigil(*args, check=True):
    return subprocess.run([SIGIL, *args], capture_output=True, text=True, check=check, timeout=120)


def wait_ready(port: int):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.1)
    deadline = time.time() + 20
    while time.time() < deadline:
        s.sendto(bytes([0x40, 0x00, 0x12, 0x34]), ("127.0.0.1", port))
        try:
            data, _ = s.recvfrom(16)
            if len(data) == 4:
                return
        except socket.timeout:
            pass
    raise RuntimeError("sigil server did not come up")


class Server:
    def __init__(self, tmp_path, *extra):
        self.db = str(tmp_path / "sigil.db")
        self.port = free_port()
        self.dport = free_port()
        self.uri = f"coap://127.0.0.1:{self.port}"
        self.coaps = f"coaps://127.0.0.1:{self.dport}"
        # Its stderr (logs, and the counters as JSON when it stops) is kept for stop_stats().
        self.stderr_path = tmp_path / f"server-{self.port}.stderr"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([SIGIL, "server", "--listen", f"127.0.0.1:{self.port}",
                                          "--dtls-listen", f"127.0.0.1:{self.dport}", "--db", self.db, *extra],
                                         stdout=subprocess.PIPE, stderr=err, text=True)
        # Its start-up lines (coap:// address, its key, then
        # "sigil server listening on coaps://ADDR (DTLS server identity ID)").
        self.identity = None
        for _ in range(3):
            line = self.proc.stdout.readline()
            if "DTLS server identity" in line:
                self.identity = line.rsplit(" ", 1)[1].strip(" )\n")
                break
        wait_ready(self.port)

    def provision(self, identity: str, group=False):
        args = ["provision", "--db", self.db, "add", identity]
        if group:
            args.append("--group")
        sigil(*args)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop_stats(self) -> dict:
        """Stops the server with SIGTERM and returns the counters it prints on stderr as JSON."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=20)
        err = self.stderr_path.read_text()
        return json.JSONDecoder().raw_decode(err[err.rindex("\n{") + 1:])[0]


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.stop()
