"""Tiny-config contract tests for QANet."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F

from rckit.data.batching import Batch
from rckit.data.embeddings import EmbeddingInfo
from rckit.models.losses import span_loss
from rckit.models.qanet import QANet, QANetConfig

V, N_TRAINABLE, N_CHARS, W = 60, 6, 20, 4
TINY = QANetConfig(
    d_model=32,
    n_heads=2,
    char_dim=8,
    char_conv_width=3,
    emb_enc_convs=2,
    emb_enc_kernel=5,
    model_enc_blocks=1,
    model_enc_kernel=3,
)


def word_chars(ids: torch.Tensor) -> torch.Tensor:
    """A fixed spelling per word id, (..., W); 1-3 real chars, id 0 (<pad>) has none."""
    chars = torch.stack([ids % 7 + 2, ids % 11 + 2, ids % 13 + 2, torch.zeros_like(ids)], dim=-1)  # (..., W)
    chars[..., 2] = torch.where(ids % 2 == 0, chars[..., 2], 0)
    return torch.where((ids > 0).unsqueeze(-1), chars, 0)


def synthetic_batch(n: int, seed: int) -> Batch:
    """Contexts of distinct random words; the question is the answer span's words, in order.

    Lengths vary within the batch, so padding and masks are exercised.
    """
    g = torch.Generator().manual_seed(seed)
    Tc, Tq = 14, 3
    c_words = torch.zeros(n, Tc, dtype=torch.long)
    q_words = torch.zeros(n, Tq, dtype=torch.long)
    y_start = torch.zeros(n, dtype=torch.long)
    y_end = torch.zeros(n, dtype=torch.long)
    for i in range(n):
        lc = int(torch.randint(8, Tc + 1, (1,), generator=g))
        lq = int(torch.randint(1, Tq + 1, (1,), generator=g))
        c_words[i, :lc] = torch.randperm(V - 1, generator=g)[:lc] + 1  # ids 1..V-1, no repeats
        s = int(torch.randint(0, lc - lq + 1, (1,), generator=g))
        q_words[i, :lq] = c_words[i, s : s + lq]
        y_start[i], y_end[i] = s, s + lq - 1
    return Batch(
        c_words=c_words,
        c_chars=word_chars(c_words),
        c_mask=c_words != 0,
        q_words=q_words,
        q_chars=word_chars(q_words),
        q_mask=q_words != 0,
        y_start=y_start,
        y_end=y_end,
        index=torch.arange(n),
    )


def make_model(config: QANetConfig = TINY, seed: int = 0) -> tuple[QANet, EmbeddingInfo]:
    torch.manual_seed(seed)
    emb = EmbeddingInfo(word_vectors=torch.randn(V, 12), n_trainable_words=N_TRAINABLE, n_chars=N_CHARS)
    return QANet(config, emb), emb


def test_output_shapes_and_masking():
    model, _ = make_model()
    batch = synthetic_batch(5, seed=1)
    out = model.eval()(batch)
    assert out.start_logits.shape == out.end_logits.shape == batch.c_words.shape
    fill = torch.finfo(out.start_logits.dtype).min
    assert (out.start_logits[~batch.c_mask] == fill).all() and (out.end_logits[~batch.c_mask] == fill).all()
    assert torch.isfinite(out.start_logits[batch.c_mask]).all()


def test_finite_loss_and_gradients_reach_every_parameter():
    model, emb = make_model(replace(TINY, layer_survival=1.0))
    batch = synthetic_batch(8, seed=2)
    batch.c_words[:, 0] = 1  # make sure trainable word rows (<unk>) are used
    batch.c_chars[:, 0] = word_chars(batch.c_words[:, 0])
    batch.y_start[0] = batch.y_end[0] = -1  # an ignored example
    model.train()
    out = model(batch)
    loss = span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, name
    # The pretrained rows are a buffer: not a parameter, unchanged by an optimiser step.
    assert "embed.word.frozen" not in dict(model.named_parameters())
    before = model.embed.word.trainable.detach().clone()
    torch.optim.Adam(model.parameters(), lr=1e-2).step()
    torch.testing.assert_close(model.embed.word.frozen, emb.word_vectors[N_TRAINABLE:], rtol=0, atol=0)
    assert not torch.equal(model.embed.word.trainable, before)


def test_span_loss_ignores_unanswerable_and_keeps_grad():
    logits = torch.randn(3, 5, requires_grad=True)
    y = torch.tensor([-1, -1, -1])
    loss = span_loss(logits, logits, y, y)
    assert loss.item() == 0.0 and loss.requires_grad
    y_s, y_e = torch.tensor([1, -1, 4]), torch.tensor([2, -1, 4])
    expected = F.cross_entropy(logits[[0, 2]], y_s[[0, 2]]) + F.cross_entropy(logits[[0, 2]], y_e[[0, 2]])
    torch.testing.assert_close(span_loss(logits, logits, y_s, y_e), expected)


def test_padding_does_not_change_real_positions():
    model, _ = make_model()
    model.eval()
    batch = synthetic_batch(4, seed=3)
    extra_c, extra_q, extra_w = 7, 4, 3
    padded = Batch(
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
    with torch.no_grad():
        a, b = model(batch), model(padded)
    Tc = batch.c_words.shape[1]
    m = batch.c_mask
    torch.testing.assert_close(b.start_logits[:, :Tc][m], a.start_logits[m], rtol=0, atol=1e-5)
    torch.testing.assert_close(b.end_logits[:, :Tc][m], a.end_logits[m], rtol=0, atol=1e-5)


def test_a_question_alone_equals_its_row_in_a_padded_batch():
    # Alone, nothing is padded and the encoders take the no-mask path; in the batch they mask.
    model, _ = make_model()
    model.eval()
    batch = synthetic_batch(4, seed=5)
    assert not bool(batch.c_mask.all()) and not bool(batch.q_mask.all())
    with torch.no_grad():
        together = model(batch)
        for i in range(4):
            lc, lq = int(batch.c_mask[i].sum()), int(batch.q_mask[i].sum())
            alone = model(
                Batch(
                    c_words=batch.c_words[i : i + 1, :lc],
                    c_chars=batch.c_chars[i : i + 1, :lc],
                    c_mask=batch.c_mask[i : i + 1, :lc],
                    q_words=batch.q_words[i : i + 1, :lq],
                    q_chars=batch.q_chars[i : i + 1, :lq],
                    q_mask=batch.q_mask[i : i + 1, :lq],
                    y_start=batch.y_start[i : i + 1],
                    y_end=batch.y_end[i : i + 1],
                    index=batch.index[i : i + 1],
                )
            )
            torch.testing.assert_close(alone.start_logits[0], together.start_logits[i, :lc], rtol=0, atol=1e-5)
            torch.testing.assert_close(alone.end_logits[0], together.end_logits[i, :lc], rtol=0, atol=1e-5)


def test_bf16_autocast_forward_is_finite():
    model, _ = make_model()
    batch = synthetic_batch(4, seed=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(batch)
        loss = span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)
    assert torch.isfinite(out.start_logits).all() and torch.isfinite(out.end_logits).all()
    assert torch.isfinite(loss)
    loss.backward()


def test_overfits_small_batch():
    max_steps = 300  # it takes about 25 Adam steps
    config = replace(TINY, dropout=0.0, char_dropout=0.0, layer_survival=1.0)
    model, _ = make_model(config, seed=0)
    batch = synthetic_batch(32, seed=5)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for step in range(max_steps):
        out = model(batch)
        em = ((out.start_logits.argmax(1) == batch.y_start) & (out.end_logits.argmax(1) == batch.y_end)).float().mean()
        if em.item() == 1.0:
            break
        loss = span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert em.item() == 1.0, f"exact match {em.item():.2f} after {max_steps} steps, loss {loss.item():.3f}"


def train_step_grads(model: QANet, batch: Batch, seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    out = model.train()(batch)
    loss = span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)
    loss.backward()
    return loss.detach(), {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def test_per_batch_layer_dropout_gradients_reach_every_parameter_when_nothing_is_dropped():
    model, _ = make_model(replace(TINY, layer_dropout="batch", layer_survival=1.0))
    batch = synthetic_batch(8, seed=2)
    batch.c_words[:, 0] = 1  # make sure trainable word rows (<unk>) are used
    batch.c_chars[:, 0] = word_chars(batch.c_words[:, 0])
    _, grads = train_step_grads(model, batch, seed=0)
    for name, g in grads.items():
        assert g is not None and g.abs().sum() > 0, name


def test_per_batch_layer_dropout_skips_whole_sublayers():
    model, _ = make_model(replace(TINY, layer_dropout="batch", layer_survival=0.1, dropout=0.0, char_dropout=0.0))
    batch = synthetic_batch(8, seed=2)
    skipped_any = False
    for seed in range(6):
        _, grads = train_step_grads(model, batch, seed)
        unused = {n for n, g in grads.items() if g is None}
        skipped_any |= bool(unused)
        # A skipped sublayer loses all its parameters at once, and only encoder sublayers skip.
        assert all(n.startswith(("emb_enc.", "model_enc.")) for n in unused)
    assert skipped_any
    # Eval: nothing is skipped and per-batch equals per-example (no randomness at all).
    per_example, _ = make_model(replace(TINY, layer_dropout="example", layer_survival=0.1))
    per_example.load_state_dict(model.state_dict(), strict=False)
    with torch.no_grad():
        a, b = model.eval()(batch), per_example.eval()(batch)
    torch.testing.assert_close(a.start_logits, b.start_logits, rtol=0, atol=0)


def test_per_batch_layer_dropout_draws_agree_across_ranks_and_resume():
    """Two 'ranks' built from the same seed skip the same sublayers whatever else used the RNG."""
    config = replace(TINY, layer_dropout="batch", layer_survival=0.5)
    rank0, _ = make_model(config, seed=7)
    rank1, _ = make_model(config, seed=7)
    for step in range(3):
        torch.manual_seed(100 + step)  # different dropout draws on each rank ...
        torch.rand(17 * (step + 1))  # ... and different amounts of global RNG used up
        _, g0 = train_step_grads(rank0, synthetic_batch(4, seed=step), seed=step)
        _, g1 = train_step_grads(rank1, synthetic_batch(6, seed=50 + step), seed=99 - step)
        assert {n for n, g in g0.items() if g is None} == {n for n, g in g1.items() if g is None}
    # The draw counter travels with the state dict, so a resumed run continues the sequence.
    resumed, _ = make_model(config, seed=123)
    resumed.load_state_dict(rank0.state_dict())
    assert resumed.layer_drops.draw(5) == rank0.layer_drops.draw(5)
    # The default (per-example) model has no extra state: old checkpoints still load.
    assert not any("layer_drops" in k for k in make_model()[0].state_dict())


def test_layer_dropout_must_be_known():
    try:
        make_model(replace(TINY, layer_dropout="sometimes"))
    except ValueError as e:
        assert "layer_dropout" in str(e)
    else:
        raise AssertionError("expected a ValueError")


def test_checkpoint_blocks_gives_the_same_loss_and_gradients():
    batch = synthetic_batch(8, seed=3)
    plain, _ = make_model(replace(TINY, model_enc_blocks=2))
    ckpt, _ = make_model(replace(TINY, model_enc_blocks=2, checkpoint_blocks=True))
    ckpt.load_state_dict(plain.state_dict())
    loss_a, grads_a = train_step_grads(plain, batch, seed=5)
    loss_b, grads_b = train_step_grads(ckpt, batch, seed=5)  # same dropout masks: RNG is replayed
    torch.testing.assert_close(loss_b, loss_a)
    for n, g in grads_a.items():
        torch.testing.assert_close(grads_b[n], g, msg=n)


def test_positional_encoding_cache_matches_the_formula():
    from rckit.models.qanet import positional_encoding

    d = 6
    for T in (1, 5, 600):
        t = torch.arange(T, dtype=torch.float32).unsqueeze(1)  # (T, 1)
        angles = t / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)  # (T, d/2)
        expected = torch.cat([angles.sin(), angles.cos()], dim=1)  # (T, d)
        torch.testing.assert_close(positional_encoding(T, d, torch.device("cpu"), torch.float32), expected)
    # First asked for under inference_mode, it is still usable in a training forward.
    model, _ = make_model()
    with torch.inference_mode():
        model.eval()(synthetic_batch(2, seed=9))
    out = model.train()(synthetic_batch(2, seed=9))
    out.start_logits[0, 0].backward()
