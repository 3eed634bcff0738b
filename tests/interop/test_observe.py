"""CoAP Observe (RFC 7641) on broker topics with clients nobody here wrote: aiocoap over coap://,
libcoap's coap-client over coap:// and over coaps:// with a pre-shared key. A real `sigil
sensor` publishes; every notification carries the COSE_Sign1 bytes the sensor signed, and pycose
verifies each under the key the directory announces (hashed to the sensor's identity in Python).
The server's own counters (printed on SIGTERM) show what it registered and what ended it."""
import asyncio
import base64
import io
import logging
import shutil
import subprocess
import time
import warnings

import cbor2
import pytest
from aiocoap import GET, Context, Message
from aiocoap.numbers.codes import Code
from pycose.headers import KID
from pycose.keys import EC2Key, OKPKey
from pycose.keys.curves import P256, Ed25519
from pycose.messages import Sign1Message

from conftest import Server, identity_of, request_with_echo, sigil

SEQ = -65537  # Sigil's private-use sequence-number header (docs/wire-formats.md)
REFRESH = 1  # --observe-refresh in seconds: notifications carry Max-Age twice this
CLIENT = shutil.which("coap-client-notls") or shutil.which("coap-client") or shutil.which("coap-client-gnutls")
DTLS_CLIENT = shutil.which("coap-client-gnutls")
PSK_TEXT = "sigil-observe-k1"  # 16 bytes; libcoap's -k takes the key as text


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path, "--observe-refresh", f"{REFRESH}s")
    yield s
    s.stop()


class Sensor:
    """A provisioned `sigil sensor` (its own process per batch of readings) and what the
    directory says about it: its topic and public key."""

    def __init__(self, server, tmp_path, alg="ed25519", lookup=None):
        """`lookup(identity)`: the directory's link for the sensor (by default aiocoap over
        coap://)."""
        self.server, self.alg = server, alg
        self.state = str(tmp_path / f"sensor-{alg}")
        self.identity = sigil("sensor", "--state", self.state, "--alg", alg, "--print-identity").stdout.split()[0]
        server.provision(self.identity)
        self.publish(1)
        link = (lookup or lookup_res)(server, self.identity)
        self.href = link[link.index("<") + 1:link.index(">")]
        assert "/ps/" in self.href and self.href.endswith("/m"), link
        self.path = "/ps/" + self.href.split("/ps/", 1)[1]
        key_b64 = link.split('key="')[1].split('"')[0]
        self.key = base64.urlsafe_b64decode(key_b64 + "==")
        assert identity_of(alg, self.key) == self.identity, "the announced key hashes to the identity"

    def publish(self, count: int):
        out = sigil("sensor", "--server", self.server.uri, "--state", self.state, "--interval", "50ms",
                    "--count", str(count))
        assert '"rejected": []' in out.stdout, out.stdout + out.stderr

    def verify(self, raw: bytes) -> int:
        """Verifies one reading with pycose under the announced key; its sequence number."""
        m = Sign1Message.decode(raw)
        if self.alg == "ed25519":
            m.key = OKPKey(crv=Ed25519, x=self.key)
        else:
            m.key = EC2Key(crv=P256, x=self.key[1:33], y=self.key[33:])
        assert m.verify_signature(), "pycose verifies the notified reading"
        assert m.phdr[KID] == bytes.fromhex(self.identity)
        return m.phdr[SEQ]


def lookup_res(server, identity) -> str:
    resp = asyncio.run(get_latest(f"{server.uri}/rd-lookup/res?ep={identity}"))
    assert resp.code == Code.CONTENT, resp
    return resp.payload.decode()


class RstSeen(logging.Handler):
    """Counts the Resets aiocoap sends to notifications it no longer holds a request for."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def emit(self, record):
        if "sending RST" in record.getMessage():
            self.count += 1


async def wait_until(cond, timeout):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            return False
        await asyncio.sleep(0.05)
    return True


def test_aiocoap_observes_a_topic_and_pycose_verifies_each_notification(server, tmp_path):
    sensor = Sensor(server, tmp_path)

    async def scenario():
        ctx = await Context.create_client_context()
        rst = RstSeen()
        aiolog = logging.getLogger("coap")
        aiolog.addHandler(rst)
        old_level = aiolog.level
        aiolog.setLevel(logging.INFO)
        try:
            msg = Message(code=GET, uri=sensor.href, observe=0)
            # The server asks an address that has not shown it receives for Echo first
            # (RFC 9175 §2.4): a 4.01 without Observe; aiocoap repeats nothing by itself
            # on coap://, so the test repeats the registration with the value.
            first = await asyncio.wait_for(ctx.request(msg.copy()).response, 10)
            assert first.code == Code.UNAUTHORIZED, first
            assert first.opt.echo is not None and first.opt.observe is None
            req = ctx.request(msg.copy(echo=first.opt.echo))
            got = []
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                req.observation.register_callback(got.append)
            resp = await asyncio.wait_for(req.response, 10)
            assert resp.code == Code.CONTENT, resp
            assert resp.opt.observe is not None, "the registration is answered with Observe"
            assert resp.opt.content_format == 18
            assert resp.opt.max_age == 2 * REFRESH
            start = sensor.verify(resp.payload)
            assert resp.opt.etag == start.to_bytes(8, "big")

            # 17 readings: one notification in 16 is Confirmable, and aiocoap acknowledges it.
            await asyncio.to_thread(sensor.publish, 17)

            def new():
                return {sensor.verify(n.payload) for n in got if n.payload} - {start}

            assert await wait_until(lambda: len(new()) >= 17, 10), f"notifications: {len(got)}, new readings {new()}"
            seqs = []
            for n in got:
                assert n.code == Code.CONTENT and n.opt.observe is not None, n
                assert n.opt.content_format == 18 and n.opt.max_age == 2 * REFRESH
                seq = sensor.verify(n.payload)
                assert n.opt.etag == seq.to_bytes(8, "big"), "ETag is the reading's sequence number"
                seqs.append(seq)
            # Readings in the order taken: each notification at least as new as the last
            # (a refresh repeats the latest), all 17 above the one the registration carried.
            assert seqs == sorted(seqs) and seqs[0] >= start, seqs
            assert len(set(seqs) - {start}) >= 17 and min(set(seqs) - {start}) > start, seqs

            # aiocoap forgets the observation; the server learns it from the Reset aiocoap
            # sends to the next Confirmable notification (RFC 7641 §3.6). One in 16 is
            # Confirmable, so 17 more readings bring one.
            req.observation.cancel()
            before = len(got)
            await asyncio.to_thread(sensor.publish, 17)
            assert await wait_until(lambda: rst.count >= 1, 10), "aiocoap reset a notification after cancel"
            assert len(got) == before, "nothing is delivered after cancel"
            await asyncio.sleep(0.5)  # the Reset reaches the server before it is stopped
        finally:
            aiolog.removeHandler(rst)
            aiolog.setLevel(old_level)
            await ctx.shutdown()

    asyncio.run(scenario())
    stats = server.stop_stats()
    assert stats.get("observe.echo_first", 0) >= 1, stats
    assert stats.get("observe.registered", 0) >= 1, stats
    assert stats.get("observe.notified.con", 0) >= 2, stats
    assert stats.get("observe.acknowledged", 0) >= 1, "aiocoap acknowledged a Confirmable notification"
    assert stats.get("observe.deregistered", 0) + stats.get("observe.cancelled.reset", 0) >= 1, stats
    assert stats.get("observe.observers") == 0, "the cancelled observation is gone"


def test_aiocoap_observation_ends_with_the_refusal_when_the_sensor_is_revoked(server, tmp_path):
    """Before each notification the server checks the reader's right again (here at the
    one-second refresh): once the sensor is revoked the observer gets the refusal as the last
    notification, without Observe (RFC 7641 §3.2), and aiocoap ends the observation."""
    sensor = Sensor(server, tmp_path)

    async def scenario():
        ctx = await Context.create_client_context()
        try:
            msg = Message(code=GET, uri=sensor.href, observe=0)
            first = await asyncio.wait_for(ctx.request(msg.copy()).response, 10)
            assert first.code == Code.UNAUTHORIZED and first.opt.echo is not None, first
            req = ctx.request(msg.copy(echo=first.opt.echo))
            got, ended = [], []
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                req.observation.register_callback(got.append)
                req.observation.register_errback(ended.append)
            resp = await asyncio.wait_for(req.response, 10)
            assert resp.code == Code.CONTENT and resp.opt.observe is not None, resp
            start = sensor.verify(resp.payload)
            await asyncio.to_thread(sensor.publish, 1)
            assert await wait_until(lambda: any(n.payload and sensor.verify(n.payload) > start
                                                for n in got if n.code == Code.CONTENT), 10), got
            await asyncio.to_thread(sigil, "provision", "--db", server.db, "revoke", sensor.identity)
            assert await wait_until(lambda: ended, 10), f"the observation did not end: {got}"
            last = got[-1]
            assert last.code == Code.FORBIDDEN and last.opt.observe is None, last
            assert all(n.code == Code.CONTENT for n in got[:-1]), got
        finally:
            await ctx.shutdown()

    asyncio.run(scenario())
    stats = server.stop_stats()
    assert stats.get("observe.registered", 0) == 1, stats
    assert stats.get("observe.ended.refused", 0) == 1, stats
    assert stats.get("observe.observers") == 0, stats

def readings_in(data: bytes):
    """The readings coap-client wrote one after another (-o): each as the bytes it came as."""
    f = io.BytesIO(data)
    dec = cbor2.CBORDecoder(f)
    out = []
    while f.tell() < len(data):
        start = f.tell()
        dec.decode()
        out.append(data[start:f.tell()])
    return out


def libcoap_observe(client, uri, sensor, tmp_path, *args, seconds=8, then=None):
    """coap-client observing `uri` for `seconds` (-s); once the observation is established,
    `then()` runs, by default the sensor publishing 17 readings (one notification in 16 is
    Confirmable, so libcoap acknowledges at least one). Returns the payloads it received (-o),
    the notifications' headers as libcoap logs them (-v 7) and the whole log."""
    out, log_path = tmp_path / "observed.bin", tmp_path / "coap-client.log"
    with open(log_path, "wb") as log_file:
        p = subprocess.Popen([client, *args, "-v", "7", "-o", str(out), "-s", str(seconds), "-m", "get", uri],
                             stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + seconds
        while p.poll() is None and time.time() < deadline:
            if b"observation relationship established" in log_path.read_bytes():
                then() if then else sensor.publish(17)
                break
            time.sleep(0.05)
        p.wait(timeout=seconds + 20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = log_path.read_bytes().decode(errors="replace")
    log = text.splitlines()
    assert p.returncode == 0, text[-3000:]
    assert any("observation relationship established" in l for l in log), text[-3000:]
    headers = [l for l in log if "c:2.05" in l and "Observe:" in l]
    return readings_in(out.read_bytes() if out.exists() else b""), headers, text


def check_notifications(sensor, readings, headers, start, new=17):
    """Every reading verifies with pycose; one per 2.05-with-Observe libcoap logged, with the
    reading's sequence number as ETag and Max-Age twice the refresh; `new` above `start`, and
    (with 17) a Confirmable one among them."""
    seqs = [sensor.verify(r) for r in readings]
    assert len(seqs) == len(headers), (seqs, headers)
    for seq, h in zip(seqs, headers):
        assert f"ETag:0x{seq:016x}" in h, (seq, h)
        assert f"Max-Age:{2 * REFRESH}" in h, h
    observe = [int(h.split("Observe:")[1].split(",")[0].split(" ")[0]) for h in headers]
    assert observe == sorted(observe) and len(set(observe)) == len(observe), observe
    assert seqs == sorted(seqs), seqs
    assert len(set(seqs) - {start}) >= new and min(set(seqs) - {start}) > start, (start, seqs)
    if new >= 16:
        assert any("t:CON c:2.05" in h for h in headers), "a Confirmable notification came"


def latest_seq(sensor):
    resp = asyncio.run(get_latest(sensor.href))
    assert resp.code == Code.CONTENT, resp
    return sensor.verify(resp.payload)


async def get_latest(uri):
    ctx = await Context.create_client_context()
    try:
        return await request_with_echo(ctx, Message(code=GET, uri=uri))
    finally:
        await ctx.shutdown()


def test_libcoap_observes_a_topic_over_coap(server, tmp_path):
    assert CLIENT, "coap-client not found: run scripts/install-test-deps"
    sensor = Sensor(server, tmp_path)
    start = latest_seq(sensor)
    readings, headers, log = libcoap_observe(CLIENT, sensor.href, sensor, tmp_path)
    # libcoap answers the server's Echo challenge itself (RFC 9175): a 4.01 with Echo, the
    # registration repeated with the value.
    assert "c:4.01" in log and "Echo:" in log, log[-3000:]
    check_notifications(sensor, readings, headers, start)
    # At the end of -s it deregisters (GET with Observe 1, RFC 7641 §3.6).
    assert "Observe:1, Uri-Port" in log, log[-3000:]
    time.sleep(1)  # the deregistration reaches the server before it stops
    stats = server.stop_stats()
    assert stats.get("observe.echo_first", 0) >= 1, stats
    assert stats.get("observe.registered", 0) >= 1, stats
    assert stats.get("observe.notified.con", 0) >= 1, stats
    assert stats.get("observe.acknowledged", 0) >= 1, "libcoap acknowledged the Confirmable notification"
    assert stats.get("observe.deregistered", 0) >= 1, stats
    assert stats.get("observe.observers") == 0, stats


def test_libcoap_observes_a_topic_over_coaps_with_psk(server, tmp_path):
    assert DTLS_CLIENT, "coap-client-gnutls not found: run scripts/install-test-deps"
    sensor = Sensor(server, tmp_path)
    start = latest_seq(sensor)
    reader = "0123456789abcdef0123456789abcdef"
    server.provision(reader)
    sigil("provision", "--db", server.db, "psk", reader, "--key", PSK_TEXT.encode().hex())
    readings, headers, log = libcoap_observe(DTLS_CLIENT, server.coaps + sensor.path, sensor, tmp_path,
                                             "-u", reader, "-k", PSK_TEXT)
    # A DTLS session has shown it receives: no Echo challenge.
    assert "c:4.01" not in log, log[-3000:]
    check_notifications(sensor, readings, headers, start)
    assert "Observe:1, Uri-Port" in log, log[-3000:]
    time.sleep(1)
    stats = server.stop_stats()
    assert stats.get("dtls.handshake_completed", 0) >= 1, stats
    assert stats.get("observe.echo_first", 0) == 0, stats
    assert stats.get("observe.registered", 0) >= 1, stats
    assert stats.get("observe.notified.con", 0) >= 1, stats
    assert stats.get("observe.acknowledged", 0) >= 1, "libcoap acknowledged the Confirmable notification"
    assert stats.get("observe.deregistered", 0) >= 1, stats
    assert stats.get("observe.observers") == 0, stats


def test_libcoap_over_coaps_observes_only_while_granted(tmp_path):
    """With --authorize-reads a PSK reader without a grant is refused the observation (4.03);
    granted, it observes; when the grant is withdrawn, the next check (the one-second
    refresh) sends the refusal as the last notification and the observation ends."""
    assert DTLS_CLIENT, "coap-client-gnutls not found: run scripts/install-test-deps"
    server = Server(tmp_path, "--observe-refresh", f"{REFRESH}s", "--authorize-reads")
    try:
        reader = "0123456789abcdef0123456789abcdef"
        server.provision(reader)
        sigil("provision", "--db", server.db, "psk", reader, "--key", PSK_TEXT.encode().hex())
        psk = ("-u", reader, "-k", PSK_TEXT)

        def lookup(server, identity):
            out = subprocess.run([DTLS_CLIENT, *psk, "-m", "get", f"{server.coaps}/rd-lookup/res?ep={identity}"],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode == 0 and "<coaps://" in out.stdout, out.stdout + out.stderr
            return out.stdout

        sensor = Sensor(server, tmp_path, lookup=lookup)
        uri = server.coaps + sensor.path
        # Not granted: the registration is refused, nothing is observed.
        refused = subprocess.run([DTLS_CLIENT, *psk, "-v", "7", "-s", "2", "-m", "get", uri],
                                 capture_output=True, timeout=30)
        refused_log = refused.stdout.decode(errors="replace")
        assert "c:4.03" in refused_log and "observation relationship established" not in refused_log, refused_log[-3000:]

        sigil("provision", "--db", server.db, "grant", reader, sensor.identity)
        latest = subprocess.run([DTLS_CLIENT, *psk, "-m", "get", uri], capture_output=True, timeout=30).stdout
        start = sensor.verify(readings_in(latest)[0])  # a newline may follow: CBOR 10

        def publish_then_ungrant():
            sensor.publish(2)
            sigil("provision", "--db", server.db, "ungrant", reader, sensor.identity)

        readings, headers, log = libcoap_observe(DTLS_CLIENT, uri, sensor, tmp_path, *psk, seconds=6,
                                                 then=publish_then_ungrant)
        check_notifications(sensor, readings, headers, start, new=2)
        lines = [line for line in log.splitlines() if "c:2.05" in line or "c:4.03" in line]
        assert "c:4.03" in lines[-1] and "no read grant" in lines[-1] and "Observe:" not in lines[-1], lines[-3:]
        assert sum("c:4.03" in line for line in lines) == 1, lines
    finally:
        stats = server.stop_stats()
    assert stats.get("observe.registered", 0) == 1, stats
    assert stats.get("observe.ended.refused", 0) == 1, stats
    assert stats.get("observe.observers") == 0, stats


def test_libcoap_beyond_the_per_host_cap_is_answered_without_observe(tmp_path):
    """With --max-observers-per-host 1, a second observer from the same address gets the
    reading once, without Observe (RFC 7641 §4.1: not registered); a newcomer from another
    address (127.0.0.2) still registers."""
    assert CLIENT, "coap-client not found: run scripts/install-test-deps"
    server = Server(tmp_path, "--observe-refresh", f"{REFRESH}s", "--max-observers-per-host", "1")
    try:
        sensor = Sensor(server, tmp_path)
        log_path = tmp_path / "first.log"
        with open(log_path, "wb") as log_file:
            first = subprocess.Popen([CLIENT, "-v", "7", "-s", "6", "-m", "get", sensor.href], stdout=log_file,
                                     stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 6
            while b"observation relationship established" not in log_path.read_bytes():
                assert first.poll() is None and time.time() < deadline, log_path.read_text(errors="replace")[-3000:]
                time.sleep(0.05)

            def observe_once(*args):
                out = tmp_path / "once.bin"
                r = subprocess.run([CLIENT, *args, "-v", "7", "-o", str(out), "-s", "1", "-m", "get", sensor.href],
                                   capture_output=True, timeout=30)
                log = r.stdout.decode(errors="replace")
                answers = [line for line in log.splitlines() if "c:2.05" in line]
                return answers, log, readings_in(out.read_bytes())

            answers, log, readings = observe_once()
            assert "observation relationship established" not in log, log[-3000:]
            assert len(answers) == 1 and "Observe:" not in answers[0], answers
            assert len(readings) == 1
            sensor.verify(readings[0])
            answers, log, readings = observe_once("-a", "127.0.0.2")
            assert "observation relationship established" in log, log[-3000:]
            assert "Observe:" in answers[0], answers
        finally:
            first.wait(timeout=30)
    finally:
        stats = server.stop_stats()
    assert stats.get("observe.registered", 0) == 2, stats
    assert stats.get("observe.refused.host_full", 0) == 1, stats
