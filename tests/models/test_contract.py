"""The model contract (rckit.models.contract): every model keeps it, and nothing probes a model."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from rckit.data.batching import Batch
from rckit.data.cloze.examples import ENTITY_OFFSET, ClozeBatch
from rckit.data.embeddings import EmbeddingInfo
from rckit.models import MODELS
from rckit.models.contract import ClozeOutput, ReadingModel, SpanOutput
from tests.conftest import TINY, TINY_QANET

SRC = Path(__file__).resolve().parents[2] / "src" / "rckit"
N_ENTITIES, V = 5, 40


def emb_info() -> EmbeddingInfo:
    g = torch.Generator().manual_seed(0)
    return EmbeddingInfo(torch.randn(V, 6, generator=g), n_trainable_words=10, n_chars=12, n_entities=N_ENTITIES)


def span_batch() -> Batch:
    g = torch.Generator().manual_seed(1)
    c_len, q_len = torch.tensor([9, 6, 7]), torch.tensor([4, 3, 2])
    c_mask, q_mask = torch.arange(9) < c_len[:, None], torch.arange(4) < q_len[:, None]
    words = lambda mask: torch.randint(2, V, mask.shape, generator=g) * mask  # noqa: E731
    chars = lambda mask: torch.randint(2, 12, (*mask.shape, 5), generator=g) * mask[..., None]  # noqa: E731
    return Batch(
        c_words=words(c_mask),
        c_chars=chars(c_mask),
        c_mask=c_mask,
        q_words=words(q_mask),
        q_chars=chars(q_mask),
        q_mask=q_mask,
        y_start=torch.tensor([2, 0, -1]),
        y_end=torch.tensor([3, 4, -1]),
        index=torch.arange(3),
    )


def cloze_batch() -> ClozeBatch:
    c_words = torch.tensor(
        [[20, ENTITY_OFFSET + 1, 21, ENTITY_OFFSET + 3, 22], [ENTITY_OFFSET + 0, 23, ENTITY_OFFSET + 2, 0, 0]]
    )
    q_words = torch.tensor([[24, 25, 3], [26, 3, 0]])
    candidates = torch.zeros(2, N_ENTITIES, dtype=torch.bool)
    candidates[0, [1, 3]] = candidates[1, [0, 2]] = True
    return ClozeBatch(
        c_words=c_words,
        c_mask=c_words != 0,
        q_words=q_words,
        q_mask=q_words != 0,
        candidates=candidates,
        answer=torch.tensor([3, 0]),
        answer_cut=torch.zeros(2, dtype=torch.bool),
        index=torch.arange(2),
    )


def every_f1_is_half(rows, starts, ends):
    return torch.full(starts.shape, 0.5)


def test_every_model_is_a_reading_model_and_every_task_is_covered():
    for name, (cfg_cls, model_cls) in MODELS.items():
        assert issubclass(model_cls, ReadingModel), name
    covered = {
        (name, MODELS[name][1].task_of(MODELS[name][0](**over)))
        for name, over in ((n, o) for (n, _), o in TINY.items())
    }
    assert covered == set(TINY), "every (model, task) pair is tested below, and task_of names it"
    assert {name for name, _ in TINY} == set(MODELS)


@pytest.mark.parametrize("name, task", sorted(TINY))
def test_a_model_keeps_the_contract(name, task):
    cfg_cls, model_cls = MODELS[name]
    config = cfg_cls(**TINY[(name, task)])
    torch.manual_seed(0)
    model = model_cls(config, emb_info())
    assert model.task == model_cls.task_of(config) == task
    for hook in ("cpu_bf16", "uses_reward", "reward_on", "find_unused_parameters"):
        assert isinstance(getattr(model, hook), bool), hook
    assert model.loss_terms == {} and model.config is config

    batch = span_batch() if task == "span" else cloze_batch()
    model.train()
    out = model(batch)
    if task == "span":
        assert isinstance(out, SpanOutput)
        assert out.start_logits.shape == out.end_logits.shape == batch.c_mask.shape
        assert (out.start_logits[~batch.c_mask] == torch.finfo(out.start_logits.dtype).min).all()
    else:
        assert isinstance(out, ClozeOutput)
        assert out.logits.shape == (len(batch), N_ENTITIES)
        assert (out.logits[~batch.candidates] == torch.finfo(out.logits.dtype).min).all()
    loss = model.loss(out, batch, reward_fn=every_f1_is_half if model.uses_reward else None)
    assert loss.ndim == 0 and loss.dtype == torch.float32 and torch.isfinite(loss)
    assert isinstance(model.loss_terms, dict) and all(
        t.ndim == 0 and not t.requires_grad for t in model.loss_terms.values()
    )
    loss.backward()
    assert any(p.grad is not None for p in model.parameters())


def test_the_default_loss_is_the_tasks_cross_entropy():
    from rckit.models.losses import cloze_loss, span_loss

    torch.manual_seed(0)
    qanet = MODELS["qanet"][1](MODELS["qanet"][0](**TINY_QANET), emb_info()).eval()
    b = span_batch()
    out = qanet(b)
    torch.testing.assert_close(qanet.loss(out, b), span_loss(out.start_logits, out.end_logits, b.y_start, b.y_end))
    cfg_cls, model_cls = MODELS["attentive_reader"]
    reader = model_cls(cfg_cls(**TINY[("attentive_reader", "cloze")]), emb_info()).eval()
    c = cloze_batch()
    out = reader(c)
    torch.testing.assert_close(reader.loss(out, c), cloze_loss(out.logits, c.answer, ~c.answer_cut))


def _probes(path: Path) -> list[str]:
    """``getattr``/``hasattr`` calls in a module, as source text."""
    tree = ast.parse(path.read_text())
    return [
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")
    ]


def test_the_engine_bench_export_and_cli_never_probe_a_model():
    """They rely on the contract: no getattr/hasattr in training/, model_files/, export/,
    answering/ or evaluation/; the CLI's only look at its parsed arguments and at which modules
    are loaded."""
    rooms = ("training", "model_files", "export", "answering", "evaluation")
    for path in sorted(p for room in rooms for p in (SRC / room).glob("*.py")):
        assert _probes(path) == [], path
    allowed = re.compile(r"^(getattr|hasattr)\((args|sys\.modules\[module\]),")
    for path in sorted((SRC / "cli").glob("*.py")):
        assert [p for p in _probes(path) if not allowed.match(p)] == [], path
