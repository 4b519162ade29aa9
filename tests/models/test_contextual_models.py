"""Span models reading contextual states beside their word vectors (``contextual``): the contract holds,
the states reach the answer, padding changes nothing, the answering pass equals the forward pass."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rckit.contextual.spec import ContextualSpec
from rckit.data.batching import Batch
from rckit.models import MODELS
from tests.conftest import TINY
from tests.models.test_contract import emb_info, span_batch

K, D = 2, 8
CONTEXTUAL = ContextualSpec("tiny", (1, 2), "0" * 16, 64, D)
SPAN_MODELS = sorted(name for name, task in TINY if task == "span")


def contextual_batch(seed: int = 2) -> Batch:
    b = span_batch()
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(*b.c_mask.shape, K, D, generator=g) * b.c_mask[..., None, None]
    q = torch.randn(*b.q_mask.shape, K, D, generator=g) * b.q_mask[..., None, None]
    return replace(b, c_states=c, q_states=q)


def build(name: str):
    cfg_cls, model_cls = MODELS[name]
    config = cfg_cls(**{**TINY[(name, "span")], "contextual": "tiny", "contextual_layers": (1, 2)})
    torch.manual_seed(0)
    return model_cls(config, replace(emb_info(), contextual=CONTEXTUAL))


@pytest.mark.parametrize("name", SPAN_MODELS)
def test_a_contextual_model_reads_the_states_and_learns_their_mix(name):
    model = build(name).train()
    assert model.contextual_of(model.config) == ContextualSpec("tiny", (1, 2))
    batch = contextual_batch()
    out = model(batch)
    assert out.start_logits.shape == batch.c_mask.shape
    model.loss(
        out, batch, reward_fn=(lambda r, s, e: torch.full(s.shape, 0.5)) if model.uses_reward else None
    ).backward()
    mix = [p for n, p in model.named_parameters() if ".mix." in n or n.startswith("mix.")]
    assert len(mix) == 2 and all(p.grad is not None and p.grad.abs().sum() > 0 for p in mix)
    model.eval()
    with torch.no_grad():
        a = model(batch)
        b = model(replace(batch, c_states=batch.c_states * 2))
    assert not torch.allclose(a.start_logits[batch.c_mask], b.start_logits[batch.c_mask]), "the states reach the answer"


@pytest.mark.parametrize("name", SPAN_MODELS)
def test_padding_does_not_change_a_contextual_model(name):
    model = build(name).eval()
    batch = contextual_batch()

    def pad(x, n):
        return torch.cat([x, torch.zeros(x.shape[0], n, *x.shape[2:], dtype=x.dtype)], 1)

    wider = replace(
        batch,
        c_words=pad(batch.c_words, 3),
        c_chars=pad(batch.c_chars, 3),
        c_mask=pad(batch.c_mask, 3),
        c_states=pad(batch.c_states, 3),
        q_words=pad(batch.q_words, 2),
        q_chars=pad(batch.q_chars, 2),
        q_mask=pad(batch.q_mask, 2),
        q_states=pad(batch.q_states, 2),
    )
    with torch.no_grad():
        a, b = model(batch), model(wider)
    m = batch.c_mask
    torch.testing.assert_close(a.start_logits[m], b.start_logits[:, : m.shape[1]][m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.end_logits[m], b.end_logits[:, : m.shape[1]][m], atol=1e-5, rtol=1e-5)


def test_qanets_answering_pass_equals_its_forward_with_states():
    model = build("qanet").eval()
    batch = contextual_batch()
    # Every (question, window) row its own window; tokens listed once each.
    B, Tc = batch.c_words.shape
    Tq = batch.q_words.shape[1]
    words = torch.cat([torch.zeros(1, dtype=torch.long), batch.c_words.flatten(), batch.q_words.flatten()])
    chars = torch.cat(
        [
            torch.zeros(1, batch.c_chars.shape[-1], dtype=torch.long),
            batch.c_chars.flatten(0, 1),
            batch.q_chars.flatten(0, 1),
        ]
    )
    c_tokens = torch.where(batch.c_mask, 1 + torch.arange(B * Tc).view(B, Tc), 0)
    q_tokens = torch.where(batch.q_mask, 1 + B * Tc + torch.arange(B * Tq).view(B, Tq), 0)
    with torch.no_grad():
        want = model(batch)
        got = model.answer_pass(
            words,
            chars,
            c_tokens,
            batch.c_mask,
            q_tokens,
            batch.q_mask,
            torch.arange(B),
            batch.c_states,
            batch.q_states,
        )
    torch.testing.assert_close(got.start_logits, want.start_logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", SPAN_MODELS)
def test_a_contextual_model_without_states_or_data_without_them_is_refused(name):
    with pytest.raises(ValueError, match="none were given"):
        build(name).eval()(span_batch())
    cfg_cls, model_cls = MODELS[name]
    with pytest.raises(ValueError, match="carries none"):
        model_cls(cfg_cls(**{**TINY[(name, "span")], "contextual": "tiny", "contextual_layers": (1, 2)}), emb_info())
    with pytest.raises(ValueError, match="contextual is 'none'"):
        model_cls(cfg_cls(**TINY[(name, "span")]), replace(emb_info(), contextual=CONTEXTUAL))
