"""The CoAP rules a server must keep (RFC 7252, RFC 9176), checked from outside with aiocoap and
libcoap's coap-client against the real `sigil server` binary: conditional requests, Accept,
proxy options, malformed query values, expired registrations and resolved lookup targets."""
import shutil
import subprocess
import time

import cbor2
import pytest
from aiocoap import GET, POST, PUT, Message
from aiocoap.numbers.codes import Code

from conftest import SIGIL, free_port, request_with_echo, sigil, wait_ready
from test_aiocoap_pycose import Ed25519Device, b64, parse_links, register, request, run, senml

CLIENT = shutil.which("coap-client-notls") or shutil.which("coap-client") or shutil.which("coap-client-gnutls")
JSON = 50
LINK_FORMAT = 40
CBOR = 60


def publish(server, dev, topic, seq, **options):
    return run(conditional(PUT, f"{server.uri}/{topic}", dev.sign(seq, senml(20.0 + seq)), content_format=18, **options))


async def conditional(code, uri, payload=b"", content_format=None, if_match=None, if_none_match=False):
    from aiocoap import Context
    import asyncio

    ctx = await Context.create_client_context()
    try:
        msg = Message(code=code, uri=uri, payload=payload)
        if content_format is not None:
            msg.opt.content_format = content_format
        if if_match is not None:
            msg.opt.if_match = if_match
        if if_none_match:
            msg.opt.if_none_match = True
        return await request_with_echo(ctx, msg)
    finally:
        await ctx.shutdown()


@pytest.fixture
def topic_with_device(server):
    dev = Ed25519Device()
    server.provision(dev.identity)
    return dev, register(server, dev)


# 1. If-Match / If-None-Match (RFC 7252 §5.10.8).

def test_if_none_match_creates_only_once(server, topic_with_device):
    dev, topic = topic_with_device
    assert publish(server, dev, topic, 1, if_none_match=True).code == Code.CHANGED
    refused = publish(server, dev, topic, 2, if_none_match=True)
    assert refused.code == Code.PRECONDITION_FAILED
    # The method was not performed: the latest reading is still number 1.
    latest = run(request(GET, f"{server.uri}/{topic}"))
    assert latest.code == Code.CONTENT and latest.opt.etag == (1).to_bytes(8, "big")


def test_if_match_compares_the_latest_readings_etag(server, topic_with_device):
    dev, topic = topic_with_device
    # Empty If-Match: "the topic holds a reading", false before the first publication.
    assert publish(server, dev, topic, 1, if_match=[b""]).code == Code.PRECONDITION_FAILED
    assert publish(server, dev, topic, 1).code == Code.CHANGED
    assert publish(server, dev, topic, 2, if_match=[b""]).code == Code.CHANGED
    etag = run(request(GET, f"{server.uri}/{topic}")).opt.etag
    assert etag == (2).to_bytes(8, "big")
    assert publish(server, dev, topic, 3, if_match=[(1).to_bytes(8, "big")]).code == Code.PRECONDITION_FAILED
    assert publish(server, dev, topic, 3, if_match=[b"\x09", etag]).code == Code.CHANGED


@pytest.mark.skipif(CLIENT is None, reason="libcoap3-bin is installed by scripts/install-test-deps")
def test_libcoap_if_none_match_on_a_collection(server):
    # /rd always exists: a registration conditional on its absence is not performed.
    dev = Ed25519Device()
    server.provision(dev.identity)
    links = f'</m>;rt="sigil.env";ct=18;key="{b64(dev.pub)}";alg=-8'
    out = subprocess.run([CLIENT, "-m", "post", "-t", "40", "-O", "5", "-e", links,
                          f"{server.uri}/rd?ep={dev.identity}&lt=300"],
                         capture_output=True, text=True, timeout=30)
    assert "4.12" in out.stdout + out.stderr, (out.stdout, out.stderr)
    assert parse_links(run(request(GET, f"{server.uri}/rd-lookup/ep")).payload.decode()) == []


# 2. Accept (RFC 7252 §5.10.4): 4.06 where the format is not offered.

@pytest.mark.parametrize("path", [".well-known/core", "rd-lookup/ep", "rd-lookup/res", "ps"])
def test_link_format_resources_refuse_other_formats(server, path):
    assert run(request(GET, f"{server.uri}/{path}", accept=JSON)).code == Code.NOT_ACCEPTABLE
    ok = run(request(GET, f"{server.uri}/{path}", accept=LINK_FORMAT))
    assert ok.code == Code.CONTENT and ok.opt.content_format == LINK_FORMAT


@pytest.mark.skipif(CLIENT is None, reason="libcoap3-bin is installed by scripts/install-test-deps")
def test_libcoap_accept_json_on_discovery_gets_4_06(server):
    out = subprocess.run([CLIENT, "-m", "get", "-A", str(JSON), f"{server.uri}/.well-known/core"],
                         capture_output=True, text=True, timeout=30)
    assert "4.06" in out.stdout + out.stderr, (out.stdout, out.stderr)
    assert "</rd>" not in out.stdout


def test_topics_offer_their_format_and_cbor_history_only(server, topic_with_device):
    dev, topic = topic_with_device
    publish(server, dev, topic, 1)
    assert run(request(GET, f"{server.uri}/{topic}", accept=JSON)).code == Code.NOT_ACCEPTABLE
    assert run(request(GET, f"{server.uri}/{topic}?n=1", accept=JSON)).code == Code.NOT_ACCEPTABLE
    assert run(request(GET, f"{server.uri}/{topic}?n=1", accept=CBOR)).code == Code.CONTENT


# 3. Proxy-Uri / Proxy-Scheme (RFC 7252 §5.7.2, §5.10.2): 5.05.

@pytest.mark.skipif(CLIENT is None, reason="libcoap3-bin is installed by scripts/install-test-deps")
def test_libcoap_through_sigil_as_a_proxy_gets_5_05(server):
    out = subprocess.run([CLIENT, "-m", "get", "-P", server.uri,
                          "coap://192.0.2.1/.well-known/core"],
                         capture_output=True, text=True, timeout=30)
    assert "5.05" in out.stdout + out.stderr, (out.stdout, out.stderr)


def test_proxy_uri_from_aiocoap_gets_5_05(server):
    msg_uri = f"{server.uri}/"

    async def go():
        from aiocoap import Context
        import asyncio
        ctx = await Context.create_client_context()
        try:
            msg = Message(code=GET, uri=msg_uri)
            msg.opt.uri_path = ()
            msg.opt.proxy_scheme = "http"
            return await asyncio.wait_for(ctx.request(msg).response, 30)
        finally:
            await ctx.shutdown()

    assert run(go()).code == Code.PROXYING_NOT_SUPPORTED


# 4. Malformed query values: 4.00 with a diagnostic; documented limits.

@pytest.mark.parametrize("lt", ["0", "-5", "abc", str(2 ** 32)])
def test_invalid_lifetimes_are_refused(server, lt):
    dev = Ed25519Device()
    server.provision(dev.identity)
    links = f'</m>;rt="sigil.env";ct=18;key="{b64(dev.pub)}";alg=-8'
    resp = run(request(POST, f"{server.uri}/rd?ep={dev.identity}&lt={lt}", links.encode(), content_format=40))
    assert resp.code == Code.BAD_REQUEST
    assert b"lt must be an integer from 1 to 4294967295" in resp.payload
    assert parse_links(run(request(GET, f"{server.uri}/rd-lookup/ep")).payload.decode()) == []


def test_the_largest_lifetime_is_accepted(server):
    dev = Ed25519Device()
    server.provision(dev.identity)
    links = f'</m>;rt="sigil.env";ct=18;key="{b64(dev.pub)}";alg=-8'
    resp = run(request(POST, f"{server.uri}/rd?ep={dev.identity}&lt={2 ** 32 - 1}", links.encode(), content_format=40))
    assert resp.code == Code.CREATED
    (ep,) = parse_links(run(request(GET, f"{server.uri}/rd-lookup/ep")).payload.decode())
    assert ep["lt"] == str(2 ** 32 - 1)


@pytest.mark.parametrize("query", ["n=-1", "n=abc", "n=0", "n=101", "n=%2B5", "after=abc", "after=-1"])
def test_bad_history_queries_are_refused(server, topic_with_device, query):
    dev, topic = topic_with_device
    publish(server, dev, topic, 1)
    resp = run(request(GET, f"{server.uri}/{topic}?{query}", accept=CBOR))
    assert resp.code == Code.BAD_REQUEST
    name = query.split("=")[0]
    assert resp.payload.startswith(f"{name} must be an integer from".encode())


def test_history_up_to_the_documented_limit(server, topic_with_device):
    dev, topic = topic_with_device
    for seq in (1, 2, 3):
        publish(server, dev, topic, seq)
    assert len(cbor2.loads(run(request(GET, f"{server.uri}/{topic}?n=100", accept=CBOR)).payload)) == 3
    resp = run(request(GET, f"{server.uri}/{topic}?n=101", accept=CBOR))
    assert resp.code == Code.BAD_REQUEST and b"from 1 to 100" in resp.payload


@pytest.mark.parametrize("query", ["count=abc", "count=0", "page=-1"])
def test_bad_lookup_paging_is_refused(server, query):
    assert run(request(GET, f"{server.uri}/rd-lookup/res?{query}")).code == Code.BAD_REQUEST


# 5. An expired registration: its readings stay readable, publication needs a live one.

def test_readings_outlive_the_registration_publication_does_not(server):
    dev = Ed25519Device()
    server.provision(dev.identity)
    links = f'</m>;rt="sigil.env";ct=18;key="{b64(dev.pub)}";alg=-8'
    resp = run(request(POST, f"{server.uri}/rd?ep={dev.identity}&lt=1", links.encode(), content_format=40))
    assert resp.code == Code.CREATED
    topic = "ps/" + resp.opt.location_path[1] + "/m"
    assert publish(server, dev, topic, 1).code == Code.CHANGED
    time.sleep(2.5)
    latest = run(request(GET, f"{server.uri}/{topic}"))
    assert latest.code == Code.CONTENT and latest.opt.etag == (1).to_bytes(8, "big")
    assert len(cbor2.loads(run(request(GET, f"{server.uri}/{topic}?n=10", accept=CBOR)).payload)) == 1
    assert publish(server, dev, topic, 2).code == Code.NOT_FOUND
    assert parse_links(run(request(GET, f"{server.uri}/ps")).payload.decode()) == []
    assert parse_links(run(request(GET, f"{server.uri}/rd-lookup/res")).payload.decode()) == []
    # Registering again brings the same topic back for publication.
    assert register(server, dev) == topic
    assert publish(server, dev, topic, 2).code == Code.CHANGED


# 6. RD lookup answers resolved (absolute) targets (RFC 9176 §6).

def test_lookup_targets_are_absolute_uris(server, topic_with_device):
    dev, topic = topic_with_device
    (res,) = parse_links(run(request(GET, f"{server.uri}/rd-lookup/res")).payload.decode())
    assert res["href"] == f"{server.uri}/{topic}"
    (ep,) = parse_links(run(request(GET, f"{server.uri}/rd-lookup/ep")).payload.decode())
    assert ep["href"] == f"{server.uri}/rd/{topic.split('/')[1]}"
    # The resolved target is fetchable as given.
    publish(server, dev, topic, 1)
    assert run(request(GET, res["href"])).code == Code.CONTENT


@pytest.mark.skipif(CLIENT is None, reason="libcoap3-bin is installed by scripts/install-test-deps")
def test_libcoap_lookup_targets_are_absolute(server, topic_with_device):
    _, topic = topic_with_device
    out = subprocess.run([CLIENT, "-m", "get", f"{server.uri}/rd-lookup/res"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"<{server.uri}/{topic}>" in out.stdout


def test_sigil_app_follows_absolute_targets(server, tmp_path):
    state = tmp_path / "sensor"
    ident = subprocess.run([SIGIL, "sensor", "--state", str(state), "--print-identity"],
                           capture_output=True, text=True, check=True).stdout.split()[0]
    server.provision(ident)
    subprocess.run([SIGIL, "sensor", "--server", server.uri, "--state", str(state),
                    "--interval", "50ms", "--count", "3"], capture_output=True, text=True, check=True, timeout=120)
    out = subprocess.run([SIGIL, "app", "--server", server.uri, "--json"],
                         capture_output=True, text=True, check=True, timeout=120)
    assert '"verified": 3' in out.stdout, out.stdout


def test_lookup_targets_name_the_address_a_wildcard_listener_was_reached_at(tmp_path):
    port, dport = free_port(), free_port()
    proc = subprocess.Popen([SIGIL, "server", "--listen", f"0.0.0.0:{port}", "--dtls-listen", f"0.0.0.0:{dport}",
                             "--db", str(tmp_path / "w.db")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port)
        dev = Ed25519Device()
        sigil("provision", "--db", str(tmp_path / "w.db"), "add", dev.identity)
        uri = f"coap://127.0.0.1:{port}"
        links = f'</m>;rt="sigil.env";ct=18;key="{b64(dev.pub)}";alg=-8'
        resp = run(request(POST, f"{uri}/rd?ep={dev.identity}&lt=300", links.encode(), content_format=40))
        assert resp.code == Code.CREATED
        (res,) = parse_links(run(request(GET, f"{uri}/rd-lookup/res")).payload.decode())
        assert res["href"] == f"{uri}/ps/{resp.opt.location_path[1]}/m"
    finally:
        proc.kill()
        proc.wait()
