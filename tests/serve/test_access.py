"""Who may use ``rckit serve`` and how much: keys, the anonymous-listening rule, per-client limits,
TLS, CORS and the access log (:mod:`rckit.serve.access`, :mod:`rckit.serve.keys`).

The rules are checked in process against a fake reader (``tests.serve.test_serve``'s), through
Starlette's TestClient or httpx's ASGI transport (which can give each client its own address); a
key file changed under a running server, listening on every interface, HTTPS with a certificate
made here by ``openssl`` and the access log of a real process run ``rckit serve`` on conftest's
tiny exported QANet.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import selectors
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from rckit.serve.app import create_app
from rckit.serve.config import ServeConfig, is_loopback
from rckit.serve.keys import key_name
from tests.serve.test_serve import CONTEXT, FakeReader, stop_server

KEY, OTHER = "k3y-of-alice-0123456789", "k3y-of-bob-9876543210"
GOOD = {"context": CONTEXT, "question": "Who wrote it?"}


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def key_file(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def rewrite(path: Path, *lines: str) -> None:
    """Write the key file anew, its modification time moved on whatever the clock's resolution."""
    before = path.stat().st_mtime_ns
    key_file(path, *lines)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def call(client, method: str, path: str, key: str | None = None, **kw):
    headers = {**kw.pop("headers", {}), **(bearer(key) if key else {})}
    if method == "POST" and "json" not in kw and "content" not in kw:
        kw["json"] = GOOD
    return client.request(method, path, headers=headers, **kw)


# -- keys ------------------------------------------------------------------------------------

PROTECTED = [
    ("POST", "/v1/answer"),
    ("POST", "/v1/ask"),
    ("GET", "/v1/index"),
    ("GET", "/v1/model"),
    ("GET", "/v1/no-such-route"),
    ("GET", "/no-such-page"),
]
PUBLIC = ["/health", "/", "/static/app.js", "/static/style.css", "/docs", "/openapi.json"]


def test_every_route_but_the_page_docs_and_health_needs_the_key():
    with TestClient(create_app(FakeReader(), ServeConfig(api_key=KEY, access_log="off"))) as client:
        for method, path in PROTECTED:
            refused = [
                call(client, method, path),
                call(client, method, path, "wrong-key"),
                call(client, method, path, headers={"Authorization": KEY}),  # no scheme
                call(client, method, path, headers={"Authorization": f"Basic {KEY}"}),
                call(client, method, path, headers={"Authorization": "Bearer "}),
                call(client, method, path, KEY[:-1]),
                call(client, method, path, KEY + "x"),
            ]
            for r in refused:
                assert r.status_code == 401, (method, path, r.status_code, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
                assert r.json() == {
                    "error": "this server needs a key: send it as the header `Authorization: Bearer KEY`"
                }
            assert len({r.content for r in refused}) == 1  # a wrong key is told nothing a missing one is not
            r = call(client, method, path, KEY)
            assert r.status_code != 401, (method, path, r.text)
        assert call(client, "POST", "/v1/answer", KEY).json()["answers"]
        assert call(client, "GET", "/v1/model", f" {KEY} ").status_code == 200  # spaces around it
        assert call(client, "GET", "/v1/model", headers={"Authorization": f"bearer {KEY}"}).status_code == 200
        for path in PUBLIC:
            assert client.get(path).status_code == 200, path


def test_the_schema_declares_the_bearer_scheme_on_every_protected_operation():
    with TestClient(create_app(FakeReader(), ServeConfig(api_key=KEY, access_log="off"))) as client:
        spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["bearer"]["description"],
    }
    for path, operations in spec["paths"].items():
        for operation in operations.values():
            if path == "/health":
                assert "security" not in operation and "401" not in operation["responses"]
            else:
                assert operation["security"] == [{"bearer": []}], path
                assert operation["responses"]["401"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorResponse"
                }
                assert "429" not in operation["responses"]  # no limits set
    with TestClient(create_app(FakeReader(), ServeConfig(access_log="off"))) as client:  # an open server
        spec = client.get("/openapi.json").json()
        assert "securitySchemes" not in spec.get("components", {})
        assert all("security" not in op for ops in spec["paths"].values() for op in ops.values())
        assert call(client, "POST", "/v1/answer").status_code == 200


def test_a_key_file_gives_each_client_a_name_and_takes_keys_withdrawn_without_a_restart(tmp_path, capsys):
    keys = key_file(tmp_path / "keys", "# the clients of this server", "", f"alice {KEY}", f"  {OTHER}  ")
    with TestClient(create_app(FakeReader(), ServeConfig(api_key_file=str(keys), access_log="-"))) as client:
        assert call(client, "GET", "/v1/model", KEY).status_code == 200
        assert call(client, "GET", "/v1/model", OTHER).status_code == 200
        names = [json.loads(line)["key"] for line in capsys.readouterr().err.splitlines()]
        assert names == ["alice", key_name(OTHER)] and key_name(OTHER).startswith("sha256:")

        rewrite(keys, "# alice's key withdrawn", OTHER)
        assert call(client, "GET", "/v1/model", KEY).status_code == 401
        assert call(client, "GET", "/v1/model", OTHER).status_code == 200

        rewrite(keys, OTHER, "carol a-key with-a-space")  # a mistake: no key is taken until it is mended
        assert call(client, "GET", "/v1/model", OTHER).status_code == 401
        assert call(client, "GET", "/v1/model", OTHER).status_code == 401
        warned = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("{")]
        assert warned == [
            f"rckit serve: api_key_file {keys}, line 2: 3 words; a line is `NAME KEY` or `KEY`; "
            "no key of it is accepted until it is mended"
        ]  # said once, not on every request
        rewrite(keys, f"alice {KEY}", OTHER)
        assert call(client, "GET", "/v1/model", KEY).status_code == 200
        keys.unlink()
        assert call(client, "GET", "/v1/model", KEY).status_code == 401
        assert "No such file" in capsys.readouterr().err


def test_a_key_sent_is_compared_with_every_key_and_only_by_digest(tmp_path, monkeypatch):
    """hmac.compare_digest on SHA-256 digests (one length), against every key whichever matches:
    the time taken says neither which key matched nor how much of one."""
    import hmac

    from rckit.serve.keys import Keys

    keys = Keys(KEY, str(key_file(tmp_path / "keys", *(f"client{i} key-number-{i}" for i in range(4)))))
    compared, real = [], hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((len(a), len(b))) or real(a, b))
    for sent, name in (
        (KEY.encode(), key_name(KEY)),
        (b"key-number-0", "client0"),
        (b"key-number-3", "client3"),
        (b"key-number-", None),
        (b"x" * 1000, None),
        (b"", None),
        (None, None),
    ):
        compared.clear()
        assert keys.match(sent) == name
        assert compared == [(32, 32)] * 5


@pytest.mark.parametrize(
    "lines,problem",
    [
        (["alice k1 k2"], "line 1: 3 words; a line is `NAME KEY` or `KEY`"),
        (["# only a comment", "", "alice kéy"], "line 3: a key must be printable ASCII without spaces"),
        ([KEY, f"bob {KEY}"], "line 2: the same key as line 1"),
        (["# no key at all"], "holds no key"),
    ],
)
def test_a_bad_key_file_is_refused_in_one_line_naming_its_line(tmp_path, lines, problem):
    path = key_file(tmp_path / "keys", *lines)
    with pytest.raises(ValueError, match=re.escape(f"api_key_file {path}")) as e:
        ServeConfig(api_key_file=str(path)).check()
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_a_network_address_without_a_key_is_refused_unless_anonymous_is_allowed(capsys, monkeypatch):
    from rckit.cli import main

    monkeypatch.delenv("RCKIT_API_KEY", raising=False)

    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(host), host
        ServeConfig(host=host).check()
    for host in ("0.0.0.0", "::", "192.168.1.20", "10.0.0.1", "example.org", ""):
        assert not is_loopback(host), host
        with pytest.raises(ValueError, match="--allow-anonymous"):
            ServeConfig(host=host).check()
        ServeConfig(host=host, api_key=KEY).check()
        ServeConfig(host=host, allow_anonymous=True).check()
    # The command: one line, status 2, before any model is loaded.
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rckit serve: host 0.0.0.0 is reachable from other machines")
    assert "--api-key" in err and "--allow-anonymous" in err
    with pytest.raises(ValueError, match="api_key: a key must be printable ASCII"):
        ServeConfig(api_key="two words").check()


# -- per-client limits -------------------------------------------------------------------------


def test_a_client_over_its_rate_gets_429_with_retry_after_and_the_others_are_served(tmp_path):
    keys = key_file(tmp_path / "keys", f"alice {KEY}", f"bob {OTHER}")
    config = ServeConfig(api_key_file=str(keys), rate_limit=0.5, burst=2, access_log="off")
    with TestClient(create_app(FakeReader(), config)) as client:
        assert [call(client, "POST", "/v1/answer", KEY).status_code for _ in range(2)] == [200, 200]
        r = call(client, "POST", "/v1/answer", KEY)
        assert r.status_code == 429 and r.headers["retry-after"] in ("1", "2")  # whole seconds, at least 1
        assert r.json().keys() == {"error"} and "--rate-limit" in r.json()["error"]
        assert "0.5 requests a second (bursts of 2" in r.json()["error"]
        assert call(client, "GET", "/v1/model", KEY).status_code == 429  # every protected route counts
        assert call(client, "POST", "/v1/answer", OTHER).status_code == 200  # bob has his own bucket
        for _ in range(5):
            assert client.get("/health").status_code == 200  # never limited
            assert client.get("/").status_code == 200
        assert call(client, "POST", "/v1/answer", "wrong").status_code == 401  # the key before the limit
        spec = client.get("/openapi.json").json()
        assert spec["paths"]["/v1/answer"]["post"]["responses"]["429"]["headers"]["Retry-After"]["schema"] == {
            "type": "integer",
            "minimum": 1,
        }


def test_a_client_at_its_in_flight_limit_gets_429_and_the_others_are_served():
    """Without keys a client is its address: 10.0.0.1 has one slow request in flight, its second
    is refused while 10.0.0.2's is answered; once the first is answered, 10.0.0.1 is served again."""
    app = create_app(FakeReader(delay=0.4), ServeConfig(max_in_flight=1, access_log="off"))

    async def run():
        def client(address):
            return httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app, client=(address, 40000)), base_url="http://test"
            )

        async with client("10.0.0.1") as a, client("10.0.0.2") as b:
            first = asyncio.create_task(a.post("/v1/answer", json=GOOD))
            await asyncio.sleep(0.1)  # the first is in flight
            second, other = await asyncio.gather(a.post("/v1/answer", json=GOOD), b.post("/v1/answer", json=GOOD))
            first = await first
            again = await a.post("/v1/answer", json=GOOD)
            return first, second, other, again

    async def lifespan():
        async with app.router.lifespan_context(app):
            return await run()

    first, second, other, again = asyncio.run(lifespan())
    assert first.status_code == 200 and other.status_code == 200 and again.status_code == 200
    assert second.status_code == 429 and second.headers["retry-after"] == "1"
    assert "1 request being answered at once (--max-in-flight)" in second.json()["error"]


# -- CORS --------------------------------------------------------------------------------------


def preflight(client, origin: str):
    return client.options(
        "/v1/answer",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )


def test_cors_is_off_by_default_and_lets_only_the_origins_given():
    with TestClient(create_app(FakeReader(), ServeConfig(api_key=KEY, access_log="off"))) as client:
        for r in (
            preflight(client, "https://app.example"),
            call(client, "GET", "/v1/model", KEY, headers={"Origin": "https://app.example"}),
            client.get("/health", headers={"Origin": "https://x.org"}),
        ):
            assert not any(h.startswith("access-control-") for h in r.headers), r.headers
    config = ServeConfig(api_key=KEY, cors_origin=("https://app.example", "http://localhost:3000"), access_log="off")
    with TestClient(create_app(FakeReader(), config)) as client:
        r = preflight(client, "https://app.example")
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        allowed = {h.strip().lower() for h in r.headers["access-control-allow-headers"].split(",")}
        assert {"authorization", "content-type", "x-request-id"} <= allowed
        assert "POST" in r.headers["access-control-allow-methods"]
        r = preflight(client, "https://evil.example")
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
        r = call(client, "POST", "/v1/answer", KEY, headers={"Origin": "http://localhost:3000"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        r = call(client, "POST", "/v1/answer", headers={"Origin": "https://app.example"})  # a 401 the page can read
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == "https://app.example"
        r = call(client, "POST", "/v1/answer", KEY, headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
    with pytest.raises(ValueError, match="cors_origin must be an origin"):
        ServeConfig(cors_origin=("https://app.example/page",)).check()


# -- the access log --------------------------------------------------------------------------


def log_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_access_log_has_a_line_a_request_and_never_a_key_or_text(tmp_path):
    log = tmp_path / "access.jsonl"
    app = create_app(FakeReader(), ServeConfig(api_key=KEY, access_log=str(log)))

    @app.get("/v1/bug")
    async def bug():  # a bug in a route: answered 500 outside the gate, its request id still echoed
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as client:
        ok = call(client, "POST", "/v1/answer", KEY, headers={"X-Request-ID": "req-42.a:b"})
        refused = call(client, "POST", "/v1/answer", "not-the-key")
        odd = call(client, "GET", "/v1/model", KEY, headers={"X-Request-ID": "x" * 129})
        bad = call(client, "GET", "/v1/model", KEY, headers={"X-Request-ID": 'a b"{}'})
        health = client.get("/health")
        broken = call(client, "GET", "/v1/bug", KEY, headers={"X-Request-ID": "bug-1"})
    assert ok.headers["x-request-id"] == "req-42.a:b" and broken.headers["x-request-id"] == "bug-1"
    assert broken.status_code == 500 and broken.json()["error"].startswith("internal error")
    for r in (refused, odd, bad, health):  # made where none or no sane one was sent
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"]), r.headers
    lines = log_lines(log)
    assert [(x["method"], x["path"], x["status"], x["key"]) for x in lines] == [
        ("POST", "/v1/answer", 200, key_name(KEY)),
        ("POST", "/v1/answer", 401, None),
        ("GET", "/v1/model", 200, key_name(KEY)),
        ("GET", "/v1/model", 200, key_name(KEY)),
        ("GET", "/health", 200, None),
        ("GET", "/v1/bug", 500, key_name(KEY)),
    ]
    for line, r in zip(lines, (ok, refused, odd, bad, health, broken)):
        assert line.keys() == {"time", "client", "key", "method", "path", "status", "ms", "request_id"}
        assert line["request_id"] == r.headers["x-request-id"] and line["client"] == "testclient"
        assert datetime.fromisoformat(line["time"].replace("Z", "+00:00")).utcoffset().total_seconds() == 0
        assert line["time"].endswith("Z") and line["ms"] >= 0
    text = log.read_text()
    assert KEY not in text and "not-the-key" not in text and "Ada Lovelace" not in text and "Who wrote" not in text


def test_the_access_log_holds_the_text_only_with_log_text_and_goes_to_stderr_by_default(tmp_path, capfd):
    with TestClient(create_app(FakeReader(), ServeConfig(log_text=True))) as client:  # access_log "-": stderr
        answer = call(client, "POST", "/v1/answer").json()
        client.get("/static/app.js")
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert lines[0]["request"] == GOOD and lines[0]["response"] == answer and lines[0]["key"] is None
    assert lines[1]["path"] == "/static/app.js" and "request" not in lines[1] and "response" not in lines[1]
    with TestClient(create_app(FakeReader(), ServeConfig(access_log="off", log_text=True))) as client:
        call(client, "POST", "/v1/answer")
    assert capfd.readouterr().err == ""
    with pytest.raises(ValueError, match="access_log"):
        ServeConfig(access_log=str(tmp_path / "no-such-dir" / "log")).check()


# -- real servers: a key file changed under one, every interface, HTTPS ----------------------------


def launch(args: list[str], log: Path, lines: int = 1, timeout: float = 120):
    """``python -m rckit serve ARGS`` (host and port as ARGS say); the process and the first
    ``lines`` lines it prints (the URL, then what it says after it)."""
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    env.pop("RCKIT_API_KEY", None)  # the keys are the test's
    proc = subprocess.Popen(
        [sys.executable, "-m", "rckit", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        bufsize=0,
        env=env,
    )
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline, out = time.monotonic() + timeout, b""
    while time.monotonic() < deadline and out.count(b"\n") < lines and proc.poll() is None:
        if sel.select(timeout=0.5):
            out += os.read(proc.stdout.fileno(), 4096)
    printed = out.decode().splitlines()
    if len(printed) < lines or not re.search(r"https?://\S+/", printed[0]):
        proc.kill()
        proc.wait()
        pytest.fail(f"rckit serve printed no URL: {printed!r}\n{log.read_text()}")
    return proc, printed


def fetch(url: str, key: str | None = None, body: dict | None = None, context: ssl.SSLContext | None = None):
    """(status, headers, JSON body) of a GET, or of a POST of ``body``."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **(bearer(key) if key else {})}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, data=data, headers=headers), timeout=60, context=context
        ) as r:
            return r.status, r.headers, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.load(e)


def test_a_real_server_takes_keys_from_its_file_and_logs_them_by_name(tiny_export, tmp_path):
    keys = key_file(tmp_path / "keys", f"alice {KEY}", f"bob {OTHER}")
    access = tmp_path / "access.jsonl"
    proc, lines = launch(
        [
            str(tiny_export),
            "--api-key-file",
            str(keys),
            "--access-log",
            str(access),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ],
        tmp_path / "serve.log",
    )
    url = re.search(r"http://127\.0\.0\.1:\d+/", lines[0]).group(0)
    try:
        assert fetch(url + "health")[0] == 200
        for key in (None, "wrong"):
            status, headers, body = fetch(url + "v1/answer", key, GOOD)
            assert status == 401 and headers["WWW-Authenticate"] == "Bearer" and body.keys() == {"error"}
        assert fetch(url + "v1/answer", KEY, GOOD)[0] == 200
        rewrite(keys, f"bob {OTHER}")  # alice's withdrawn, the server left running
        assert fetch(url + "v1/answer", KEY, GOOD)[0] == 401
        assert fetch(url + "v1/answer", OTHER, GOOD)[0] == 200
    finally:
        assert stop_server(proc) == 130
    logged = log_lines(access)
    assert [(x["path"], x["status"], x["key"]) for x in logged] == [
        ("/health", 200, None),
        ("/v1/answer", 401, None),
        ("/v1/answer", 401, None),
        ("/v1/answer", 200, "alice"),
        ("/v1/answer", 401, None),
        ("/v1/answer", 200, "bob"),
    ]
    assert all(x["client"] == "127.0.0.1" for x in logged)
    assert KEY not in access.read_text() and OTHER not in access.read_text()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def test_listening_on_every_interface_without_a_key_needs_allow_anonymous_and_says_so(tiny_export, tmp_path):
    proc, lines = launch(
        [str(tiny_export), "--host", "0.0.0.0", "--port", "0", "--allow-anonymous", "--access-log", "off"],
        tmp_path / "serve.log",
        lines=2,
    )
    try:
        port = re.search(r"http://0\.0\.0\.0:(\d+)/", lines[0]).group(1)
        assert lines[1] == (
            f"rckit serve: no key (--allow-anonymous): anyone who can reach 0.0.0.0:{port} can use this server"
        )
        assert fetch(f"http://127.0.0.1:{port}/v1/answer", None, GOOD)[0] == 200
    finally:
        stop_server(proc)


def openssl() -> str:
    found = shutil.which("openssl")
    assert found, "the HTTPS test makes its certificate with the openssl command: apt-get install openssl"
    return found


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (an EC key, valid a day) and its key."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl(),
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_with_a_certificate_made_here(tiny_export, tmp_path):
    cert, key = make_certificate(tmp_path)
    with pytest.raises(ValueError, match="ssl_certfile and ssl_keyfile go together"):
        ServeConfig(ssl_certfile=str(cert)).check()
    with pytest.raises(FileNotFoundError, match="ssl_keyfile"):
        ServeConfig(ssl_certfile=str(cert), ssl_keyfile=str(tmp_path / "none.pem")).check()
    with pytest.raises(ValueError, match="not a PEM certificate"):
        ServeConfig(ssl_certfile=str(cert), ssl_keyfile=str(cert)).check()
    proc, lines = launch(
        [
            str(tiny_export),
            "--ssl-certfile",
            str(cert),
            "--ssl-keyfile",
            str(key),
            "--api-key",
            KEY,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--access-log",
            "off",
        ],
        tmp_path / "serve.log",
    )
    try:
        url = re.search(r"https://127\.0\.0\.1:\d+/", lines[0]).group(0)
        trusting = ssl.create_default_context(cafile=str(cert))  # the certificate checked, host name included
        status, _, body = fetch(url + "v1/answer", KEY, {**GOOD, "top_k": 2}, trusting)
        assert status == 200 and 1 <= len(body["answers"]) <= 2
        assert fetch(url + "v1/answer", None, GOOD, trusting)[0] == 401
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            fetch(url + "health", context=ssl.create_default_context())  # not trusted without it
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            fetch(url.replace("https", "http") + "health")  # plain HTTP is not served
    finally:
        stop_server(proc)
