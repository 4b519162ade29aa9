"""Tiny-config contract tests for DCN and DCN+ and their layers (coattention, maxout experts, rewards)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rckit import kernels
from rckit.answering.decoding import span_to_text
from rckit.data.batching import Batch
from rckit.data.embeddings import EmbeddingInfo
from rckit.data.split import SquadSplit
from rckit.evaluation.squad_metrics import f1_score
from rckit.layers.coattention import Coattention, append_sentinel
from rckit.layers.maxout import MixtureOfMaxouts
from rckit.models.dcn import DCN, DCNConfig, DCNPlus, DCNPlusConfig
from rckit.models.losses import self_critical_loss, uncertainty_weighted
from rckit.training.rewards import SpanF1Reward
from tests.models.test_qanet import N_CHARS, N_TRAINABLE, V, synthetic_batch, word_chars

TINY_DCN = DCNConfig(hidden=16, pool=4, iterations=3, dropout=0.0, use_chars=True, char_dim=8, char_conv_width=3)
TINY_PLUS = DCNPlusConfig(
    hidden=16,
    pool=4,
    iterations=3,
    dropout=0.0,
    use_chars=True,
    char_dim=8,
    char_conv_width=3,
    word_dropout=0.0,
    n_experts=4,
)


def pad_batch(batch: Batch, extra_c: int = 7, extra_q: int = 4, extra_w: int = 3) -> Batch:
    return Batch(
        c_words=F.pad(batch.c_words, (0, extra_c)),
        c_chars=F.pad(batch.c_chars, (0, extra_w, 0, extra_c)),
        c_mask=F.pad(batch.c_mask, (0, extra_c)),
        q_words=F.pad(batch.q_words, (0, extra_q)),
        q_chars=F.pad(batch.q_chars, (0, extra_w, 0, extra_q)),
        q_mask=F.pad(batch.q_mask, (0, extra_q)),
        y_start=batch.y_start,
        y_end=batch.y_end,
        index=batch.index,
    )


def make_model(config, seed: int = 0):
    torch.manual_seed(seed)
    emb = EmbeddingInfo(word_vectors=torch.randn(V, 12), n_trainable_words=N_TRAINABLE, n_chars=N_CHARS)
    cls = DCNPlus if isinstance(config, DCNPlusConfig) else DCN
    return cls(config, emb)


def overlap_reward(batch: Batch):
    """Token-position F1 of each span against the gold span: a stand-in for SpanF1Reward."""

    def reward(index, starts, ends):
        gs, ge = batch.y_start[index].unsqueeze(1), batch.y_end[index].unsqueeze(1)  # (B, 1)
        overlap = (torch.minimum(ends, ge) - torch.maximum(starts, gs) + 1).clamp(min=0).float()
        p = overlap / (ends - starts + 1).clamp(min=1).float()
        r = overlap / (ge - gs + 1).float()
        return torch.where(overlap > 0, 2 * p * r / (p + r).clamp(min=1e-9), torch.zeros_like(p)) * (ends >= starts)

    return reward


# --- models -------------------------------------------------------------------------------------


def test_output_shapes_and_masking():
    batch = synthetic_batch(5, seed=1)
    for config in (TINY_DCN, TINY_PLUS):
        out = make_model(config).eval()(batch)
        B, T = batch.c_words.shape
        assert out.start_logits.shape == out.end_logits.shape == (B, T)
        assert out.start_iters.shape == out.end_iters.shape == (config.iterations, B, T)
        assert out.starts.shape == out.active.shape == (config.iterations, B)
        fill = torch.finfo(out.start_logits.dtype).min
        assert (out.start_logits[~batch.c_mask] == fill).all() and (out.end_logits[~batch.c_mask] == fill).all()
        assert torch.isfinite(out.start_logits[batch.c_mask]).all()
        torch.testing.assert_close(out.start_logits, out.start_iters[-1], rtol=0, atol=0)
        assert out.sample is None  # no sampled rollout outside training


def check_grads(model, loss):
    assert torch.isfinite(loss) and loss.dtype == torch.float32 and loss.dim() == 0
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, name


def grad_batch() -> Batch:
    batch = synthetic_batch(8, seed=2)
    batch.c_words[:, 0] = 1  # make sure trainable word rows (<unk>) are used
    batch.c_chars[:, 0] = word_chars(batch.c_words[:, 0])
    batch.y_start[0] = batch.y_end[0] = -1  # an ignored example
    return batch


def test_dcn_finite_loss_and_gradients_reach_every_parameter():
    model, batch = make_model(TINY_DCN), grad_batch()
    out = model.train()(batch)
    check_grads(model, model.loss(out, batch))


def test_dcn_plus_mixed_objective_gradients_reach_every_parameter():
    model, batch = make_model(TINY_PLUS), grad_batch()
    out = model.train()(batch)
    assert out.sample is not None and out.balance is not None
    check_grads(model, model.loss(out, batch, reward_fn=overlap_reward(batch)))
    try:
        model.loss(model(batch), batch)
    except ValueError as e:
        assert "reward_fn" in str(e)
    else:
        raise AssertionError("the mixed objective must refuse to run without a reward")


def test_loss_ignores_unanswerable_examples():
    model, batch = make_model(TINY_PLUS), synthetic_batch(4, seed=3)
    batch.y_start[:] = batch.y_end[:] = -1
    out = model.train()(batch)
    loss = model.loss(out, batch, reward_fn=lambda i, s, e: torch.rand(s.shape))
    # Only the learned-weight terms (0 at init) and the MoE balance term are left.
    torch.testing.assert_close(loss, model.config.moe_balance * out.balance + model.log_sigma2().sum())


def test_padding_does_not_change_outputs():
    batch = synthetic_batch(4, seed=3)
    padded = pad_batch(batch)
    Tc, m = batch.c_words.shape[1], batch.c_mask
    for config in (TINY_DCN, TINY_PLUS):
        model = make_model(config).eval()
        with torch.no_grad():
            a, b = model(batch), model(padded)
        torch.testing.assert_close(b.start_iters[:, :, :Tc][:, m], a.start_iters[:, m], rtol=0, atol=1e-5)
        torch.testing.assert_close(b.end_iters[:, :, :Tc][:, m], a.end_iters[:, m], rtol=0, atol=1e-5)
        assert torch.equal(a.starts, b.starts) and torch.equal(a.active, b.active)


def test_decoder_stops_per_example_and_freezes_logits():
    batch = synthetic_batch(6, seed=4)
    model = make_model(replace(TINY_DCN, iterations=4)).eval()
    with torch.no_grad():
        out = model(batch)
    for i in range(1, 4):
        stopped = ~out.active[i]
        assert not (out.active[i] & ~out.active[i - 1]).any()  # once stopped, always stopped
        assert torch.equal(out.start_iters[i][stopped], out.start_iters[i - 1][stopped])
        assert torch.equal(out.end_iters[i][stopped], out.end_iters[i - 1][stopped])
        assert torch.equal(out.starts[i][stopped], out.starts[i - 1][stopped])
        # an example stops exactly when its span repeats
        same = (out.starts[i - 1] == (out.starts[i - 2] if i > 1 else 0)) & (
            out.ends[i - 1] == (out.ends[i - 2] if i > 1 else 0)
        )
        assert torch.equal(stopped, same | ~out.active[i - 1])
    # With W_D = 0 the HMNs ignore h_i and the previous span: the span of iteration 1 repeats at
    # iteration 2, so every example stops there and iterations 3 and 4 are copies.
    with torch.no_grad():
        model.decoder.start_hmn.W_D.weight.zero_()
        model.decoder.end_hmn.W_D.weight.zero_()
        out = model(batch)
    assert not out.active[2:].any()
    assert torch.equal(out.active[1], (out.starts[0] != 0) | (out.ends[0] != 0))
    for i in (1, 2, 3):
        torch.testing.assert_close(out.start_iters[i], out.start_iters[0], rtol=0, atol=1e-6)
    # The cross-entropy counts each example's active iterations once.
    ce = sum(
        torch.where(
            out.active[i],
            F.cross_entropy(out.start_iters[i], batch.y_start, reduction="none")
            + F.cross_entropy(out.end_iters[i], batch.y_end, reduction="none"),
            0.0,
        )
        for i in range(4)
    ).mean()
    torch.testing.assert_close(model.loss(out, batch), ce)


def test_both_models_overfit_a_small_batch():
    max_steps = 400
    batch = synthetic_batch(16, seed=5)
    for config in (TINY_DCN, TINY_PLUS):
        model = make_model(config, seed=0)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        reward = overlap_reward(batch)
        model.train()
        for step in range(max_steps):
            out = model(batch)
            em = (
                ((out.start_logits.argmax(1) == batch.y_start) & (out.end_logits.argmax(1) == batch.y_end))
                .float()
                .mean()
            )
            if em.item() == 1.0:
                break
            loss = model.loss(out, batch, reward_fn=reward)
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert em.item() == 1.0, f"{type(model).__name__}: EM {em.item():.2f} after {max_steps} steps"


def test_policy_gradient_step_raises_a_better_sample():
    """One decoder iteration, so p(sampled span) can be read off an ordinary forward.

    Plain maxout (no experts): the experts' gate noise would make training and eval forwards differ.
    """
    model = make_model(replace(TINY_PLUS, iterations=1, n_experts=0), seed=1)
    batch = synthetic_batch(1, seed=6)
    torch.manual_seed(0)
    for _ in range(20):  # draw until the sampled span differs from the greedy one
        out = model.train()(batch)
        sampled = (int(out.sample.start), int(out.sample.end))
        if sampled != (int(out.starts[-1]), int(out.ends[-1])):
            break
    assert sampled != (int(out.starts[-1]), int(out.ends[-1]))

    def reward(index, starts, ends):  # F1 1 for the sampled span, 0 for anything else
        return ((starts == sampled[0]) & (ends == sampled[1])).float()

    def log_p() -> float:
        with torch.no_grad():
            o = model.eval()(batch)
        return float(o.start_logits.log_softmax(-1)[0, sampled[0]] + o.end_logits.log_softmax(-1)[0, sampled[1]])

    before = log_p()
    torch.testing.assert_close(out.sample.log_prob, torch.tensor([before]), rtol=0, atol=1e-5)
    loss = self_critical_loss(out, batch, reward)
    torch.testing.assert_close(loss, torch.tensor(0.0))  # value: 1 - F1(sample) = 0; gradient: R = 1 - 0
    model.zero_grad()
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert log_p() > before


def test_mixed_objective_weights_settle_at_one_over_each_loss():
    """For fixed term values the learned weights 1/(2 sigma^2) go where d/ds [L e^-s / 2 + s] = 0: 1 / L."""
    model = make_model(TINY_PLUS)
    ce, rl = torch.tensor(3.0), torch.tensor(0.4)
    opt = torch.optim.Adam([model.log_sigma2_raw], lr=0.05)
    for _ in range(1500):
        loss, w = uncertainty_weighted(ce, rl, model.log_sigma2())
        opt.zero_grad()
        loss.backward()
        opt.step()
    _, w = uncertainty_weighted(ce, rl, model.log_sigma2())
    torch.testing.assert_close(w.detach(), torch.tensor([1 / 3.0, 1 / 0.4]), rtol=1e-3, atol=0)
    torch.testing.assert_close(model.log_sigma2().detach(), torch.log(torch.tensor([1.5, 0.2])), rtol=0, atol=1e-3)


def test_self_critical_value_is_the_samples_f1_shortfall_and_sigma_never_sees_the_surrogate():
    model, batch = make_model(TINY_PLUS), grad_batch()
    torch.manual_seed(3)
    out = model.train()(batch)
    valid = batch.y_start >= 0
    sample_f1 = torch.rand(len(batch))

    def reward(greedy_f1):
        def fn(index, starts, ends):  # column 0: the sample, column 1: the greedy span
            return torch.stack([sample_f1[index], greedy_f1[index]], dim=1)

        return fn

    worse, better = torch.zeros(len(batch)), torch.ones(len(batch))  # greedy below / above every sample
    a = self_critical_loss(out, batch, reward(worse))
    b = self_critical_loss(out, batch, reward(better))
    shortfall = (1 - sample_f1)[valid].mean()
    torch.testing.assert_close(a, shortfall)
    torch.testing.assert_close(b, shortfall)  # the value does not depend on the baseline ...
    # ... and its gradient is the self-critical surrogate's: -mean R * grad log p(sample).
    R = sample_f1 - worse
    S = torch.where(valid, -R * out.sample.log_prob, torch.zeros_like(R)).sum() / valid.sum()
    g_value = torch.autograd.grad(a, out.sample.log_prob, retain_graph=True)[0]
    g_surrogate = torch.autograd.grad(S, out.sample.log_prob, retain_graph=True)[0]
    torch.testing.assert_close(g_value, g_surrogate)
    # sigma_rl's gradient is d/ds [V e^-s / 2 + s]: the same for both baselines.
    grads = []
    for rl in (a, b):
        loss, _ = uncertainty_weighted(torch.tensor(2.0), rl, model.log_sigma2())
        grads.append(torch.autograd.grad(loss, model.log_sigma2_raw, retain_graph=True)[0])
    torch.testing.assert_close(grads[0], grads[1])


def test_dcn_plus_leaves_its_loss_terms_and_weights_for_the_log():
    model, batch = make_model(TINY_PLUS), grad_batch()
    out = model.train()(batch)
    loss = model.loss(out, batch, reward_fn=overlap_reward(batch))
    t = model.loss_terms
    assert set(t) == {"ce", "rl", "w_ce", "w_rl"}
    assert 0 <= float(t["rl"]) <= 1 and float(t["ce"]) > 0
    w = torch.exp(-model.log_sigma2().detach()) / 2
    torch.testing.assert_close(torch.stack([t["w_ce"], t["w_rl"]]), w)
    expected = t["ce"] * w[0] + t["rl"] * w[1] + model.log_sigma2().sum() + model.config.moe_balance * out.balance
    torch.testing.assert_close(loss.detach(), expected.detach())


# --- layers -------------------------------------------------------------------------------------


def test_append_sentinel_goes_at_each_real_end():
    x = torch.randn(3, 4, 2)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    sentinel = torch.tensor([7.0, -7.0])
    y, m = append_sentinel(x, mask, sentinel)
    assert y.shape == (3, 5, 2)
    assert torch.equal(m.sum(1), mask.sum(1) + 1)
    for b, n in enumerate(mask.sum(1).tolist()):
        assert torch.equal(y[b, :n], x[b, :n]) and torch.equal(y[b, n], sentinel)
        assert (y[b, n + 1 :] == 0).all()


def test_coattention_matches_the_paper_per_example_under_padding():
    torch.manual_seed(0)
    h = 5
    co = Coattention(h, project_question=True)
    D, Q = torch.randn(3, 6, h), torch.randn(3, 4, h)
    d_mask = torch.arange(6) < torch.tensor([[6], [3], [4]])
    q_mask = torch.arange(4) < torch.tensor([[2], [4], [1]])
    out = co(D, Q, d_mask, q_mask)
    assert out.S_D.shape == out.C_D.shape == (3, 6, h) and out.S_Q.shape == (3, 4, h)
    for b in range(3):
        m, n = int(d_mask[b].sum()), int(q_mask[b].sum())
        # Paper notation, columns are positions: D (h, m+1), Q (h, n+1).
        Dp = torch.cat([D[b, :m], co.d_sentinel[None]]).T
        Qp = torch.tanh(co.q_proj(torch.cat([Q[b, :n], co.q_sentinel[None]]))).T
        L = Dp.T @ Qp  # (m+1, n+1)
        A_Q = torch.softmax(L, dim=0)  # across the document for each question word
        A_D = torch.softmax(L.T, dim=0)  # across the question for each document word
        C_Q = Dp @ A_Q  # (h, n+1)
        C_D = torch.cat([Qp, C_Q]) @ A_D  # (2h, m+1)
        torch.testing.assert_close(out.S_D[b, :m], C_D[:h, :m].T)
        torch.testing.assert_close(out.C_D[b, :m], C_D[h:, :m].T)
        torch.testing.assert_close(out.S_Q[b, :n], C_Q[:, :n].T)
        assert (out.S_D[b, m:] == 0).all() and (out.C_D[b, m:] == 0).all() and (out.S_Q[b, n:] == 0).all()
    # Garbage at padded positions and extra padding change nothing.
    D2 = F.pad(torch.where(d_mask.unsqueeze(-1), D, 9.0), (0, 0, 0, 3), value=5.0)
    Q2 = F.pad(torch.where(q_mask.unsqueeze(-1), Q, -9.0), (0, 0, 0, 2), value=5.0)
    out2 = co(D2, Q2, F.pad(d_mask, (0, 3)), F.pad(q_mask, (0, 2)))
    torch.testing.assert_close(out2.S_D[:, :6], out.S_D)
    torch.testing.assert_close(out2.C_D[:, :6], out.C_D)
    torch.testing.assert_close(out2.S_Q[:, :4], out.S_Q)


def test_mixture_of_maxouts_routes_each_row_to_exactly_two_experts():
    torch.manual_seed(0)
    moe = MixtureOfMaxouts(6, 3, pool=2, n_experts=5).eval()  # eval: no gate noise, route() is repeatable
    x = torch.randn(40, 6)
    chosen, weight = moe.route(x)
    assert chosen.shape == weight.shape == (40, 2)
    assert (chosen[:, 0] != chosen[:, 1]).all()
    assert (weight > 0).all()
    torch.testing.assert_close(weight.sum(1), torch.ones(40))
    y, balance = moe(x)
    expected = torch.stack(
        [sum(weight[r, k] * moe.experts[int(chosen[r, k])](x[r]) for k in range(2)) for r in range(40)]
    )
    torch.testing.assert_close(y, expected)
    assert balance.dim() == 0 and balance >= 0
    # A single row: only its two experts get a gradient.
    moe.zero_grad()
    moe(x[:1])[0].sum().backward()
    used = {int(e) for e in chosen[0]}
    for e, expert in enumerate(moe.experts):
        assert (expert.linear.weight.grad.abs().sum() > 0) == (e in used), e
    # Training adds gate noise: the routes change from draw to draw, still two distinct experts a row.
    moe.train()
    routes = [moe.route(x)[0] for _ in range(3)]
    assert all((r[:, 0] != r[:, 1]).all() for r in routes) and not torch.equal(routes[0], routes[1])


# --- rewards ------------------------------------------------------------------------------------


def tiny_split() -> SquadSplit:
    """Two contexts, three questions; the third has no gold span (y = -1)."""
    contexts = ["The cat sat on the mat .", "Denver  Broncos won Super Bowl 50 ."]
    questions = [(0, 4, 5), (1, 0, 1), (1, -1, -1)]  # (context, y_start, y_end)
    forms, offsets, ctx_forms, ctx_ptr = {}, [], [], [0]
    for c in contexts:
        for m in re.finditer(r"\S+", c):
            ctx_forms.append(forms.setdefault(m.group(), len(forms) + 1))
            offsets.append(m.span())
        ctx_ptr.append(len(ctx_forms))
    n_forms = len(forms) + 1
    arrays = {
        "form_words": np.arange(n_forms),
        "form_chars": np.ones((n_forms, 3), np.int64),
        "ctx_ptr": np.array(ctx_ptr),
        "ctx_forms": np.array(ctx_forms),
        "ctx_offsets": np.array(offsets),
        "q_ptr": np.arange(len(questions) + 1),
        "q_forms": np.ones(len(questions), np.int64),
        "q_offsets": np.zeros((len(questions), 2), np.int32),
        "q_ctx": np.array([q[0] for q in questions]),
        "y_start": np.array([q[1] for q in questions]),
        "y_end": np.array([q[2] for q in questions]),
        "answerable": np.array([q[1] >= 0 for q in questions]),
    }
    return SquadSplit.from_arrays(arrays, ["q0", "q1", "q2"], contexts)


def test_span_f1_reward_is_the_official_f1_of_the_span_text():
    split = tiny_split()
    reward = SpanF1Reward(split)
    assert reward.gold(0) == ["the mat"] and reward.gold(1) == ["Denver  Broncos"] and reward.gold(2) == []
    index = torch.tensor([0, 1, 2])
    starts = torch.tensor([[4, 3, 5, 2], [0, 1, 0, 3], [0, 1, 2, 3]])
    ends = torch.tensor([[5, 5, 5, 1], [1, 4, 0, 6], [0, 1, 2, 3]])
    got = reward(index, starts, ends)
    # By hand: "on the mat" vs "the mat" -> tokens [on, mat] vs [mat]: p = 1/2, r = 1, F1 = 2/3;
    # "mat" -> 1; a reversed span is the empty answer -> 0. "Broncos won Super Bowl" vs
    # "Denver Broncos" -> p = 1/4, r = 1/2, F1 = 1/3; "Denver" -> p = 1, r = 1/2, F1 = 2/3.
    # No gold span -> 0.
    expected = torch.tensor([[1.0, 2 / 3, 1.0, 0.0], [1.0, 1 / 3, 2 / 3, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(got, expected)
    for b, i in enumerate(index.tolist()):
        context, offsets = split.context_of(i)
        for k in range(4):
            s, e = int(starts[b, k]), int(ends[b, k])
            if i < 2 and s <= e:
                gold = span_to_text(context, offsets, int(split.a["y_start"][i]), int(split.a["y_end"][i]))
                assert abs(float(got[b, k]) - f1_score(span_to_text(context, offsets, s, e), gold)) < 1e-6
    # Gold texts given explicitly (e.g. every dev answer) take precedence.
    multi = SpanF1Reward(split, gold_texts=[["cat"], ["Super Bowl 50", "Denver Broncos"], []])
    torch.testing.assert_close(
        multi(torch.tensor([0, 1]), torch.tensor([[1], [3]]), torch.tensor([[1], [5]])), torch.tensor([[1.0], [1.0]])
    )


def test_eval_encodes_a_document_shared_by_several_questions_once():
    batch = synthetic_batch(5, seed=4)
    for name in ("c_words", "c_chars", "c_mask"):  # questions 0, 2 and 4 ask about one paragraph
        t = getattr(batch, name)
        t[2] = t[0]
        t[4] = t[0]
    for config in (TINY_DCN, TINY_PLUS):
        model = make_model(config).eval()
        encoder = model.encoder if isinstance(model, DCN) else model.enc1
        seen = []
        encoder.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[0]))
        with torch.no_grad(), kernels.use("all"):  # the sharing is the `dedupe` fast path
            out = model(batch)
            assert seen == [3, 5]  # the documents: 3 distinct of 5, then the 5 questions
            for i in range(5):  # each question alone: nothing to share
                alone = model(
                    Batch(**{k: v[i : i + 1] if isinstance(v, torch.Tensor) else v for k, v in vars(batch).items()})
                )
                torch.testing.assert_close(alone.start_logits[0], out.start_logits[i], rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(alone.end_logits[0], out.end_logits[i], rtol=1e-5, atol=1e-5)
        model.train()  # training: every document on its own
        seen.clear()
        model(batch)
        assert seen[0] == 5


def test_pointer_credit_scores_each_draw_beside_the_other_pointers_greedy_choice():
    """By hand: R_s = F1(s^, e) - F1(s, e) on the start's log-probs, R_e = F1(s, e^) - F1(s, e) on the end's."""
    model, batch = make_model(replace(TINY_PLUS, reward_credit="pointer")), grad_batch()
    torch.manual_seed(3)
    out = model.train()(batch)
    valid = batch.y_start >= 0
    B = len(batch)
    f_greedy, f_start, f_end = torch.rand(B), torch.rand(B), torch.rand(B)
    seen = {}

    def reward(index, starts, ends):
        seen["starts"], seen["ends"] = starts, ends
        return torch.stack([f_greedy[index], f_start[index], f_end[index]], dim=1)

    loss = self_critical_loss(out, batch, reward, "pointer")
    s_hat, e_hat, s, e = out.sample.start, out.sample.end, out.starts[-1], out.ends[-1]
    assert torch.equal(seen["starts"], torch.stack([s, s_hat, s], 1)) and torch.equal(
        seen["ends"], torch.stack([e, e, e_hat], 1)
    )
    n = valid.sum()
    torch.testing.assert_close(loss, ((1 - f_start) + (1 - f_end))[valid].sum() / n)
    g_s, g_e = torch.autograd.grad(loss, [out.sample.start_log_prob, out.sample.end_log_prob])
    torch.testing.assert_close(g_s, torch.where(valid, -(f_start - f_greedy) / n, 0.0))
    torch.testing.assert_close(g_e, torch.where(valid, -(f_end - f_greedy) / n, 0.0))
    torch.testing.assert_close(out.sample.start_log_prob + out.sample.end_log_prob, out.sample.log_prob)
    with pytest.raises(ValueError, match="reward_credit"):
        make_model(replace(TINY_PLUS, reward_credit="span"))
