"""The CPU fast paths of rckit.kernels against the plain layers (values and gradients), the
switch that turns them on and off, and the state-dict layout the layers keep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from rckit import kernels
from rckit.data.batching import Batch
from rckit.data.embeddings import EmbeddingInfo
from rckit.kernels import cpu
from rckit.layers.attention import MultiHeadSelfAttention
from rckit.layers.conv import DepthwiseSeparableConv1d
from rckit.layers.embedding import CharCNN
from rckit.models import MODELS
from rckit.models.dcn import DCN
from rckit.models.losses import span_loss
from rckit.models.qanet import EncoderBlock
from tests.models.test_attentive_reader import N_ENT
from tests.models.test_attentive_reader import TINY_ATTENTIVE as TINY_READER
from tests.models.test_dcn import TINY_DCN, TINY_PLUS
from tests.models.test_dcn import make_model as make_dcn
from tests.models.test_deep_lstm_reader import CLOZE, SPAN
from tests.models.test_qanet import N_CHARS, N_TRAINABLE, TINY, V, synthetic_batch
from tests.models.test_qanet import make_model as make_qanet

LAYOUT = Path(__file__).resolve().parents[1] / "fixtures" / "state_dict_layout.json"
BF16 = torch.bfloat16


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors gain nothing from intra-op threads on a busy machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def grads(
    out: torch.Tensor, tensors: list[torch.Tensor], seed: int = 123, where: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """Gradients of ``<out, g>`` for a fixed random ``g`` (zero outside ``where``)."""
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    g = (g if where is None else g * where).to(out.dtype)
    return list(torch.autograd.grad(out, tensors, g, allow_unused=True))


def close(a: torch.Tensor, b: torch.Tensor, dtype=torch.float32, msg: str = "") -> None:
    """``a`` equals ``b`` to the precision of ``dtype``: elementwise in fp32; in bf16, where the two
    paths round different intermediate sums, as a whole (relative error of the norm) and
    elementwise against the largest value."""
    a, b = a.detach().float(), b.detach().float()
    if dtype == BF16:
        err = float((a - b).norm() / b.norm().clamp(min=1e-12))
        assert err < 2e-2, f"{msg}: relative error {err:.3g}"
        scale = float(b.abs().max().clamp(min=1e-12))
        torch.testing.assert_close(a, b, rtol=0.0, atol=0.08 * scale, msg=lambda m: f"{msg}: {m}")
    else:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{msg}: {m}")


# --- the switch ---------------------------------------------------------------------------------


def test_spec_strings():
    every = frozenset(kernels.NAMES)
    assert kernels.parse("all") == kernels.parse("") == kernels.parse(" ALL ") == every
    assert kernels.parse("none") == frozenset()
    assert kernels.parse("conv,dedupe") == kernels.parse(" conv , dedupe ,") == {"conv", "dedupe"}
    assert kernels.parse("-conv,-attention") == every - {"conv", "attention"}
    assert kernels.parse("-residual") == every - {"residual"}
    with pytest.raises(ValueError, match="unknown kernel 'dropout'"):  # measured, dropped (BENCHMARKS.md)
        kernels.parse("dropout")
    for bad in ("convs", "conv,flash", "-nhwc_conv"):
        with pytest.raises(ValueError) as e:
            kernels.parse(bad)
        assert bad.split(",")[-1].lstrip("-") in str(e.value)
        assert all(n in str(e.value) for n in kernels.NAMES)  # lists what there is
    with pytest.raises(ValueError, match="mixes"):
        kernels.parse("conv,-attention")
    with pytest.raises(ValueError, match="unknown kernel 'flash'"):
        kernels.enabled("flash")


def test_use_switches_for_a_block_and_restores():
    before = kernels.active()
    with kernels.use("-conv"):
        assert not kernels.enabled("conv") and kernels.enabled("dedupe")
        with kernels.use("none"):
            assert kernels.active() == ()
        assert kernels.active() == tuple(n for n in kernels.NAMES if n != "conv")
    with pytest.raises(RuntimeError):
        with kernels.use("conv"):
            assert kernels.active() == ("conv",)
            raise RuntimeError
    assert kernels.active() == before


@pytest.mark.parametrize(
    "spec,expected",
    [
        (None, list(kernels.NAMES)),
        ("none", []),
        ("all", list(kernels.NAMES)),
        ("char_cnn,dedupe", ["char_cnn", "dedupe"]),
        ("-attention", [n for n in kernels.NAMES if n != "attention"]),
    ],
)
def test_environment_variable_sets_the_initial_state(spec, expected):
    env = {k: v for k, v in os.environ.items() if k != "RCKIT_KERNELS"}
    if spec is not None:
        env["RCKIT_KERNELS"] = spec
    code = "from rckit import kernels; print(list(kernels.active()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out.replace("'", '"')) == expected


def test_environment_variable_with_an_unknown_name_fails_at_import():
    env = {**os.environ, "RCKIT_KERNELS": "conv,fused_lstm"}
    run = subprocess.run([sys.executable, "-c", "import rckit.kernels"], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and "ValueError" in run.stderr and "'fused_lstm'" in run.stderr


# --- byte masks (residual) -------------------------------------------------------------------


def test_keep_mask_rate_and_scale():
    torch.manual_seed(0)
    for p in (0.05, 0.1, 0.3):
        keep, inv_keep = cpu.keep_mask((1000, 1000), p, torch.device("cpu"))
        assert keep.dtype == torch.uint8 and set(torch.unique(keep).tolist()) == {0, 1}
        cut = round(p * 2**16)  # the rate is p rounded to a multiple of 2^-16
        assert inv_keep == 2**16 / (2**16 - cut) and abs(inv_keep - 1 / (1 - p)) < 1e-4
        sd = (p * (1 - p) / 1e6) ** 0.5
        assert abs((1 - keep.float().mean().item()) - p) < 5 * sd
    assert cpu.keep_mask((3, 4), 1.0, torch.device("cpu"))[1] == 0.0
    with pytest.raises(ValueError):
        cpu.keep_mask((3,), 1.5, torch.device("cpu"))


def test_positive_mask_is_y_greater_than_zero_in_every_float_type():
    torch.manual_seed(0)
    special = [0.0, -0.0, 1e-40, -1e-40, float("inf"), float("-inf"), 1.0, -1.0]  # 1e-40: subnormal in fp32
    for dtype in (torch.float32, BF16, torch.float16, torch.float64):
        y = torch.cat([torch.tensor(special), torch.randn(1000)]).to(dtype)
        bits = y.clone()
        m = cpu.positive_mask(y)
        assert m.dtype == torch.uint8 and torch.equal(m.bool(), y > 0), dtype
        assert torch.equal(y.view(torch.uint8), bits.view(torch.uint8))  # y itself is untouched, bit for bit


def test_as_factor_multiplies_like_the_boolean_mask_without_a_copy():
    torch.manual_seed(0)
    mask = torch.rand(3, 5, 4) > 0.4
    f = cpu.as_factor(mask)
    assert f.dtype == torch.uint8 and f.data_ptr() == mask.data_ptr()  # the same bytes
    for dtype in (torch.float32, BF16):
        x = torch.randn(3, 5, 4, dtype=dtype, requires_grad=True)
        y = x * f
        assert y.dtype == dtype and torch.equal(y, x * mask)
        g = torch.randn_like(y)
        assert torch.equal(torch.autograd.grad(y, x, g)[0], g * mask)
    per_example = mask[:, :1, :1]  # strided (B, 1, 1), as stochastic depth's masks broadcast
    assert torch.equal(torch.ones(3, 5, 4) * cpu.as_factor(per_example), torch.ones(3, 5, 4) * per_example)


# --- QANet's residual ---------------------------------------------------------------------------


def residual_masks(spec: str, seed: int, shape, p: float, survival: float, per_example: bool):
    """The masks ``EncoderBlock.residual`` draws after ``manual_seed(seed)``: the per-example
    keep (or None) and the dropout mask with its scale, for the plain path or the kernel."""
    torch.manual_seed(seed)
    keep = torch.rand(shape[0], 1, 1) < survival if per_example and survival < 1.0 else None
    if p == 0.0:
        return keep, torch.ones(shape, dtype=torch.bool), 1.0
    if spec == "none":
        return keep, F.dropout(torch.ones(shape), p) != 0, 1.0 / (1.0 - p)
    drop, inv_keep = cpu.keep_mask(shape, p, torch.device("cpu"))
    return keep, drop.bool(), inv_keep


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize(
    "p,survival,per_example,relu",
    [
        (0.3, 0.8, True, True),
        (0.1, 0.8, True, False),
        (0.2, 0.7, False, True),
        (0.0, 0.8, True, True),
        (0.1, 1.0, True, True),
    ],
)
def test_residual_plain_and_kernel_equal_the_definition_with_the_same_masks(dtype, p, survival, per_example, relu):
    block = EncoderBlock(16, n_convs=1, kernel=3, n_heads=2, dropout=p).train()
    torch.manual_seed(0)
    x = torch.randn(4, 6, 16, dtype=dtype, requires_grad=True)
    y = torch.randn(4, 6, 16, dtype=dtype, requires_grad=True)
    for spec in ("none", "residual"):
        torch.manual_seed(7)
        with kernels.use(spec), torch.autocast("cpu", BF16, enabled=dtype == BF16):
            out = block.residual(x, y, survival, per_example, relu=relu)
        keep, drop, scale = residual_masks(spec, 7, y.shape, p, survival, per_example)
        f = torch.relu(y) if relu else y
        ref = x + f * drop * (1 if keep is None else keep) * scale / survival  # the definition
        assert out.dtype == ref.dtype
        close(out, ref, dtype, msg=spec)
        for a, b in zip(grads(out, [x, y]), grads(ref, [x, y])):
            close(a, b, dtype, msg=spec)
    block.eval()
    for spec in ("none", "all"):
        with kernels.use(spec):
            torch.testing.assert_close(
                block.residual(x, y, survival, per_example, relu=relu), x + (torch.relu(y) if relu else y)
            )


def test_residual_kernel_keeps_one_byte_mask_for_backward_and_preserves_the_mean():
    block = EncoderBlock(16, n_convs=1, kernel=3, n_heads=2, dropout=0.3).train()
    x = torch.randn(4, 6, 16)
    y = torch.randn(4, 6, 16, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with kernels.use("residual"), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block.residual(x, y, 0.8, per_example=True, relu=True)
    # one mask of 1 byte an element, not the ReLU's output as well
    assert [(t.dtype, t.shape) for t in saved] == [(torch.uint8, y.shape)]
    # E[out - x] = relu(y): drop rate p, survivors scaled exactly
    block.p = 0.1
    torch.manual_seed(0)
    x, y = torch.zeros(64, 100, 64), torch.full((64, 100, 64), 2.0)
    with kernels.use("residual"):
        out = block.residual(x, y, 0.9, per_example=False, relu=True)
    sd = (0.1 * 0.9 / out.numel()) ** 0.5
    assert abs((out == 0).float().mean().item() - 0.1) < 5 * sd
    assert abs(out.mean().item() / (2.0 / 0.9) - 1.0) < 5 * 2 * sd
    assert torch.equal(out[out != 0].unique(), torch.tensor([2.0 * 2**16 / (2**16 - round(0.1 * 2**16)) / 0.9]))


# --- depthwise-separable conv -------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 5, 7])
def test_depthwise_conv1d_matches_grouped_conv_forward_and_backward(k):
    torch.manual_seed(0)
    C = 6
    x = torch.randn(3, 11, C, dtype=torch.float64, requires_grad=True)  # (B, T, C)
    w = torch.randn(C, 1, k, dtype=torch.float64, requires_grad=True)
    ours = cpu.depthwise_conv1d(x, w)
    ref = F.conv1d(x.transpose(1, 2), w, padding=k // 2, groups=C).transpose(1, 2)
    torch.testing.assert_close(ours, ref)
    for a, b in zip(grads(ours, [x, w]), grads(ref, [x, w])):
        torch.testing.assert_close(a, b)


def test_depthwise_conv1d_inference_paths_match_grouped_conv(monkeypatch):
    torch.manual_seed(0)
    calls, shifted_sum = [], cpu._shifted_sum
    monkeypatch.setattr(cpu, "_shifted_sum", lambda *a: calls.append("shifted") or shifted_sum(*a))
    for B, T, k in [(1, 1, 5), (1, 2, 7), (1, 30, 7), (1, 700, 5), (2, 200, 5), (3, 4, 3)]:
        x, w = torch.randn(B, T, 8), torch.randn(8, 1, k)
        ref = F.conv1d(x.transpose(1, 2), w, padding=k // 2, groups=8).transpose(1, 2)
        calls.clear()
        with torch.inference_mode():
            torch.testing.assert_close(cpu.depthwise_conv1d(x, w), ref, rtol=1e-5, atol=1e-5)
        assert calls == (["shifted"] if B == 1 else []), (B, T)


def test_depthwise_conv1d_in_bf16_keeps_the_input_dtype_and_sums_weight_gradients_in_fp32():
    torch.manual_seed(0)
    x, w = torch.randn(2, 9, 4), torch.randn(4, 1, 5)
    ref = F.conv1d(x.transpose(1, 2), w, padding=2, groups=4).transpose(1, 2)
    y16 = cpu.depthwise_conv1d(x.bfloat16(), w)
    assert y16.dtype == BF16
    close(y16, ref, BF16)
    xb = x.bfloat16().requires_grad_()
    wb = w.clone().requires_grad_()
    g = torch.randn(2, 9, 4)
    gx, gw = torch.autograd.grad(cpu.depthwise_conv1d(xb, wb), (xb, wb), g.bfloat16())
    rx, rw = torch.autograd.grad(cpu.depthwise_conv1d(xb.float(), wb), (xb, wb), g)
    assert gx.dtype == BF16 and gw.dtype == torch.float32
    close(gx, rx, BF16)
    torch.testing.assert_close(gw, rw, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize("B,T,k", [(1, 9, 5), (1, 1, 7), (3, 12, 7), (2, 5, 3)])
def test_separable_conv_kernel_equals_plain_conv(dtype, B, T, k):
    torch.manual_seed(0)
    conv = DepthwiseSeparableConv1d(8, 6, k)
    x = torch.randn(B, T, 8)
    x[-1, T // 2 :] = 0.0  # a padded tail, zeroed as QANet does
    x.requires_grad_()
    params = [x, conv.depthwise.weight, conv.pointwise.weight, conv.pointwise.bias]
    out = {}
    for spec in ("none", "conv"):
        with kernels.use(spec), torch.autocast("cpu", BF16, enabled=dtype == BF16):
            y = conv(x)  # training: grad enabled (the autograd.Function)
            with torch.no_grad():  # inference: oneDNN, or the shifted sum at batch 1 in fp32
                y_eval = conv(x)
        assert y.dtype == y_eval.dtype == dtype
        out[spec] = (y, y_eval, grads(y, params))
    (y, y_eval, g), (yk, yk_eval, gk) = out["none"], out["conv"]
    close(yk, y, dtype)
    close(yk_eval, y_eval, dtype)
    for a, b, name in zip(gk, g, ["x", "depthwise", "pointwise", "bias"]):
        close(a, b, dtype, msg=name)


# --- self-attention -----------------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
def test_fp32_attention_function_matches_fp32_sdpa_to_bf16_precision(masked):
    torch.manual_seed(0)
    B, H, T, dh = 2, 3, 7, 4
    qkv = torch.randn(B, T, 3 * H * dh).bfloat16().requires_grad_()
    mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
    mask[1, ..., 5:] = False
    key_mask = mask if masked else None
    ref = F.scaled_dot_product_attention(*cpu._heads(qkv.double(), H), attn_mask=key_mask)  # (B, H, T, dh)
    ref = ref.transpose(1, 2).reshape(B, T, H * dh)
    ours = cpu.Fp32Attention.apply(qkv, H, cpu._additive(mask) if masked else None)
    assert ours.dtype == BF16 and ours.shape == (B, T, H * dh)
    torch.testing.assert_close(ours, ref.to(BF16))  # the forward is the fp32 kernel's, rounded once
    g = torch.randn_like(ours)
    (grad,) = torch.autograd.grad(ours, qkv, g)
    (ref_grad,) = torch.autograd.grad(ref, qkv, g.double())  # float64 all the way, rounded to bf16 at the leaf
    assert grad.dtype == BF16
    for a, b in zip(cpu._heads(grad, H), cpu._heads(ref_grad, H)):
        # The backward reads the bf16 output (D = dO . O): q and k gradients are off by about bf16 rounding.
        assert float((a.double() - b.double()).norm() / b.double().norm()) < 1e-2
    torch.testing.assert_close(cpu._heads(grad, H)[2], cpu._heads(ref_grad, H)[2])


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize("B,masked", [(1, False), (3, False), (3, True)])
def test_attention_kernel_equals_plain_sdpa(dtype, B, masked):
    torch.manual_seed(0)
    att = MultiHeadSelfAttention(16, n_heads=2)
    x = torch.randn(B, 6, 16, requires_grad=True)
    mask = None
    if masked:
        mask = torch.ones(B, 6, dtype=torch.bool)
        mask[-1, 4:] = False
    params = [x, att.qkv.weight, att.out.weight, att.out.bias]
    with torch.no_grad():
        fp32 = att(x, mask)
    out = {}
    for spec in ("none", "attention"):
        with kernels.use(spec), torch.autocast("cpu", BF16, enabled=dtype == BF16):
            y = att.train()(x, mask)  # with grad: Fp32Attention under bf16
            with torch.no_grad():
                y_eval = att.eval()(x, mask)  # without: fp32 SDPA
        assert y.dtype == y_eval.dtype == dtype
        out[spec] = (y, y_eval, grads(y, params))
    (y, y_eval, g), (yk, yk_eval, gk) = out["none"], out["attention"]
    if dtype == torch.float32:  # the kernel only takes 16-bit inputs: the same computation
        assert torch.equal(yk, y) and torch.equal(yk_eval, y_eval)
    close(yk, y, dtype)
    close(yk_eval, y_eval, dtype)
    close(yk, fp32, dtype)
    for a, b, name in zip(gk, g, ["x", "qkv", "out", "out.bias"]):
        close(a, b, dtype, msg=name)


# --- char CNN -----------------------------------------------------------------------------------


def char_batch(B: int) -> torch.Tensor:
    """(B, 7, 9) char ids: words of 0-9 chars, a leading pad, gaps inside words, an empty example."""
    g = torch.Generator().manual_seed(B)
    chars = torch.randint(1, 30, (B, 7, 9), generator=g)
    lengths = torch.randint(0, 10, (B, 7), generator=g)
    chars = chars * (torch.arange(9) < lengths.unsqueeze(-1))  # 0 = padding
    chars[0, 0] = torch.tensor([0, 3, 4, 0, 0, 5, 6, 0, 0])  # leading pad, a gap wider than the kernel
    chars[0, 1] = torch.tensor([7, 0, 8, 0, 0, 0, 0, 0, 0])  # a one-char gap
    if B > 1:
        chars[-1] = 0  # an all-padding example
    return chars


def separated_maxima(cnn: CharCNN, chars: torch.Tensor) -> torch.Tensor:
    """(B, T, C) True where a word's largest activation beats the next by more than bf16 can
    blur (from the fp32 dense conv). Elsewhere rounding may tie two characters in one path
    and not in the other, and a max's gradient is split between ties."""
    B, T, W = chars.shape
    pad = (chars == 0).reshape(B * T, W, 1)
    with torch.no_grad():
        x = cnn.embed(chars.reshape(B * T, W)).masked_fill(pad, 0.0)  # (B*T, W, Dc)
        y = torch.relu(cnn.conv(x.transpose(1, 2))).transpose(1, 2).masked_fill(pad, 0.0)  # (B*T, W, C)
        top = y.topk(2, dim=1).values  # (B*T, 2, C)
    return (top[:, 0] - top[:, 1] > 0.03 * top[:, 0]).view(B, T, -1)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("training", [True, False])
def test_char_cnn_kernel_equals_the_dense_conv(dtype, B, training):
    torch.manual_seed(0)
    cnn = CharCNN(n_chars=30, char_dim=6, out_dim=5, width=5).train(training)  # dropout 0: comparable
    chars = char_batch(B)
    params = list(cnn.parameters())
    where = separated_maxima(cnn, chars) if dtype == BF16 else None
    out = {}
    for spec in ("none", "char_cnn"):
        with kernels.use(spec), torch.autocast("cpu", BF16, enabled=dtype == BF16):
            y = cnn(chars)
            out[spec] = (y, grads(y, params, where=where))
            assert (cnn(torch.zeros(2, 3, 4, dtype=torch.long)) == 0).all()  # a batch without a single char
    (y, g), (yk, gk) = out["none"], out["char_cnn"]
    assert y.dtype == yk.dtype == dtype
    close(yk, y, dtype)
    if B > 1:
        assert (yk[-1] == 0).all()
    for a, b, name in zip(gk, g, ["embed", "conv.weight", "conv.bias"]):
        close(a, b, dtype, msg=name)


def test_char_cnn_kernel_applies_char_dropout_in_training_only():
    torch.manual_seed(0)
    cnn = CharCNN(n_chars=30, char_dim=6, out_dim=5, width=5, dropout=0.5)
    chars = char_batch(3)
    with kernels.use("char_cnn"):
        assert not torch.equal(cnn.train()(chars), cnn(chars))
        torch.testing.assert_close(cnn.eval()(chars), cnn(chars))
        with kernels.use("none"):
            dense = cnn(chars)
        close(cnn(chars), dense)


# --- dedupe -------------------------------------------------------------------------------------


def test_unique_rows_groups_equal_rows_exactly_even_when_hashes_collide(monkeypatch):
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 4, (300, 3), generator=g)  # at most 64 distinct rows: many repeats
    rows[10] = rows[200]
    n_distinct = len(torch.unique(rows, dim=0))
    for weights in (cpu._weights, lambda n, device: torch.zeros(n, dtype=torch.long)):  # the second: all collide
        monkeypatch.setattr(cpu, "_weights", weights)
        rep, inverse = cpu.unique_rows(rows)
        assert len(rep) == n_distinct and inverse.shape == (300,)
        assert torch.equal(rows[rep][inverse], rows)
        assert inverse[10] == inverse[200]
    rep, inverse = cpu.unique_rows(rows[:1])
    assert rep.tolist() == [0] and inverse.tolist() == [0]
    rep, inverse = cpu.unique_rows(rows[:0])
    assert len(rep) == 0 and len(inverse) == 0


def test_once_per_distinct_text_calls_fn_on_the_distinct_rows():
    words = torch.tensor([[1, 2], [3, 4], [1, 2], [1, 2]])
    chars = torch.stack([words, words], dim=-1)  # (4, 2, 2)
    seen = []

    def fn(words):
        def rows(i):
            seen.append(words[i].shape[0])
            return words[i].float() * 10

        return rows

    assert torch.equal(cpu.once_per_distinct_text(fn(words), words, chars), words.float() * 10)
    assert seen == [2]
    chars[3, 0, 1] = 9  # the same word ids spelled differently: a different text
    seen.clear()
    assert torch.equal(
        cpu.once_per_distinct_text(fn(words[[0, 1, 3]]), words[[0, 1, 3]], chars[[0, 1, 3]]),
        words[[0, 1, 3]].float() * 10,
    )
    assert seen == [3]


def shared_context_batch() -> Batch:
    batch = synthetic_batch(5, seed=4)
    for name in ("c_words", "c_chars", "c_mask"):  # questions 0, 2 and 4 ask about one paragraph
        t = getattr(batch, name)
        t[2] = t[0]
        t[4] = t[0]
    return batch


def test_qanet_eval_encodes_a_shared_context_once_and_each_distinct_token_once():
    model, _ = make_qanet()
    model.eval()
    batch = shared_context_batch()
    seen, tokens = [], []
    model.emb_enc.register_forward_hook(lambda mod, args, out: seen.append(out.shape[0]))
    model.embed.char.register_forward_hook(lambda mod, args, out: tokens.append(tuple(args[0].shape[:2])))
    with torch.no_grad():
        with kernels.use("dedupe"):
            out = model(batch)
        assert seen == [3, 5]  # the contexts: 3 distinct of 5, then the 5 questions
        # One embedding call over the tokens of those 3 contexts and the 5 questions, each
        # distinct token once (a token's chars are a function of its id here).
        n_distinct = len(torch.unique(torch.cat([batch.c_words[[0, 1, 3]].flatten(), batch.q_words.flatten()])))
        assert tokens == [(1, n_distinct)]
        seen.clear(), tokens.clear()
        with kernels.use("none"):
            plain = model(batch)
        assert seen == [5, 5] and tokens == [(5, 14), (5, 3)]
    close(out.start_logits, plain.start_logits)
    close(out.end_logits, plain.end_logits)


def test_dcn_eval_encodes_a_shared_document_once():
    batch = shared_context_batch()
    for config in (TINY_DCN, TINY_PLUS):
        model = make_dcn(config).eval()
        encoder = model.encoder if isinstance(model, DCN) else model.enc1
        seen = []
        encoder.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[0]))
        with torch.no_grad():
            with kernels.use("dedupe"):
                out = model(batch)
            assert seen == [3, 5]  # the documents: 3 distinct of 5, then the 5 questions
            seen.clear()
            with kernels.use("none"):
                plain = model(batch)
            assert seen == [5, 5]
        close(out.start_logits, plain.start_logits)
        close(out.end_logits, plain.end_logits)


# --- whole models -------------------------------------------------------------------------------


def logits_under(model, batch, spec: str, dtype):
    with kernels.use(spec), torch.no_grad(), torch.autocast("cpu", BF16, enabled=dtype == BF16):
        out = model(batch)
    return out.start_logits.float(), out.end_logits.float()


def loss_and_grads(model, batch, spec: str, dtype):
    model.zero_grad(set_to_none=True)
    with kernels.use(spec), torch.autocast("cpu", BF16, enabled=dtype == BF16):
        out = model(batch)
        loss = span_loss(out.start_logits, out.end_logits, batch.y_start, batch.y_end)
        loss.backward()
    return loss.detach().float(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def model_batches() -> list[Batch]:
    one = synthetic_batch(1, seed=6)
    return [one, synthetic_batch(6, seed=2), shared_context_batch()]  # batch 1 (no padding), padded, shared


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_tiny_qanet_eval_logits_are_the_same_with_and_without_kernels(dtype):
    model, _ = make_qanet()
    model.eval()
    for batch in model_batches():
        fast, plain = logits_under(model, batch, "all", dtype), logits_under(model, batch, "none", dtype)
        m = batch.c_mask
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=0.05, atol=0.1)
        for a, b in zip(fast, plain):
            torch.testing.assert_close(a[m], b[m], **tol)
            assert torch.equal(a[~m], b[~m])  # finfo.min at the padding


def relative_error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """``|a - b| / |b|`` over all the gradients as one vector."""
    num = sum(float((a[n].float() - b[n].float()).norm()) ** 2 for n in b)
    return (num / sum(float(b[n].float().norm()) ** 2 for n in b)) ** 0.5


def test_tiny_qanet_training_gradients_are_the_same_with_and_without_kernels():
    model, _ = make_qanet(replace(TINY, dropout=0.0, char_dropout=0.0, layer_survival=1.0))
    model.train()
    for batch in model_batches()[:2]:
        loss_k, grads_k = loss_and_grads(model, batch, "all", torch.float32)
        loss_p, grads_p = loss_and_grads(model, batch, "none", torch.float32)
        assert grads_k.keys() == grads_p.keys() == dict(model.named_parameters()).keys()
        torch.testing.assert_close(loss_k, loss_p, rtol=1e-5, atol=1e-5)
        for n, g in grads_p.items():
            torch.testing.assert_close(grads_k[n], g, rtol=1e-3, atol=1e-5, msg=n)
        # Under bf16 autocast both paths give the fp32 gradients to bf16 precision. (Parameter by
        # parameter a tiny model's bf16 gradients are noisy either way: max-pool ties, small sums.)
        loss_k16, grads_k16 = loss_and_grads(model, batch, "all", BF16)
        loss_p16, grads_p16 = loss_and_grads(model, batch, "none", BF16)
        torch.testing.assert_close(loss_k16, loss_p, rtol=0.02, atol=0.02)
        torch.testing.assert_close(loss_p16, loss_p, rtol=0.02, atol=0.02)
        assert relative_error(grads_k16, grads_p) < 0.1 and relative_error(grads_p16, grads_p) < 0.1
        assert relative_error(grads_k16, grads_p16) < 0.1


def test_tiny_dcn_logits_and_gradients_are_the_same_with_and_without_kernels():
    for config in (TINY_DCN, TINY_PLUS):
        model = make_dcn(config)
        for batch in model_batches():
            for a, b in zip(
                logits_under(model.eval(), batch, "all", torch.float32),
                logits_under(model, batch, "none", torch.float32),
            ):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        model.train()  # dropout 0 in the tiny configs: deterministic; the char CNN's kernel and dropout's switch
        batch = model_batches()[1]
        torch.manual_seed(0)
        loss_k, grads_k = loss_and_grads(model, batch, "all", torch.float32)
        torch.manual_seed(0)
        loss_p, grads_p = loss_and_grads(model, batch, "none", torch.float32)
        torch.testing.assert_close(loss_k, loss_p, rtol=1e-5, atol=1e-5)
        assert grads_k.keys() == grads_p.keys()
        for n, g in grads_p.items():
            torch.testing.assert_close(grads_k[n], g, rtol=1e-3, atol=1e-5, msg=n)


# --- state-dict layout --------------------------------------------------------------------------


def tiny_models() -> dict[str, torch.nn.Module]:
    """One tiny model of each kind in ``MODELS`` (both heads of the Deep LSTM Reader, both
    stochastic-depth readings of QANet), as the contract tests build them."""
    torch.manual_seed(0)
    span = EmbeddingInfo(word_vectors=torch.randn(V, 12), n_trainable_words=N_TRAINABLE, n_chars=N_CHARS)
    cloze = EmbeddingInfo(word_vectors=torch.randn(V, 10), n_trainable_words=4, n_chars=0, n_entities=N_ENT)
    build = {name: cls for name, (_, cls) in MODELS.items()}
    configs = {name: cfg for name, (cfg, _) in MODELS.items()}
    return {
        "qanet": build["qanet"](TINY, span),
        "qanet:layer_dropout=batch": build["qanet"](replace(TINY, layer_dropout="batch"), span),
        "deep_lstm_reader": build["deep_lstm_reader"](CLOZE, cloze),
        "deep_lstm_reader:span": build["deep_lstm_reader"](SPAN, cloze),
        "attentive_reader": build["attentive_reader"](configs["attentive_reader"](**TINY_READER), cloze),
        "impatient_reader": build["impatient_reader"](configs["impatient_reader"](**TINY_READER), cloze),
        "dcn": build["dcn"](TINY_DCN, span),
        "dcn_plus": build["dcn_plus"](TINY_PLUS, span),
    }


def state_dict_layout() -> dict[str, list[list]]:
    """``{model: [[key, shape], ...]}``; entries that are not tensors (extra state) have shape None."""
    return {
        name: [[k, list(v.shape) if isinstance(v, torch.Tensor) else None] for k, v in m.state_dict().items()]
        for name, m in tiny_models().items()
    }


def test_state_dict_layout_is_unchanged_so_old_checkpoints_load():
    expected = json.loads(LAYOUT.read_text())
    assert state_dict_layout() == expected  # same keys, same order, same shapes
    for name, model in tiny_models().items():  # a checkpoint of the fixture's layout is a plain load
        old = {k: torch.zeros(shape) for k, shape in expected[name] if shape is not None}
        extra = {k: v for k, v in model.state_dict().items() if not isinstance(v, torch.Tensor)}
        model.load_state_dict({**old, **extra})


if __name__ == "__main__":  # python -m tests.kernels.test_kernels: rewrite the fixture (only when a rename is intended)
    models = [
        f"  {json.dumps(name)}: [\n" + ",\n".join(f"    {json.dumps(entry)}" for entry in layout) + "\n  ]"
        for name, layout in state_dict_layout().items()
    ]
    LAYOUT.write_text("{\n" + ",\n".join(models) + "\n}\n")
