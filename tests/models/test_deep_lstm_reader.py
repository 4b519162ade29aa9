"""Tiny-config contract tests for the Deep LSTM Reader, both heads, and its sequence assembly."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from rckit.data.cloze.examples import ENTITY_OFFSET, ClozeBatch
from rckit.data.embeddings import EmbeddingInfo
from rckit.models.deep_lstm_reader import DeepLSTMReader, DeepLSTMReaderConfig, join_sequences
from rckit.models.losses import cloze_loss, span_loss
from tests.conftest import check_cloze_contract, cloze_overfit_accuracy
from tests.models.test_qanet import V, synthetic_batch

N_ENT = 6
CLOZE = DeepLSTMReaderConfig(head="cloze", hidden=16, depth=2, skip_dim=8, dropout=0.0)
SPAN = DeepLSTMReaderConfig(head="span", hidden=16, depth=2, skip_dim=8, dropout=0.0)


def make(config, seed=0):
    torch.manual_seed(seed)
    emb = EmbeddingInfo(word_vectors=torch.randn(V, 10), n_trainable_words=4, n_chars=0, n_entities=N_ENT)
    return DeepLSTMReader(config, emb)


def cloze_batch(n: int, seed: int) -> ClozeBatch:
    """Documents of random words with 2-4 entities; the query names the answer's neighbour word.

    The answer entity is the one right after the query's first word in the document, so the
    task is learnable from the text alone.
    """
    g = torch.Generator().manual_seed(seed)
    Td, Tq = 12, 3
    words = torch.arange(ENTITY_OFFSET + N_ENT, V)
    doc = torch.zeros(n, Td, dtype=torch.long)
    query = torch.zeros(n, Tq, dtype=torch.long)
    answer = torch.zeros(n, dtype=torch.long)
    cand = torch.zeros(n, N_ENT, dtype=torch.bool)
    for i in range(n):
        ld = int(torch.randint(7, Td + 1, (1,), generator=g))
        lq = int(torch.randint(1, Tq + 1, (1,), generator=g))
        doc[i, :ld] = words[torch.randperm(len(words), generator=g)[:ld]]
        ents = torch.randperm(N_ENT, generator=g)[: int(torch.randint(2, 5, (1,), generator=g))]
        slots = torch.randperm(ld - 1, generator=g)[: len(ents)] + 1
        doc[i, slots] = ENTITY_OFFSET + ents
        cand[i, ents] = True
        k = int(torch.randint(0, len(ents), (1,), generator=g))
        query[i, 0] = doc[i, slots[k] - 1]
        query[i, 1:lq] = words[torch.randint(0, len(words), (lq - 1,), generator=g)]
        answer[i] = ents[k]
    return ClozeBatch(
        c_words=doc,
        c_mask=doc != 0,
        q_words=query,
        q_mask=query != 0,
        candidates=cand,
        answer=answer,
        answer_cut=torch.zeros(n, dtype=torch.bool),
        index=torch.arange(n),
    )


def test_join_sequences_places_delimiter_per_row():
    a = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]]).unsqueeze(-1)  # lengths 2, 1
    b = torch.tensor([[4.0, 0.0], [5.0, 6.0]]).unsqueeze(-1)  # lengths 1, 2
    x, mask = join_sequences(a, torch.tensor([2, 1]), b, torch.tensor([1, 2]), torch.tensor([9.0]))
    assert x.squeeze(-1).tolist() == [[1, 2, 9, 4], [3, 9, 5, 6]]
    assert mask.all()
    x, mask = join_sequences(a, torch.tensor([1, 1]), b, torch.tensor([1, 1]), torch.tensor([9.0]))
    assert x.squeeze(-1).tolist() == [[1, 9, 4], [3, 9, 5]]


@pytest.mark.parametrize("form", ["qca", "cqa"])
def test_cloze_head_shapes_candidates_and_gradients(form):
    model = make(replace(CLOZE, form=form)).train()
    batch = cloze_batch(6, seed=1)
    check_cloze_contract(model, batch, N_ENT)


def test_cloze_loss_leaves_out_cut_answers():
    logits = torch.randn(3, 4, requires_grad=True)
    answer = torch.tensor([0, 1, 2])
    valid = torch.tensor([True, False, True])
    expected = F.cross_entropy(logits[[0, 2]], answer[[0, 2]])
    torch.testing.assert_close(cloze_loss(logits, answer, valid), expected)
    assert cloze_loss(logits, answer, torch.zeros(3, dtype=torch.bool)).item() == 0.0


def test_span_head_shapes_and_gradients():
    model = make(SPAN).train()
    batch = synthetic_batch(5, seed=2)
    out = model(batch)
    assert out.start_logits.shape == out.end_logits.shape == batch.c_words.shape
    fill = torch.finfo(out.start_logits.dtype).min
    assert (out.start_logits[~batch.c_mask] == fill).all() and (out.end_logits[~batch.c_mask] == fill).all()
    loss = span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "config",
    [CLOZE, replace(CLOZE, form="cqa"), SPAN, replace(SPAN, form="cqa")],
    ids=["cloze-qca", "cloze-cqa", "span-qca", "span-cqa"],
)
def test_padding_does_not_change_outputs(config):
    model = make(config).eval()
    if config.head == "cloze":
        batch = cloze_batch(4, seed=3)
        padded = replace(
            batch,
            c_words=F.pad(batch.c_words, (0, 5)),
            c_mask=F.pad(batch.c_mask, (0, 5)),
            q_words=F.pad(batch.q_words, (0, 3)),
            q_mask=F.pad(batch.q_mask, (0, 3)),
        )
        with torch.no_grad():
            a, b = model(batch).logits, model(padded).logits
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    else:
        batch = synthetic_batch(4, seed=3)
        padded = replace(
            batch,
            c_words=F.pad(batch.c_words, (0, 5)),
            c_mask=F.pad(batch.c_mask, (0, 5)),
            q_words=F.pad(batch.q_words, (0, 3)),
            q_mask=F.pad(batch.q_mask, (0, 3)),
        )
        with torch.no_grad():
            a, b = model(batch), model(padded)
        m, Tc = batch.c_mask, batch.c_words.shape[1]
        torch.testing.assert_close(b.start_logits[:, :Tc][m], a.start_logits[m], rtol=0, atol=1e-5)
        torch.testing.assert_close(b.end_logits[:, :Tc][m], a.end_logits[m], rtol=0, atol=1e-5)


def test_one_example_alone_equals_it_in_a_batch():
    model = make(CLOZE).eval()
    batch = cloze_batch(4, seed=6)
    with torch.no_grad():
        whole = model(batch).logits
        for i in range(4):
            ld, lq = int(batch.c_mask[i].sum()), int(batch.q_mask[i].sum())
            one = replace(
                batch,
                c_words=batch.c_words[i : i + 1, :ld],
                c_mask=batch.c_mask[i : i + 1, :ld],
                q_words=batch.q_words[i : i + 1, :lq],
                q_mask=batch.q_mask[i : i + 1, :lq],
                candidates=batch.candidates[i : i + 1],
                answer=batch.answer[i : i + 1],
            )
            torch.testing.assert_close(model(one).logits[0], whole[i], rtol=0, atol=1e-5)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="head"):
        make(replace(CLOZE, head="choice"))
    with pytest.raises(ValueError, match="form"):
        make(replace(CLOZE, form="qac"))
    with pytest.raises(ValueError, match="chrono must be 0"):
        make(replace(CLOZE, chrono=1.5))
    emb = EmbeddingInfo(word_vectors=torch.randn(V, 10), n_trainable_words=4, n_chars=0)
    with pytest.raises(ValueError, match="entity"):
        DeepLSTMReader(CLOZE, emb)


def test_chrono_setting_initialises_every_reader_layer_and_only_when_asked():
    plain, chrono = make(CLOZE), make(replace(CLOZE, chrono=300))
    H = CLOZE.hidden
    for a, b in zip(plain.layers, chrono.layers):
        assert torch.equal(a.bias_l0[:, H : 2 * H], torch.ones(1, H))  # forget bias 1 by default
        b_f = b.bias_l0[:, H : 2 * H]
        assert (b_f >= 0).all() and b_f.max() > 2.0 and torch.equal(b.bias_l0[:, :H], -b_f)
    out = chrono(cloze_batch(4, seed=1)).logits
    assert torch.isfinite(out[out > torch.finfo(out.dtype).min]).all()


def test_cloze_head_overfits_small_batch():
    model = make(CLOZE, seed=0).train()
    batch = cloze_batch(16, seed=7)
    opt = torch.optim.RMSprop(model.parameters(), lr=3e-3, alpha=0.95, momentum=0.9)
    acc, step = cloze_overfit_accuracy(model, batch, opt, 400)
    assert acc == 1.0, f"accuracy {acc:.2f} after {step} steps"


def test_span_head_overfits_small_batch():
    model = make(SPAN, seed=0).train()
    batch = synthetic_batch(16, seed=8)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for step in range(500):
        out = model(batch)
        em = ((out.start_logits.argmax(1) == batch.y_start) & (out.end_logits.argmax(1) == batch.y_end)).float().mean()
        if em == 1.0:
            break
        loss = span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert em == 1.0, f"EM {em:.2f} after {step} steps"
