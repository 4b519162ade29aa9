"""Answering, evaluating and indexing on a real Ray cluster (issue 54): a head started with
``ray start --head`` on a free port of this machine and a second node joined with ``ray start
--address``, as an operator would; rckit joins it with ``--ray ADDRESS``. The answers equal the
local run's, in input order; a bad line is named and skipped; a killed driver resumes; an actor
killed mid-run loses and doubles nothing; the local path never imports Ray."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.answering.test_verifier import rejecting_export  # noqa: F401 (a fixture)
from tests.conftest import GREEK, need, ray_present

pytestmark = pytest.mark.ray

RCKIT = [sys.executable, "-m", "rckit"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    ray = Path(sys.executable).with_name("ray")
    return subprocess.run([str(ray), *args], capture_output=True, text=True, timeout=180, check=check)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head (one CPU) and a second node (one CPU) on this machine: the address to join."""
    need("ray", ray_present())
    port = free_port()
    address = f"127.0.0.1:{port}"
    temp = Path(f"/tmp/rckit-ray-{os.getpid()}")  # short: Ray's sockets live under it
    # Token authentication, as a cluster should run (Ray's default for local clusters since 2.59):
    # the same token for the nodes and every driver, here through the environment they inherit.
    token = tmp_path_factory.mktemp("ray") / "token"
    token.write_text(secrets.token_hex(32))
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    import ray  # after the environment: Ray reads its authentication settings when first loaded

    common = ["--num-cpus=1", "--disable-usage-stats"]
    try:
        ray_cli("start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}", *common)
        ray_cli("start", f"--address={address}", *common)
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        ray_cli("stop", "--force", check=False)
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def questions(n: int) -> list[dict]:
    out = []
    for i in range(n):
        words = [GREEK[(i * 5 + k * 3) % len(GREEK)] for k in range(8 + i % 5)]
        out.append({"id": f"q{i}", "context": " ".join(words) + ".", "question": f"what follows {words[i % 4]} ?"})
    return out


def write_jsonl(path: Path, records: list, bad: dict[int, str] | None = None) -> Path:
    lines = [json.dumps(r) for r in records]
    for at, text in sorted((bad or {}).items()):
        lines.insert(at, text)
    path.write_text("\n".join(lines) + "\n")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def spans(records: list[dict]) -> list[tuple]:
    """What an answer says, without its floating-point score."""
    return [(r["id"], [(a["answer"], a["start"], a["end"]) for a in r["answers"]]) for r in records]


def run_rckit(args: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*RCKIT, *map(str, args)], capture_output=True, text=True, timeout=300, **kw)


def test_the_cluster_has_two_nodes(cluster):
    import ray

    from rckit.cluster.answers import connect

    connect(cluster, log=lambda m: None)
    assert sum(1 for n in ray.nodes() if n["Alive"]) == 2


def test_the_clusters_error_messages_go_to_stderr_not_to_the_answers(cluster, capsys):
    """Ray prints what the raylet publishes (a worker that died) on the driver's stdout, where
    rckit writes scores and answers: after connect they go to stderr."""
    import ray._private.worker as ray_worker

    from rckit.cluster.answers import connect

    connect(cluster, log=lambda m: None)
    capsys.readouterr()
    ray_worker.print_to_stdstream({"lines": ["a worker died"], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == ""
    assert "a worker died" in err


def test_predict_on_ray_answers_as_the_local_run_in_order_and_skips_bad_lines(cluster, tiny_export, tmp_path):
    good = questions(40)
    q = write_jsonl(tmp_path / "q.jsonl", good, {3: "{not json", 10: json.dumps({"id": "x", "context": "alpha."})})
    local = tmp_path / "local.jsonl"
    done = run_rckit(
        [
            "predict",
            tiny_export,
            "--questions",
            write_jsonl(tmp_path / "good.jsonl", good),
            "--out",
            local,
            "--device",
            "cpu",
        ]
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "ray.jsonl"
    got = run_rckit(
        [
            "predict",
            tiny_export,
            "--questions",
            q,
            "--out",
            out,
            "--ray",
            cluster,
            "--workers",
            2,
            "--ray-block",
            8,
            "--device",
            "cpu",
        ]
    )
    assert got.returncode == 0, got.stderr
    assert f"{q}: line 4: not valid JSON" in got.stderr and f"{q}: line 11: missing field 'question'" in got.stderr
    assert "40 questions answered on Ray (0 before, 2 lines skipped)" in got.stderr
    ours, theirs = read_jsonl(out), read_jsonl(local)
    assert [r["id"] for r in ours] == [r["id"] for r in good]
    assert spans(ours) == spans(theirs)
    for a, b in zip(ours, theirs):
        assert a["answers"][0]["score"] == pytest.approx(b["answers"][0]["score"], rel=1e-5)


class Driver:
    """``rckit predict`` of ``n`` questions on the cluster in blocks of 4, started as a process of
    its own (to be killed, or to have an actor killed under it)."""

    def __init__(self, cluster: str, model: Path, root: Path, n: int):
        self.records = questions(n)
        self.q = write_jsonl(root / "q.jsonl", self.records)
        self.out, self.root, self.model = root / "a.jsonl", root, model
        self.args = [
            "predict",
            model,
            "--questions",
            self.q,
            "--out",
            self.out,
            "--ray",
            cluster,
            "--workers",
            2,
            "--ray-block",
            4,
            "--device",
            "cpu",
        ]
        self.process = subprocess.Popen(
            [*RCKIT, *map(str, self.args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )

    def lines(self) -> int:
        return self.out.read_text().count("\n") if self.out.is_file() else 0

    def wait_for(self, ready, seconds: float = 240):
        """Poll ``ready()`` while the driver runs; its first true value, or None."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self.process.poll() is None:
            got = ready()
            if got:
                return got
            time.sleep(0.05)
        return None

    def check_answers(self) -> None:
        """Each question once, in order, answered as the local run answers it."""
        ours = read_jsonl(self.out)
        assert [r["id"] for r in ours] == [r["id"] for r in self.records]
        local = self.root / "local.jsonl"
        done = run_rckit(["predict", self.model, "--questions", self.q, "--out", local, "--device", "cpu"])
        assert done.returncode == 0, done.stderr
        assert spans(ours) == spans(read_jsonl(local))


def test_a_killed_driver_resumes_without_losing_or_doubling(cluster, tiny_export, tmp_path):
    driver = Driver(cluster, tiny_export, tmp_path, 400)
    killed = driver.wait_for(lambda: driver.lines() >= 12)
    driver.process.send_signal(signal.SIGKILL)
    driver.process.wait()
    before = driver.lines()
    assert killed and 12 <= before < len(driver.records), "the driver was killed before it finished"
    with open(driver.out, "a") as f:
        f.write('{"id": "q999", "answ')  # a line the kill cut short
    again = run_rckit(driver.args)
    assert again.returncode == 0, again.stderr
    assert f"{before:,} questions answered before; going on" in again.stderr
    driver.check_answers()


def actors() -> list[int]:
    """The pids of Ray Data's actors answering on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"MapWorker" in cmd and b"Answerer" in cmd:
                found.append(int(entry.name))
    return found


def test_an_actor_killed_mid_run_loses_and_doubles_nothing(cluster, tiny_export, tmp_path):
    driver = Driver(cluster, tiny_export, tmp_path, 600)
    victim = driver.wait_for(lambda: driver.lines() >= 8 and (actors() or [None])[0])
    assert victim is not None, "no actor was seen answering"
    os.kill(victim, signal.SIGKILL)
    _, err = driver.process.communicate(timeout=300)
    assert driver.process.returncode == 0, err
    assert victim not in actors()
    driver.check_answers()


def test_evaluate_on_ray_scores_as_the_local_run(cluster, rejecting_export, tmp_path):  # noqa: F811
    from tests.conftest import greek_paragraphs, squad_json, write_json

    data = write_json(tmp_path / "dev.json", squad_json(greek_paragraphs(6)))
    local = run_rckit(
        [
            "evaluate",
            rejecting_export,
            "--data",
            data,
            "--out",
            tmp_path / "local.json",
            "--always-answer",
            "--device",
            "cpu",
        ]
    )
    assert local.returncode == 0, local.stderr
    got = run_rckit(
        [
            "evaluate",
            rejecting_export,
            "--data",
            data,
            "--out",
            tmp_path / "ray.json",
            "--always-answer",
            "--device",
            "cpu",
            "--ray",
            cluster,
            "--workers",
            2,
        ]
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == json.loads(local.stdout)
    assert (tmp_path / "ray.json").read_bytes() == (tmp_path / "local.json").read_bytes()


def test_index_on_ray_holds_what_the_local_index_holds_and_names_a_bad_file(cluster, tmp_path):
    import sqlite3

    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(12):
        words = " ".join(GREEK[(i + k) % len(GREEK)] for k in range(150 + 40 * i))
        (folder / f"note{i:02}.md").write_text(f"# Note {i}\n\n{words}\n")
    (folder / "broken.json.gz").write_bytes(b"not gzip at all")
    local = run_rckit(["index", folder, "--out", tmp_path / "local.sqlite", "--no-progress"])
    assert local.returncode == 0, local.stderr
    got = run_rckit(
        ["index", folder, "--out", tmp_path / "ray.sqlite", "--no-progress", "--ray", cluster, "--workers", 2]
    )
    assert got.returncode == 0, got.stderr
    assert "skipped" in got.stderr and "broken.json.gz" in got.stderr

    def counts(out: str) -> str:  # "N documents, M passages"
        return out.split(": ", 1)[1].split(" MiB")[0].rsplit(",", 1)[0]

    assert counts(got.stdout) == counts(local.stdout)

    def held(path: Path) -> list:
        with sqlite3.connect(path) as db:
            return db.execute(
                'SELECT s.path, d.title, p.start, p."end" FROM passages p JOIN documents d ON p.document_id = d.id '
                "JOIN sources s ON d.source_id = s.id ORDER BY s.path, p.start"
            ).fetchall()

    assert held(tmp_path / "ray.sqlite") == held(tmp_path / "local.sqlite") and held(tmp_path / "ray.sqlite")
    again = run_rckit(["index", folder, "--out", tmp_path / "ray.sqlite", "--no-progress", "--ray", cluster])
    assert again.returncode == 0 and "0 files added, 0 updated, 12 unchanged" in again.stdout


def test_the_local_path_does_not_import_ray(tiny_export, tmp_path):
    q = write_jsonl(tmp_path / "q.jsonl", questions(3))
    args = ["predict", str(tiny_export), "--questions", str(q), "--out", str(tmp_path / "a.jsonl"), "--device", "cpu"]
    code = f"import sys; from rckit.cli import main; assert main({args!r}) == 0; assert 'ray' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    no_ray = run_rckit(["predict", tiny_export, "--questions", q, "--out", tmp_path / "b.json", "--ray"])
    assert no_ray.returncode == 2 and "name the output .jsonl" in no_ray.stderr


def test_ask_on_ray_answers_as_the_local_run(cluster, tiny_export, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(6):
        (folder / f"note{i}.md").write_text(" ".join(GREEK[(i * 5 + k * 3) % len(GREEK)] for k in range(60)) + ".\n")
    index = tmp_path / "notes.sqlite"
    assert run_rckit(["index", folder, "--out", index, "--no-progress"]).returncode == 0
    asked = [{"id": i, "question": f"what follows {GREEK[i % len(GREEK)]} ?"} for i in range(20)]
    q = write_jsonl(tmp_path / "q.jsonl", asked, {5: "[1, 2]"})
    local = tmp_path / "local.jsonl"
    good = write_jsonl(tmp_path / "good.jsonl", asked)
    done = run_rckit(["ask", index, "--model", tiny_export, "--questions", good, "--out", local, "--device", "cpu"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "ray.jsonl"
    got = run_rckit(
        [
            "ask",
            index,
            "--model",
            tiny_export,
            "--questions",
            q,
            "--out",
            out,
            "--device",
            "cpu",
            "--ray",
            cluster,
            "--workers",
            2,
            "--ray-block",
            5,
        ]
    )
    assert got.returncode == 0, got.stderr
    assert f"{q}: line 6: expected an object" in got.stderr
    ours, theirs = read_jsonl(out), read_jsonl(local)
    assert [r["id"] for r in ours] == list(range(20))

    def found(records):
        return [[(a["answer"], a["source"], a["start"]) for a in r["answers"]] for r in records]

    assert found(ours) == found(theirs)


def test_without_ray_installed_the_command_says_so_in_one_line(tiny_export, tmp_path):
    """Ray hidden from the interpreter (a module finder that refuses it): one line naming the install."""
    q = write_jsonl(tmp_path / "q.jsonl", questions(2))
    code = (
        "import sys\n"
        "class NoRay:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ImportError('no ray here')\n"
        "sys.meta_path.insert(0, NoRay())\n"
        "from rckit.cli import main\n"
        f"sys.exit(main(['predict', {str(tiny_export)!r}, '--questions', {str(q)!r}, '--out', "
        f"{str(tmp_path / 'a.jsonl')!r}, '--ray', '--device', 'cpu']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "rckit predict: --ray needs Ray: pip install 'rckit[ray]'"


def test_rckits_own_reader_answers_and_scores_on_ray_as_it_does_locally(cluster, tmp_path):
    """A file of rckit's own reader (:class:`~rckit.answering.pointer_reader.PointerReader`):
    ``predict --ray`` and ``evaluate --ray`` give what the local commands give."""
    from tests.conftest import greek_paragraphs, squad_json, write_json, write_tiny_reader_file

    model = write_tiny_reader_file(tmp_path / "reader", threshold=0.15)  # abstains on some of these
    q = write_jsonl(tmp_path / "q.jsonl", questions(24))
    common = ["--questions", q, "--top-k", 2, "--device", "cpu"]
    local = run_rckit(["predict", model, *common, "--out", tmp_path / "local.jsonl"])
    assert local.returncode == 0, local.stderr
    got = run_rckit(
        ["predict", model, *common, "--out", tmp_path / "ray.jsonl", "--ray", cluster, "--workers", 2, "--ray-block", 5]
    )
    assert got.returncode == 0, got.stderr
    ours, theirs = read_jsonl(tmp_path / "ray.jsonl"), read_jsonl(tmp_path / "local.jsonl")
    assert spans(ours) == spans(theirs) and any(a["answer"] == "" for r in ours for a in r["answers"])
    data = write_json(tmp_path / "dev.json", squad_json(greek_paragraphs(6)))
    scored = [
        run_rckit(["evaluate", model, "--data", data, "--out", tmp_path / f"{name}.json", "--device", "cpu", *extra])
        for name, extra in (("local", []), ("on-ray", ["--ray", cluster, "--workers", 2]))
    ]
    assert all(r.returncode == 0 for r in scored), [r.stderr for r in scored]
    assert json.loads(scored[0].stdout) == json.loads(scored[1].stdout)
    assert (tmp_path / "local.json").read_bytes() == (tmp_path / "on-ray.json").read_bytes()
