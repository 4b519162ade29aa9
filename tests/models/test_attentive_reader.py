"""Tiny-config contract tests for the Attentive and Impatient Readers, and one CLI run."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
import torch

from rckit.cli import main
from rckit.data.cloze.examples import ENTITY_OFFSET, ClozeExample, ClozeSplit, ClozeVocab
from rckit.data.embeddings import EmbeddingInfo
from rckit.models.attentive_reader import AttentiveReader, AttentiveReaderConfig, ImpatientReader, ImpatientReaderConfig
from tests.conftest import TINY, check_cloze_contract, cloze_overfit_accuracy

WORDS = [f"w{k}" for k in range(30)]
MARKERS = [f"m{k}" for k in range(6)]
N_ENT = 6
# The tests' tiny attentive reader, with its two sizes apart (12, 10) so a shape mix-up shows, no dropout.
TINY_ATTENTIVE = {**TINY[("attentive_reader", "cloze")], "hidden": 12, "attention": 10, "dropout": 0.0}
READERS = {"attentive": (AttentiveReaderConfig, AttentiveReader), "impatient": (ImpatientReaderConfig, ImpatientReader)}


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy machine OpenMP threads
    waiting for a descheduled sibling make each step many times slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def examples(n: int, seed: int) -> list[ClozeExample]:
    """Documents of 6-16 tokens with 3 marker-entity pairs; the query names one marker.

    The answer is the entity right after the query's marker; queries have 2-4 tokens.
    """
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ents = [f"@entity{e}" for e in rng.sample(range(N_ENT), 3)]
        marks = rng.sample(MARKERS, 3)
        pieces = [[m, e] for m, e in zip(marks, ents)] + [[w] for w in rng.choices(WORDS, k=rng.randint(0, 10))]
        rng.shuffle(pieces)
        doc = [t for p in pieces for t in p]
        k = rng.randrange(3)
        query = ["@placeholder", marks[k], "after", "here"][: rng.randint(2, 4)]
        out.append(ClozeExample(f"x{i}", doc, query, ents[k], sorted(set(ents))))
    return out


def split_and_emb(n: int, seed: int):
    exs = examples(n, seed)
    vocab = ClozeVocab.build(exs, n_entities=N_ENT)
    torch.manual_seed(seed)
    emb = EmbeddingInfo(
        word_vectors=torch.randn(len(vocab), 8), n_trainable_words=len(vocab), n_chars=0, n_entities=N_ENT
    )
    return ClozeSplit.from_examples(exs, vocab), emb


def make(kind: str, emb: EmbeddingInfo, seed: int = 0, **fields):
    cfg_cls, model_cls = READERS[kind]
    torch.manual_seed(seed)
    return model_cls(cfg_cls(**{**TINY_ATTENTIVE, **fields}), emb)


@pytest.mark.parametrize("kind", READERS)
def test_shapes_candidates_loss_and_gradients(kind):
    split, emb = split_and_emb(6, seed=1)
    model = make(kind, emb).train()
    batch = split.collate(range(6))
    check_cloze_contract(model, batch, N_ENT)


@pytest.mark.parametrize("kind", READERS)
def test_attention_sums_to_one_over_real_document_tokens(kind):
    split, emb = split_and_emb(8, seed=2)
    model = make(kind, emb).eval()
    batch = split.collate(range(8))
    assert not batch.c_mask.all() and not batch.q_mask.all()  # the batch has padding to test
    with torch.no_grad():
        s = model.attend(batch).s
    if kind == "attentive":
        assert s.shape == batch.c_words.shape
        s, steps = s.unsqueeze(1), torch.ones(8, 1, dtype=torch.bool)  # one step: (B, 1, Td)
    else:
        assert s.shape == (8, batch.q_words.shape[1], batch.c_words.shape[1])
        steps = batch.q_mask  # (B, Tq): padded query steps attend nowhere
    real = batch.c_mask.unsqueeze(1) & steps.unsqueeze(-1)  # (B, steps, Td)
    torch.testing.assert_close(s.sum(-1), steps.float())
    assert (s[~real] == 0).all() and (s[real] > 0).all()


def test_query_summary_is_last_forward_state_and_first_backward_state():
    split, emb = split_and_emb(5, seed=3)
    model = make("attentive", emb).eval()
    batch = split.collate(range(5))
    with torch.no_grad():
        e = model.encode(batch)
    H = TINY_ATTENTIVE["hidden"]
    last = batch.q_mask.sum(1) - 1  # (B,)
    fwd = e.y_q[torch.arange(5), last, :H]  # (B, H)
    bwd = e.y_q[:, 0, H:]  # (B, H)
    torch.testing.assert_close(e.u, torch.cat([fwd, bwd], dim=-1))


@pytest.mark.parametrize("kind", READERS)
@pytest.mark.parametrize("peephole", [None, "diagonal"])
def test_one_example_alone_equals_it_in_a_padded_batch(kind, peephole):
    split, emb = split_and_emb(6, seed=4)
    model = make(kind, emb, peephole=peephole).eval()
    batch = split.collate(range(6))
    lengths = batch.c_mask.sum(1)
    shortest = int(lengths.argmin())
    assert lengths[shortest] < batch.c_words.shape[1]  # its neighbours are longer: it is padded
    with torch.no_grad():
        whole = model(batch).logits
        for i in range(6):
            one = model(split.collate([i])).logits
            torch.testing.assert_close(one[0], whole[i], rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", READERS)
def test_overfits_one_small_batch(kind):
    split, emb = split_and_emb(8, seed=5)
    model = make(kind, emb, seed=0).train()
    batch = split.collate(range(8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    acc, step = cloze_overfit_accuracy(model, batch, opt, 200)
    assert acc == 1.0, f"accuracy {acc:.2f} after {step} steps"


@pytest.mark.parametrize("kind", READERS)
def test_bad_settings_are_refused(kind):
    _, emb = split_and_emb(2, seed=6)
    with pytest.raises(ValueError, match="head"):
        make(kind, emb, head="span")
    no_entities = EmbeddingInfo(word_vectors=emb.word_vectors, n_trainable_words=4, n_chars=0)
    with pytest.raises(ValueError, match="entity"):
        make(kind, no_entities)


def test_train_and_evaluate_via_cli(tmp_path, tiny_glove, capsys):
    data, run = tmp_path / "syn", tmp_path / "run"
    assert main(["prepare", "cloze-synthetic", "--out", str(data), "--examples", "200", "50"]) == 0
    assert (
        main(
            [
                "train",
                "attentive_reader",
                "--preset",
                "cloze-cpu",
                "--cloze-data",
                str(data),
                "--embeddings",
                str(tiny_glove),
                "--out",
                str(run),
                "--max-steps",
                "5",
                "--no-progress",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 5
    assert main(["evaluate", str(run)]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["examples"] == 50 and 0.0 <= res["accuracy"] <= 100.0


@pytest.mark.parametrize("name", ["attentive_reader", "impatient_reader"])
@pytest.mark.parametrize("preset", ["paper", "cloze-cpu"])
def test_presets_build_cloze_models(name, preset):
    from rckit.models import MODELS
    from rckit.presets import model_configs

    mcfg, tcfg = model_configs(name, preset, [])
    cfg_cls, model_cls = MODELS[name]
    assert type(mcfg) is cfg_cls and mcfg.head == "cloze"
    if preset == "paper":  # the paper's training
        assert mcfg.hidden == 256 and tcfg.optimizer == "rmsprop" and tcfg.copy_steps == 0
    else:  # what the squad-cloze runs measured (RESULTS.md)
        assert mcfg.hidden == 128 and tcfg.optimizer == "adam" and tcfg.lr == 1e-3 and tcfg.copy_steps == 1000
    split, emb = split_and_emb(2, seed=7)
    out = model_cls(mcfg, emb)(split.collate([0, 1]))  # the preset's model reads a batch: a score per entity
    assert out.logits.shape == (2, N_ENT) and torch.isfinite(out.logits).all()


def test_copy_task_scores_the_head_with_all_attention_on_one_position(monkeypatch):
    """The Attentive Reader's copy logits are its answer logits when s is one-hot at copy_at."""
    import rckit.models.attentive_reader as ar
    from rckit.data.cloze.examples import copy_targets, with_copy_positions

    split, emb = split_and_emb(8, seed=3)
    model = make("attentive", emb).eval()
    batch = with_copy_positions(split.collate(range(8)), torch.Generator().manual_seed(0))
    target, valid = copy_targets(batch)
    assert valid.all() and (batch.c_words.gather(1, batch.copy_at[:, None]).squeeze(1) == target + ENTITY_OFFSET).all()
    with torch.no_grad():
        copy = model(batch).copy_logits
        one_hot = torch.nn.functional.one_hot(batch.copy_at, batch.c_words.shape[1]).float()
        monkeypatch.setattr(ar, "attention_weights", lambda m, w_ms, d_mask: one_hot)
        forced = model(replace(batch, copy_at=None))
    assert forced.copy_logits is None
    torch.testing.assert_close(copy, forced.logits)


@pytest.mark.parametrize("kind", READERS)
def test_copy_task_gradient_reaches_the_answer_path(kind):
    split, emb = split_and_emb(6, seed=4)
    model = make(kind, emb).train()
    from rckit.data.cloze.examples import copy_targets, with_copy_positions
    from rckit.models.losses import cloze_loss

    batch = with_copy_positions(split.collate(range(6)))
    out = model(batch)
    assert out.copy_logits.shape == out.logits.shape
    target, valid = copy_targets(batch)
    cloze_loss(out.copy_logits, target, valid).backward()
    assert model.W_rg.weight.grad.abs().sum() > 0 and model.answer.weight.grad.abs().sum() > 0
    assert model.w_ms.weight.grad is None or model.w_ms.weight.grad.abs().sum() == 0  # the attention is bypassed
