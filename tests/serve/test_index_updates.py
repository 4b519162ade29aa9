"""An index updated while a real server answers from it: no request lost, the new text answered
without a restart (the index's write-ahead log: a reader never waits for ``rckit index``)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

from rckit.retrieval.store import PassageStore
from tests.serve.test_serve import start_server, stop_server


def ask(url: str, question: str, passages: int = 3) -> tuple[int, dict]:
    req = urllib.request.Request(
        url + "v1/ask",
        data=json.dumps({"question": question, "passages": passages}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_updating_the_index_under_a_serving_server_loses_no_request(tiny_export, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(30):
        (docs / f"d{i:02d}.txt").write_text(
            f"Harbour log {i}. The ferry number {i} sails at dawn to the island "
            f"of Skerry {i}, carrying mail and bread.\n",
            encoding="utf-8",
        )
    db = tmp_path / "index.sqlite"
    with PassageStore(db) as store:
        store.add([docs])
    proc, url = start_server([str(tiny_export), "--index", str(db)], tmp_path / "serve.log")
    statuses: list[int] = []
    stop = threading.Event()

    def client():
        while not stop.is_set():
            statuses.append(ask(url, "When does the ferry sail to the island?")[0])

    clients = [threading.Thread(target=client) for _ in range(4)]
    try:
        for c in clients:
            c.start()
        while len(statuses) < 20:  # the clients are asking before the index changes
            stop.wait(0.05)
        for i in range(20):  # 20 new documents, one changed, one removed
            (docs / f"new{i:02d}.txt").write_text(
                f"Lighthouse note {i}: the keeper trims the wick at dusk.\n", encoding="utf-8"
            )
        (docs / "new07.txt").write_text("The zephyrine lamp of the north light was lit in 1794.\n", encoding="utf-8")
        (docs / "d03.txt").write_text("The ferry to Skerry 3 was withdrawn.\n", encoding="utf-8")
        (docs / "d04.txt").unlink()
        before = len(statuses)
        with PassageStore(db) as store:
            store.commit_seconds = 0  # a commit after every file: the server reads between them
            report = store.add([docs])
        assert (report["added"], report["updated"], report["removed"]) == (20, 1, 1)
        during = len(statuses) - before
        while len(statuses) < before + during + 20:  # and they go on asking after it
            stop.wait(0.05)
    finally:
        stop.set()
        for c in clients:
            c.join()
    try:
        assert statuses and set(statuses) == {200}, sorted(set(statuses))
        status, body = ask(url, "When was the zephyrine lamp lit?", passages=1)  # no restart
        assert status == 200 and body["answers"][0]["source"] == str((docs / "new07.txt").resolve())
        status, body = ask(url, "Skerry 4 ferry", passages=50)
        assert status == 200 and all(not a["source"].endswith("d04.txt") for a in body["answers"])
        info = json.load(urllib.request.urlopen(url + "v1/index", timeout=30))
        assert info["documents"] == 49 and info["passages"] == 49
    finally:
        assert stop_server(proc) == 130  # Ctrl-C, as rckit serve reports it
