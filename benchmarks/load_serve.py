"""Load test of `rckit serve`: questions/s and latency at 1, 8 and 32 concurrent clients, and
under mixed load (long documents beside paragraph questions).

    python benchmarks/load_serve.py [RUN|FILE] [--levels 1,8,32] [--seconds 20] [--max-requests 5000] [--json]
    python benchmarks/load_serve.py [RUN|FILE] --mixed 4,8 [--long-words 20000] [--seconds 60]
    python benchmarks/load_serve.py [RUN|FILE] --greedy 8 --levels 8 [--serve-arg=--max-in-flight=2 ...]

Starts a real ``rckit serve`` on 127.0.0.1 (a free port) with the given model (default: the
installed one, or ``$RCKIT_MODEL``), then for each level runs that many client threads, each
on its own keep-alive connection, posting one ~150-token paragraph and a question (one question
per request unless ``--questions-per-request``; ``--new-contexts``: the paragraph ends with the
request's number, a text the server has not read) until ``--seconds`` have passed or
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

``--greedy N`` measures whether one client can crowd out the others (issue 42): the server gets
a file of keys (``--api-key-file``), one for each ordinary client and one for the greedy client,
and the limits ``--serve-arg`` gives it (``--serve-arg=--max-in-flight=2
--serve-arg=--rate-limit=50``). For each level the ordinary clients, each with its own key, run
alone for ``--seconds``; then again beside the greedy client: its own process (so that its
threads do not hold the ordinary clients' interpreter lock), N keep-alive connections under one
key, each sending the next request as soon as it has the answer to the last, a 429 included (it
ignores Retry-After unless ``--greedy-waits``: the worst a client can do). One row each: the
ordinary clients' questions/s, p50 and p99 alone and beside the greedy client, and the ratio of
the p50s; the greedy client's requests answered (200) and refused (429) while the ordinary clients
ran; the CPU used meanwhile by the server, its event loop (its main thread), the ordinary clients
and the greedy client, in % of one core. An ordinary client's 429 counts as an error (the limits
are then too tight for an ordinary client).
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import re
import secrets
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
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


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """The CPU time the process (or one of its threads) has used, user and system, seconds
    (``/proc/PID/stat``, ``/proc/PID/task/TID/stat``)."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> dict[str, float]:
    """The process's resident memory now and at its peak, MiB."""
    fields = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M))
    return {"rss": int(fields["VmRSS"]) / 1024, "peak": int(fields["VmHWM"]) / 1024}


def start_server(args) -> tuple[subprocess.Popen, str, int]:
    """``rckit serve`` on a free port of 127.0.0.1: the process, its host and port."""
    cmd = [
        sys.executable,
        "-m",
        "rckit",
        "serve",
        *([args.model] if args.model else []),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--max-batch",
        str(args.max_batch),
        "--batch-window-ms",
        str(args.batch_window_ms),
        "--max-questions",
        str(max(64, args.questions_per_request)),
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if getattr(args, "key_file", None):
        cmd += ["--api-key-file", args.key_file]
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


def get_json(host: str, port: int, path: str, key: str | None = None) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {key}"} if key else {})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


class Level:
    """One load level: ``clients`` threads sharing a request budget and a deadline."""

    def __init__(
        self,
        host: str,
        port: int,
        clients: int,
        seconds: float,
        max_requests: int,
        per_request: int,
        context: str = PARAGRAPH,
        questions: list[str] = QUESTIONS,
        keys: list[str] | None = None,
        new_contexts: bool = False,
    ):
        self.host, self.port, self.clients = host, port, clients
        self.new_contexts = new_contexts  # each request's paragraph ends with its number: a text not read before
        self.keys = keys  # client i sends keys[i]; None: no key
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
        context = f"{self.context} ({i})" if self.new_contexts else self.context
        if self.per_request == 1:
            return json.dumps({"context": context, "question": asked[i % len(asked)]}).encode()
        qs = [asked[(i + k) % len(asked)] for k in range(self.per_request)]
        return json.dumps({"context": context, "questions": qs}).encode()

    def claim(self) -> int | None:
        with self.lock:
            if self.sent >= self.max_requests or time.perf_counter() >= self.deadline:
                return None
            self.sent += 1
            return self.sent

    def client(self, start: threading.Barrier, number: int = 0) -> None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        headers = {"Content-Type": "application/json"}
        if self.keys:
            headers["Authorization"] = f"Bearer {self.keys[number]}"
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
    threads = [threading.Thread(target=lv.client, args=(start, n)) for lv in levels for n in range(lv.clients)]
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
    for name, lv, secs in (
        ("long, mixed", together[0], seconds),
        ("paragraph, mixed", together[1], seconds),
        ("long, alone", alone, alone_seconds),
    ):
        rows.append(
            {
                "load": name,
                "clients": lv.clients,
                "requests": len(lv.latencies),
                "requests_per_s": round(len(lv.latencies) / secs, 3),
                "p50_ms": _round(percentile(lv.latencies, 50)),
                "p99_ms": _round(percentile(lv.latencies, 99)),
                "max_ms": _round(max(lv.latencies, default=None) if lv.latencies else None),
                "errors": len(lv.errors),
                "first_errors": lv.errors[:5],
            }
        )
    return rows


def greedy_client(
    host: str, port: int, key: str, connections: int, waits: bool, body: bytes, ready, counting, stop, out
) -> None:
    """The greedy client (module docstring), in a process of its own: ``connections`` threads, each
    posting ``body`` as soon as the last answer came (after a 429, ``waits``: once its Retry-After
    has passed), until ``stop``; the statuses that came back while ``counting`` was set, and the
    answered requests' p50, are put on ``out``."""
    lock = threading.Lock()
    statuses: Counter = Counter()
    latencies: list[float] = []

    def one() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/answer", body, headers)
                r = conn.getresponse()
                r.read()
                status = str(r.status)
                if waits and r.status == 429:
                    stop.wait(float(r.getheader("Retry-After") or 1))
            except Exception as e:  # noqa: BLE001 - a broken connection is counted and opened again
                status = type(e).__name__
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=120)
            if counting.is_set():
                with lock:
                    statuses[status] += 1
                    if status == "200":
                        latencies.append((time.perf_counter() - t0) * 1000)
        conn.close()

    threads = [threading.Thread(target=one) for _ in range(connections)]
    for t in threads:
        t.start()
    ready.set()
    while not counting.wait(0.5) and not stop.is_set():
        pass
    cpu0 = time.process_time()
    stop.wait()
    cpu = time.process_time() - cpu0
    for t in threads:
        t.join()
    out.put({"statuses": dict(statuses), "p50_ms": percentile(latencies, 50), "cpu_s": cpu})


def ordinary_row(lv: Level, seconds: float, server_cpu: tuple[float, float], clients_cpu: float) -> dict:
    """The ordinary clients' figures for one run (``server_cpu``: the CPU seconds the server and its
    main thread, the event loop's, used meanwhile; ``clients_cpu``: this process's, the ordinary
    clients')."""
    return {
        "requests": len(lv.latencies),
        "seconds": round(seconds, 3),
        "server_cpu_percent": round(100 * server_cpu[0] / seconds, 1),
        "event_loop_cpu_percent": round(100 * server_cpu[1] / seconds, 1),
        "clients_cpu_percent": round(100 * clients_cpu / seconds, 1),
        "questions_per_s": round(lv.questions / seconds, 2) if seconds > 0 else None,
        "p50_ms": _round(percentile(lv.latencies, 50)),
        "p99_ms": _round(percentile(lv.latencies, 99)),
        "errors": len(lv.errors),
        "first_errors": lv.errors[:5],
    }


def server_cpu(pid: int, since: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """The server's CPU seconds and its main thread's (uvicorn's event loop), less ``since``."""
    return cpu_seconds(pid) - since[0], cpu_seconds(pid, pid) - since[1]


def beside_greedy(host: str, port: int, pid: int, clients: int, args, keys: list[str], greedy_key: str) -> dict:
    """``clients`` ordinary clients alone, then beside the greedy client (module docstring); ``pid``:
    the server's, whose CPU time is read around each run."""
    per = args.questions_per_request
    warm = Level(host, port, clients, 60, clients, per, keys=keys)  # one request per client
    warm.run()
    alone = Level(host, port, clients, args.seconds, args.max_requests, per, keys=keys)
    cpu0, own0 = server_cpu(pid), time.process_time()
    alone_seconds = alone.run()
    alone_cpu, alone_own = server_cpu(pid, cpu0), time.process_time() - own0
    spawn = multiprocessing.get_context("spawn")
    ready, counting, stop, out = spawn.Event(), spawn.Event(), spawn.Event(), spawn.Queue()
    proc = spawn.Process(
        target=greedy_client,
        args=(host, port, greedy_key, args.greedy, args.greedy_waits, alone.body(1), ready, counting, stop, out),
    )
    proc.start()
    try:
        if not ready.wait(120):
            raise SystemExit("the greedy client did not start")
        time.sleep(1)  # at full speed before the ordinary clients start
        beside = Level(host, port, clients, args.seconds, args.max_requests, per, keys=keys)
        cpu0, own0 = server_cpu(pid), time.process_time()
        counting.set()
        beside_seconds = beside.run()
        counting.clear()
        beside_cpu, beside_own = server_cpu(pid, cpu0), time.process_time() - own0
        stop.set()
        greedy = out.get(timeout=180)
    finally:
        stop.set()
        proc.join(timeout=180)
        if proc.is_alive():
            proc.kill()
    statuses = greedy["statuses"]
    row_alone = ordinary_row(alone, alone_seconds, alone_cpu, alone_own)
    row_beside = ordinary_row(beside, beside_seconds, beside_cpu, beside_own)
    ratio = (row_beside["p50_ms"] / row_alone["p50_ms"]) if row_alone["p50_ms"] and row_beside["p50_ms"] else None
    return {
        "clients": clients,
        "greedy_connections": args.greedy,
        "greedy_waits": args.greedy_waits,
        "alone": row_alone,
        "beside_greedy": row_beside,
        "greedy": {
            "answered": statuses.get("200", 0),
            "refused_429": statuses.get("429", 0),
            "other": {k: v for k, v in statuses.items() if k not in ("200", "429")},
            "answered_per_s": round(statuses.get("200", 0) / beside_seconds, 2),
            "refused_per_s": round(statuses.get("429", 0) / beside_seconds, 2),
            "answered_p50_ms": _round(greedy["p50_ms"]),
            "cpu_percent": round(100 * greedy["cpu_s"] / beside_seconds, 1),
        },
        "p50_ratio": round(ratio, 3) if ratio else None,
    }


def greedy_main(args, levels: list[int]) -> int:
    """``--greedy``: a server with a key for each client, each level alone and beside the greedy client."""
    keys = [secrets.token_urlsafe(24) for _ in range(max(levels))]
    greedy_key = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        args.key_file = str(Path(tmp) / "keys")
        lines = [f"client-{i} {key}" for i, key in enumerate(keys)] + [f"greedy {greedy_key}"]
        Path(args.key_file).write_text("\n".join(lines) + "\n")
        proc, host, port = start_server(args)
        try:
            info = get_json(host, port, "/v1/model", keys[0])
            results = []
            for clients in levels:
                results.append(beside_greedy(host, port, proc.pid, clients, args, keys, greedy_key))
                if not args.json:
                    print_greedy(results[-1], info, args, first=len(results) == 1)
        finally:
            stop_server(proc)
    if args.json:
        print(
            json.dumps(
                {
                    "model": info.get("model"),
                    "source": info.get("source"),
                    "greedy": args.greedy,
                    "serve_args": args.serve_arg,
                    "seconds": args.seconds,
                    "machine": {
                        "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    },
                    "levels": results,
                },
                indent=1,
            )
        )
    return 1 if any(r["alone"]["errors"] or r["beside_greedy"]["errors"] for r in results) else 0


def print_greedy(r: dict, info: dict, args, first: bool) -> None:
    if first:
        print(
            f"model {info.get('model')} from {info.get('source')}; {args.seconds:g} s a run; greedy client: "
            f"{args.greedy} connections, one key, {'waiting out' if args.greedy_waits else 'ignoring'} Retry-After; "
            f"server settings: {' '.join(args.serve_arg) or 'defaults'}"
        )
        print(
            f"{'clients':>7} {'ordinary clients':<17} {'requests':>8} {'q/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'errors':>6} {'CPU %: server':>13} {'loop':>5} {'clients':>7}   {'greedy 200':>10} {'429':>7} "
            f"{'other':>5} {'CPU %':>6}   {'p50 ratio':>9}"
        )
    g = r["greedy"]
    for name, row in (("alone", r["alone"]), ("beside greedy", r["beside_greedy"])):
        line = (
            f"{r['clients']:>7} {name:<17} {row['requests']:>8} {row['questions_per_s']!s:>8} "
            f"{row['p50_ms']!s:>8} {row['p99_ms']!s:>8} {row['errors']:>6} {row['server_cpu_percent']!s:>13} "
            f"{row['event_loop_cpu_percent']!s:>5} {row['clients_cpu_percent']!s:>7}"
        )
        if name != "alone":
            line += (
                f"   {g['answered']:>10} {g['refused_429']:>7} {sum(g['other'].values()):>5} "
                f"{g['cpu_percent']!s:>6}   {r['p50_ratio']!s:>9}"
            )
        print(line, flush=True)
        for e in row["first_errors"]:
            print(f"        error: {e}")


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
    level = Level(
        host, port, clients, args.seconds, args.max_requests, args.questions_per_request, new_contexts=args.new_contexts
    )
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
    ap.add_argument(
        "--new-contexts",
        action="store_true",
        help="each request's paragraph ends with its number, "
        "so a model reading a contextual encoder reads every paragraph (its memo never holds it)",
    )
    ap.add_argument("--max-batch", type=int, default=32, help="as rckit serve --max-batch")
    ap.add_argument("--batch-window-ms", type=float, default=2, help="as rckit serve --batch-window-ms")
    ap.add_argument("--threads", type=int, help="as rckit serve --threads")
    ap.add_argument("--mixed", metavar="L,S", help="L long-document clients beside S paragraph clients (docstring)")
    ap.add_argument("--long-words", type=int, default=20000, help="--mixed: words in each long document")
    ap.add_argument(
        "--greedy",
        type=int,
        metavar="N",
        help="beside each level's clients, one client with N "
        "connections at full speed (docstring); every client has its own key",
    )
    ap.add_argument(
        "--greedy-waits",
        action="store_true",
        help="--greedy: the greedy client waits out each 429's Retry-After (by default it sends again at once)",
    )
    ap.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        help="another rckit serve setting, e.g. --serve-arg=--policy=round-robin",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]

    if args.greedy:
        return greedy_main(args, levels)
    proc, host, port = start_server(args)
    if args.mixed:
        try:
            info = get_json(host, port, "/v1/model")
            rows = mixed(host, port, args)
        finally:
            stop_server(proc)
        print(
            json.dumps(
                {
                    "model": info.get("model"),
                    "mixed": args.mixed,
                    "long_words": args.long_words,
                    "seconds": args.seconds,
                    "serve_args": args.serve_arg,
                    "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    "rows": rows,
                },
                indent=1,
            )
        )
        return 1 if any(r["errors"] for r in rows) else 0
    try:
        info = get_json(host, port, "/v1/model")
        results = []
        for clients in levels:
            results.append(measure(host, port, proc.pid, clients, args))
            if not args.json:
                if len(results) == 1:
                    print(
                        f"model {info.get('model')} from {info.get('source')}; {args.seconds:g} s or "
                        f"{args.max_requests} requests per level; max batch {args.max_batch}, window "
                        f"{args.batch_window_ms:g} ms"
                    )
                    print(
                        f"{'clients':>7} {'requests':>8} {'q/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} "
                        f"{'q/call':>6} {'RSS MiB before':>14} {'after':>7} {'peak':>7}"
                    )
                r = results[-1]
                print(
                    f"{r['clients']:>7} {r['requests']:>8} {r['questions_per_s']!s:>8} {r['p50_ms']!s:>8} "
                    f"{r['p99_ms']!s:>8} {r['errors']:>6} {r['questions_per_call']!s:>6} "
                    f"{r['rss_before_mib']:>14} {r['rss_after_mib']:>7} {r['peak_rss_mib']:>7}",
                    flush=True,
                )
                for e in r["first_errors"]:
                    print(f"        error: {e}")
    finally:
        stop_server(proc)
    if args.json:
        print(
            json.dumps(
                {
                    "model": info.get("model"),
                    "source": info.get("source"),
                    "parameters": info.get("parameters"),
                    "settings": {
                        "seconds": args.seconds,
                        "max_requests": args.max_requests,
                        "questions_per_request": args.questions_per_request,
                        "max_batch": args.max_batch,
                        "batch_window_ms": args.batch_window_ms,
                        "threads": args.threads,
                    },
                    "machine": {
                        "cpus": os.cpu_count(),
                        "python": platform.python_version(),
                        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                    },
                    "levels": results,
                },
                indent=1,
            )
        )
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
