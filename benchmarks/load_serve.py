"""Load test of `rckit serve`: questions/s and latency at 1, 8 and 32 concurrent clients, and
under mixed load (long documents beside paragraph questions).

    python benchmarks/load_serve.py [RUN|FILE] [--levels 1,8,32] [--seconds 20] [--max-requests 5000] [--json]
    python benchmarks/load_serve.py [RUN|FILE] --mixed 4,8 [--long-words 20000] [--seconds 60]

Starts a real ``rckit serve`` on 127.0.0.1 (a free port) with the given model (default: the
installed one, or ``$RCKIT_MODEL``), then for each level runs that many client threads, each
on its own keep-alive connection, posting one ~150-token paragraph and a question (one question
per request unless ``--questions-per-request``) until ``--seconds`` have passed or
``--max-requests`` requests of the level have been sent. Per level it prints questions/s,
median and 99th-percentile latency (send to last byte of the answer), errors (any non-200 or
broken connection; must be 0), the mean number of questions per model call (from ``/health``),
and the server's resident memory before and after the level and its peak so far
(``/proc/PID/status``: VmRSS, VmHWM). The clients run on the same machine as the server and
take some of its CPU. ``--json`` prints one JSON object instead of the table. Exit status 1 if
any request failed.

``--mixed L,S`` measures fairness instead: ``L`` clients each post one ``--long-words`` document
(benchmarks/long_document.py's, one question) after another while ``S`` clients post paragraph
questions, all for ``--seconds``; then the ``L`` long-document clients alone, for their
throughput without the paragraphs. Each class gets its own row (requests, requests/s, p50, p99,
max ms). ``--serve-arg`` passes a setting on to ``rckit serve`` (``--serve-arg=--policy=round-robin``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import selectors
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PARAGRAPH = (
    "The Thames Barrier, which spans 520 metres of the river at Woolwich in south-east London, was "
    "built between 1974 and 1982 to protect the city from tidal surges pushed up the estuary from the "
    "North Sea. It consists of ten steel gates that lie flat on the riverbed so that ships can pass, and "
    "that rotate upwards to close the river when a surge is forecast. The four largest gates each weigh "
    "about 3,300 tonnes and stand as tall as a five-storey building when raised. Queen Elizabeth II "
    "opened the barrier officially on 8 May 1984, although it had first been closed against a flood a "
    "year earlier. By 2020 it had been closed more than 200 times, far more often than its engineers "
    "expected, and the Environment Agency plans to keep it in service until about 2070, when a new "
    "barrier further downstream may replace it."
)
QUESTIONS = [
    "When was the Thames Barrier opened?",
    "How many steel gates does the barrier have?",
    "Who opened the barrier?",
    "How much do the largest gates weigh?",
]


def rss_mib(pid: int) -> dict[str, float]:
    """The process's resident memory now and at its peak, MiB."""
    fields = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M))
    return {"rss": int(fields["VmRSS"]) / 1024, "peak": int(fields["VmHWM"]) / 1024}


def start_server(args) -> tuple[subprocess.Popen, str, int]:
    """``rckit serve`` on a free port of 127.0.0.1: the process, its host and port."""
    cmd = [sys.executable, "-m", "rckit", "serve", *([args.model] if args.model else []), "--host", "127.0.0.1",
           "--port", "0", "--max-batch", str(args.max_batch), "--batch-window-ms", str(args.batch_window_ms),
           "--max-questions", str(max(64, args.questions_per_request))]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    cmd += args.serve_arg
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    line, deadline = "", time.monotonic() + 300
    while not line and proc.poll() is None and time.monotonic() < deadline:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
    found = re.search(r"http://(127\.0\.0\.1):(\d+)/", line)
    if not found:
        proc.kill()
        raise SystemExit(f"rckit serve did not start: {line!r}\n{proc.stderr.read()[-3000:]}")
    # Drain stderr so a chatty server never blocks on a full pipe.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, found.group(1), int(found.group(2))


def stop_server(proc: subprocess.Popen) -> None:
    """Ctrl-C, as a person would; killed if it has not stopped within 30 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def get_json(host: str, port: int, path: str) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


class Level:
    """One load level: ``clients`` threads sharing a request budget and a deadline."""

    def __init__(self, host: str, port: int, clients: int, seconds: float, max_requests: int, per_request: int,
                 context: str = PARAGRAPH, questions: list[str] = QUESTIONS):
        self.host, self.port, self.clients = host, port, clients
        self.seconds, self.max_requests, self.per_request = seconds, max_requests, per_request
        self.context, self.questions_asked = context, questions
        self.lock = threading.Lock()
        self.sent = 0
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.questions = 0
        self.deadline = 0.0  # set by run()

    def body(self, i: int) -> bytes:
        asked = self.questions_asked
        if self.per_request == 1:
            return json.dumps({"context": self.context, "question": asked[i % len(asked)]}).encode()
        qs = [asked[(i + k) % len(asked)] for k in range(self.per_request)]
        return json.dumps({"context": self.context, "questions": qs}).encode()

    def claim(self) -> int | None:
        with self.lock:
            if self.sent >= self.max_requests or time.perf_counter() >= self.deadline:
                return None
            self.sent += 1
            return self.sent

    def client(self, start: threading.Barrier) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        headers = {"Content-Type": "application/json"}
        start.wait()
        while (i := self.claim()) is not None:
            body = self.body(i)
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/answer", body, headers)
                r = conn.getresponse()
                data = r.read()
                ms = (time.perf_counter() - t0) * 1000
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
            except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                with self.lock:
                    self.errors.append(f"{type(e).__name__}: {e}")
                conn.close()
                conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
                continue
            with self.lock:
                self.latencies.append(ms)
                self.questions += self.per_request
        conn.close()

    def run(self) -> float:
        """All clients at once until the deadline or the request budget; the seconds it took."""
        return run_together([self])


def run_together(levels: list[Level]) -> float:
    """The clients of every level at once, each level to its own deadline; the seconds it took."""
    start = threading.Barrier(sum(lv.clients for lv in levels) + 1)
    threads = [threading.Thread(target=lv.client, args=(start,)) for lv in levels for _ in range(lv.clients)]
    for t in threads:
        t.start()
    for lv in levels:
        lv.deadline = time.perf_counter() + lv.seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def mixed(host: str, port: int, args) -> list[dict]:
    """Long documents beside paragraph questions, then the long documents alone (module docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from long_document import QUESTION, make_document

    n_long, n_short = (int(x) for x in args.mixed.split(","))
    document = make_document(args.long_words, 0.5)

    def long_level() -> Level:
        return Level(host, port, n_long, args.seconds, args.max_requests, 1, document, [QUESTION])

    Level(host, port, n_long, 300, n_long, 1, document, [QUESTION]).run()  # warm: one document per client
    together = [long_level(), Level(host, port, n_short, args.seconds, args.max_requests, 1)]
    seconds = run_together(together)
    alone = long_level()
    alone_seconds = alone.run()
    rows = []
    for name, lv, secs in (("long, mixed", together[0], seconds), ("paragraph, mixed", together[1], seconds),
                           ("long, alone", alone, alone_seconds)):
        rows.append({"load": name, "clients": lv.clients, "requests": len(lv.latencies),
                     "requests_per_s": round(len(lv.latencies) / secs, 3),
                     "p50_ms": _round(percentile(lv.latencies, 50)), "p99_ms": _round(percentile(lv.latencies, 99)),
                     "max_ms": _round(max(lv.latencies, default=None) if lv.latencies else None),
                     "errors": len(lv.errors), "first_errors": lv.errors[:5]})
    return rows


def percentile(values: list[float], q: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def measure(host: str, port: int, pid: int, clients: int, args) -> dict:
    warm = Level(host, port, clients, 60, clients, args.questions_per_request)  # one request per client
    warm.run()
    before = rss_mib(pid)
    health0 = get_json(host, port, "/health")
    level = Level(host, port, clients, args.seconds, args.max_requests, args.questions_per_request)
    seconds = level.run()
    health1 = get_json(host, port, "/health")
    after = rss_mib(pid)
    calls = health1["calls"] - health0["calls"]
    return {
        "clients": clients,
        "requests": len(level.latencies),
        "questions": level.questions,
        "seconds": round(seconds, 3),
        "questions_per_s": round(level.questions / seconds, 2) if seconds > 0 else None,
        "p50_ms": _round(percentile(level.latencies, 50)),
        "p99_ms": _round(percentile(level.latencies, 99)),
        "errors": len(level.errors) + len(warm.errors),
        "first_errors": (warm.errors + level.errors)[:5],
        "questions_per_call": round((health1["questions"] - health0["questions"]) / calls, 2) if calls else None,
        "rss_before_mib": round(before["rss"], 1),
        "rss_after_mib": round(after["rss"], 1),
        "peak_rss_mib": round(after["peak"], 1),
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", help="run directory or exported .safetensors (default: the installed model)")
    ap.add_argument("--levels", default="1,8,32", help="numbers of concurrent clients, comma-separated")
    ap.add_argument("--seconds", type=float, default=20, help="time per level")
    ap.add_argument("--max-requests", type=int, default=5000, help="requests per level at most")
    ap.add_argument("--questions-per-request", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=32, help="as rckit serve --max-batch")
    ap.add_argument("--batch-window-ms", type=float, default=2, help="as rckit serve --batch-window-ms")
    ap.add_argument("--threads", type=int, help="as rckit serve --threads")
    ap.add_argument("--mixed", metavar="L,S", help="L long-document clients beside S paragraph clients (docstring)")
    ap.add_argument("--long-words", type=int, default=20000, help="--mixed: words in each long document")
    ap.add_argument("--serve-arg", action="append", default=[], help="another rckit serve setting, e.g. "
                    "--serve-arg=--policy=round-robin")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]

    proc, host, port = start_server(args)
    if args.mixed:
        try:
            info = get_json(host, port, "/v1/model")
            rows = mixed(host, port, args)
        finally:
            stop_server(proc)
        print(json.dumps({"model": info.get("model"), "mixed": args.mixed, "long_words": args.long_words,
                          "seconds": args.seconds, "serve_args": args.serve_arg,
                          "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "rows": rows}, indent=1))
        return 1 if any(r["errors"] for r in rows) else 0
    try:
        info = get_json(host, port, "/v1/model")
        results = []
        for clients in levels:
            results.append(measure(host, port, proc.pid, clients, args))
            if not args.json:
                if len(results) == 1:
                    print(f"model {info.get('model')} from {info.get('source')}; {args.seconds:g} s or "
                          f"{args.max_requests} requests per level; max batch {args.max_batch}, window "
                          f"{args.batch_window_ms:g} ms")
                    print(f"{'clients':>7} {'requests':>8} {'q/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} "
                          f"{'q/call':>6} {'RSS MiB before':>14} {'after':>7} {'peak':>7}")
                r = results[-1]
                print(f"{r['clients']:>7} {r['requests']:>8} {r['questions_per_s']!s:>8} {r['p50_ms']!s:>8} "
                      f"{r['p99_ms']!s:>8} {r['errors']:>6} {r['questions_per_call']!s:>6} "
                      f"{r['rss_before_mib']:>14} {r['rss_after_mib']:>7} {r['peak_rss_mib']:>7}", flush=True)
                for e in r["first_errors"]:
                    print(f"        error: {e}")
    finally:
        stop_server(proc)
    if args.json:
        print(json.dumps({"model": info.get("model"), "source": info.get("source"),
                          "parameters": info.get("parameters"),
                          "settings": {"seconds": args.seconds, "max_requests": args.max_requests,
                                       "questions_per_request": args.questions_per_request,
                                       "max_batch": args.max_batch, "batch_window_ms": args.batch_window_ms,
                                       "threads": args.threads},
                          "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                      "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())},
                          "levels": results}, indent=1))
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
