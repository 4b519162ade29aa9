"""What serving several models costs: `rckit serve` with the default model, then with `--model all`.

    flock /tmp/rckit-cpu.lock python benchmarks/serve_models.py [--repeat 20] [--json]

For each server it starts a real ``rckit serve`` on 127.0.0.1 (a free port, the access log off) and
measures: the seconds from starting the process until ``/health`` answers (Python, the imports and
loading every model included); the server's resident memory (``/proc/PID/status``: VmRSS) once it
answers, and again after one question to each of its models (the first answer of a model builds
what it builds lazily), with the peak so far (VmHWM); then, per model, the first question's
latency and the median of ``--repeat`` more (one at a time, on one keep-alive connection, send to
last byte of the answer: a paragraph of ~150 tokens and one question). Prints two Markdown tables
(servers, then models), or one JSON object with ``--json``. The client runs on the same machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import selectors
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_serve import PARAGRAPH, QUESTIONS, rss_mib, stop_server  # noqa: E402

QUESTION = QUESTIONS[0]
SERVERS = {"default": [], "--model all": ["--model", "all"]}


def start(args: list[str], timeout: float = 300) -> tuple[subprocess.Popen, str, int, float]:
    """``rckit serve ARGS`` on 127.0.0.1, a free port; the process, its host, port, and the seconds
    from the start of the process until ``/health`` answered."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rckit", "serve", *args, "--host", "127.0.0.1", "--port", "0", "--access-log", "off"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    line = ""
    while not line and proc.poll() is None and time.perf_counter() - t0 < timeout:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
    found = re.search(r"http://(127\.0\.0\.1):(\d+)/", line)
    if not found:
        proc.kill()
        raise SystemExit(f"rckit serve {' '.join(args)} printed no URL: {line!r} {proc.stderr.read()[-2000:]}")
    host, port = found.group(1), int(found.group(2))
    while time.perf_counter() - t0 < timeout:
        try:
            status, _ = request(http.client.HTTPConnection(host, port, timeout=10), "GET", "/health")
            if status == 200:
                return proc, host, port, time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.01)
    proc.kill()
    raise SystemExit(f"rckit serve {' '.join(args)}: /health did not answer within {timeout:g} s")


def request(conn: http.client.HTTPConnection, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def ask(conn: http.client.HTTPConnection, model: str) -> float:
    """One question to ``model``; its latency, ms."""
    t0 = time.perf_counter()
    status, body = request(conn, "POST", "/v1/answer", {"context": PARAGRAPH, "question": QUESTION, "model": model})
    ms = (time.perf_counter() - t0) * 1000
    if status != 200 or body["model"] != model:
        raise SystemExit(f"{model}: {status} {body}")
    return ms


def measure(args: list[str], repeat: int) -> dict:
    proc, host, port, seconds = start(args)
    try:
        started = rss_mib(proc.pid)
        conn = http.client.HTTPConnection(host, port, timeout=120)
        models = [m["name"] for m in request(conn, "GET", "/v1/models")[1]["models"]]
        first = {m: ask(conn, m) for m in models}
        asked = rss_mib(proc.pid)
        latency = {m: statistics.median(ask(conn, m) for _ in range(repeat)) for m in models}
        conn.close()
    finally:
        stop_server(proc)
    return {
        "start_s": seconds,
        "rss_started_mib": started["rss"],
        "rss_asked_mib": asked["rss"],
        "peak_mib": asked["peak"],
        "models": [{"name": m, "first_ms": first[m], "median_ms": latency[m]} for m in models],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="questions per model for the median")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    opts = parser.parse_args()
    results = {name: measure(args, opts.repeat) for name, args in SERVERS.items()}
    if opts.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"one paragraph question at a time, median of {opts.repeat}\n"
    )
    print(
        "| server | start-up until /health (s) | RSS after start-up (MiB) | RSS after one question to each "
        "model (MiB) | peak RSS (MiB) |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        print(
            f"| `rckit serve` {name} | {r['start_s']:.2f} | {r['rss_started_mib']:.0f} | {r['rss_asked_mib']:.0f} "
            f"| {r['peak_mib']:.0f} |"
        )
    print("\n| server | model | first question (ms) | median of next (ms) |")
    print("| --- | --- | ---: | ---: |")
    for name, r in results.items():
        for m in r["models"]:
            print(f"| {name} | {m['name']} | {m['first_ms']:.1f} | {m['median_ms']:.1f} |")


if __name__ == "__main__":
    main()
