"""``rckit index`` run on the index a serving ``rckit serve --index`` reads, under load.

    python benchmarks/reindex_under_load.py --index C1M.sqlite --docs C1M --dev DEV.json.gz
        [--clients 4] [--settle 20] [--model RUN|FILE]

Starts ``rckit serve --index INDEX`` on 127.0.0.1 (the installed model unless ``--model``) and
``--clients`` closed-loop clients asking dev questions through ``POST /v1/ask``. After ``--settle``
seconds it runs, one after the other, as a person would:

1. ``rckit index DOCS NEW --out INDEX``: every file of the collection checked again (hashed) and
   a new folder of 20 documents added, one of them holding a fact no other document holds;
2. one file of 10,000 generated documents rewritten (each its text with one word changed) and
   the same command again: 10,000 documents replaced under the server.

then lets the clients ask ``--settle`` seconds more and asks the new fact. Prints one JSON
object: each ``rckit index`` run's seconds and report line, the requests answered and failed
(any status but 200, or no reply) before, during and after, their p50/p99 latency, and whether
the new fact was found without a restart. The rewritten file is put back at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from rckit.data.squad import load_json

FACT = "The quillwort beacon of Ardnamurchan was lit for the first time in 1849 by keeper Ewan Gillies."
QUESTION = "Who lit the quillwort beacon of Ardnamurchan?"


def start(args: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rckit", "serve", *args, "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.select(timeout=300)
    url = re.search(r"http://127\.0\.0\.1:\d+/", proc.stdout.readline())
    if not url:
        proc.kill()
        raise SystemExit("rckit serve printed no URL")
    return proc, url.group(0)


def ask(url: str, question: str) -> tuple[int, dict | None]:
    req = urllib.request.Request(
        url + "v1/ask", data=json.dumps({"question": question}).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None
    except OSError:
        return 0, None


def index(docs: list[str], out: str) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "rckit", "index", *docs, "--out", out, "--no-progress"], capture_output=True, text=True
    )
    return {
        "seconds": round(time.perf_counter() - t0, 1),
        "rc": done.returncode,
        "said": (done.stdout or done.stderr).strip().splitlines()[-1:],
    }


def summary(calls: list[tuple[float, float, int]], lo: float, hi: float) -> dict:
    part = [(ms, status) for t, ms, status in calls if lo <= t < hi]
    ok = sorted(ms for ms, status in part if status == 200)
    return {
        "answered": len(ok),
        "failed": len(part) - len(ok),
        "p50_ms": round(statistics.median(ok), 1) if ok else None,
        "p99_ms": round(ok[min(len(ok) - 1, int(0.99 * len(ok)))], 1) if ok else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--docs", required=True, help="the folder the index was made from")
    ap.add_argument("--dev", required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--settle", type=float, default=20.0)
    ap.add_argument("--model")
    args = ap.parse_args()
    questions = [qa["question"] for a in load_json(args.dev)["data"] for p in a["paragraphs"] for qa in p["qas"]]
    victim = sorted(Path(args.docs).glob("generated-*.jsonl"))[-1]
    backup = Path(tempfile.mkdtemp()) / victim.name
    shutil.copy2(victim, backup)
    new = Path(tempfile.mkdtemp(prefix="new-docs-"))
    for i in range(20):
        (new / f"note{i:02d}.txt").write_text(
            FACT if i == 7 else f"Harbour note {i}: the tide turned at noon.", encoding="utf-8"
        )
    proc, url = start([*([args.model] if args.model else []), "--index", args.index])
    calls: list[tuple[float, float, int]] = []
    stop = threading.Event()

    def client(k: int):
        i = k
        while not stop.is_set():
            t0 = time.perf_counter()
            status, _ = ask(url, questions[i % len(questions)])
            calls.append((t0, 1000 * (time.perf_counter() - t0), status))
            i += args.clients

    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    res: dict = {"index": args.index, "clients": args.clients}
    try:
        t_start = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(args.settle)
        t_index = time.perf_counter()
        res["add_20"] = index([args.docs, str(new)], args.index)
        with victim.open(encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        with victim.open("w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps({**r, "text": r["text"].replace(" the ", " this ", 1)}, ensure_ascii=False) + "\n")
        res["replace_10000"] = index([args.docs, str(new)], args.index)
        t_done = time.perf_counter()
        time.sleep(args.settle)
        stop.set()
        for t in threads:
            t.join()
        t_end = time.perf_counter()
        res["before"] = summary(calls, t_start, t_index)
        res["during"] = summary(calls, t_index, t_done)
        res["after"] = summary(calls, t_done, t_end + 1)
        status, body = ask(url, QUESTION)
        top = body["answers"][0] if body else {}
        res["new_fact"] = {"status": status, "answer": top.get("answer"), "source": top.get("source")}
    finally:
        stop.set()
        proc.terminate()
        proc.wait()
        shutil.copy2(backup, victim)
        res["put_back"] = index([args.docs], args.index)  # the rewritten file as it was (the 20 new stay)
        shutil.rmtree(new)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
