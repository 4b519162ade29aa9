"""Tests for rckit.layers.lstm.PeepholeLSTM: parity with nn.LSTM, padding, directions, precision."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rckit.layers.lstm import PeepholeLSTM, _Recurrence, chrono_init_


def right_padded(lengths: list[int], T: int) -> torch.Tensor:
    return torch.arange(T) < torch.tensor(lengths).unsqueeze(1)  # (B, T)


def randomize_peepholes(model: PeepholeLSTM, scale: float = 0.3) -> PeepholeLSTM:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("peephole"):
                p.uniform_(-scale, scale)
    return model


@pytest.mark.parametrize("kind", [0, 1, 2])
def test_recurrence_backward_matches_finite_differences(kind):
    torch.manual_seed(kind)
    T, S, B, H = 4, 2, 3, 2
    mask = right_padded([4, 2, 1], T).t().unsqueeze(-1)  # (T, B, 1): all real at t = 0 only
    peep_shape = {0: (0,), 1: (S, 3, H), 2: (S, 3, H, H)}[kind]
    xp, h0, c0, w_hh, peep = (
        torch.randn(*shape, dtype=torch.float64, requires_grad=True)
        for shape in [(T, S, B, 4 * H), (S, B, H), (S, B, H), (S, 4 * H, H), peep_shape]
    )
    inputs = (xp, h0, c0, w_hh, peep) if kind else (xp, h0, c0, w_hh)

    def run(xp, h0, c0, w_hh, peep=peep):
        return _Recurrence.apply(xp, mask, 1, h0, c0, w_hh, peep, kind)

    assert torch.autograd.gradcheck(run, inputs)


def torch_reference(lstm: nn.LSTM, x, lengths, state):
    packed = pack_padded_sequence(x, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
    out, (h, c) = lstm(packed, state)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
    return out, h, c


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("variant", ["fused", "handwritten", "diagonal-zeroed", "full-zeroed"])
def test_equals_torch_lstm_with_padding(variant, bidirectional):
    torch.manual_seed(0)
    D, H, L, T, lengths = 5, 4, 2, 7, [5, 7, 3, 1]
    B, S = len(lengths), 2 if bidirectional else 1
    ref = nn.LSTM(D, H, num_layers=L, bidirectional=bidirectional, batch_first=True)
    if variant in ("fused", "handwritten"):
        model = PeepholeLSTM.from_torch(ref, fused=variant == "fused")
    else:  # peepholes start at zero: the hand-written loop must reduce to nn.LSTM
        model = PeepholeLSTM(D, H, L, bidirectional, peephole=variant.split("-")[0]).load_torch_weights(ref)
    x = torch.randn(B, T, D)
    mask = right_padded(lengths, T)
    x = x.masked_fill(~mask.unsqueeze(-1), 7.0)  # junk in the padding must not matter
    state = (torch.randn(L * S, B, H), torch.randn(L * S, B, H))
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()

    out, (h, c) = model(x1, mask, state)
    ref_out, ref_h, ref_c = torch_reference(ref, x2, lengths, state)
    tol = dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out, ref_out, **tol)
    torch.testing.assert_close(h, ref_h, **tol)
    torch.testing.assert_close(c, ref_c, **tol)

    w_out, w_h, w_c = torch.randn_like(out), torch.randn_like(h), torch.randn_like(c)
    ((out * w_out).sum() + (h * w_h).sum() + (c * w_c).sum()).backward()
    ((ref_out * w_out).sum() + (ref_h * w_h).sum() + (ref_c * w_c).sum()).backward()
    torch.testing.assert_close(x1.grad, x2.grad, **tol)
    for k in range(L):
        w_ih, w_hh, b, _ = model.layer_params(k)
        for s, suffix in enumerate(["", "_reverse"][:S]):
            torch.testing.assert_close(w_ih.grad[s], getattr(ref, f"weight_ih_l{k}{suffix}").grad, **tol)
            torch.testing.assert_close(w_hh.grad[s], getattr(ref, f"weight_hh_l{k}{suffix}").grad, **tol)
            torch.testing.assert_close(b.grad[s], getattr(ref, f"bias_ih_l{k}{suffix}").grad, **tol)


@pytest.mark.parametrize("peephole", ["diagonal", "full", None])
def test_padding_does_not_change_results(peephole):
    torch.manual_seed(1)
    model = randomize_peepholes(PeepholeLSTM(3, 4, num_layers=2, bidirectional=True, peephole=peephole))
    lengths, T = [6, 2, 4], 6
    x = torch.randn(len(lengths), T, 3)
    mask = right_padded(lengths, T)
    out, (h, c) = model(x, mask)
    extra = 5  # more padding, filled with junk
    x_long = torch.cat([x.masked_fill(~mask.unsqueeze(-1), -3.0), torch.randn(len(lengths), extra, 3)], 1)
    out_long, (h_long, c_long) = model(x_long, right_padded(lengths, T + extra))
    torch.testing.assert_close(out_long[:, :T], out)
    assert (out_long[:, T:] == 0).all() and (out[~mask] == 0).all()
    torch.testing.assert_close(h_long, h)
    torch.testing.assert_close(c_long, c)


@pytest.mark.parametrize("peephole", ["diagonal", "full"])
def test_bidirectional_reverses_each_sequence_within_its_length(peephole):
    torch.manual_seed(2)
    D, H = 3, 4
    model = randomize_peepholes(PeepholeLSTM(D, H, bidirectional=True, peephole=peephole))
    backward_only = PeepholeLSTM(D, H, peephole=peephole)  # the reverse direction's weights, alone
    with torch.no_grad():
        for p, q in zip(backward_only.layer_params(0), model.layer_params(0)):
            p.copy_(q[1:2])
    lengths, T = [5, 3, 1], 5
    x = torch.randn(len(lengths), T, D)
    out, (h, c) = model(x, right_padded(lengths, T))
    for b, n in enumerate(lengths):
        alone, (h1, c1) = model(x[b : b + 1, :n])  # unpadded, batch of one
        torch.testing.assert_close(out[b : b + 1, :n], alone)
        torch.testing.assert_close(h[:, b : b + 1], h1)
        torch.testing.assert_close(c[:, b : b + 1], c1)
        rev, (h2, c2) = backward_only(x[b : b + 1, :n].flip(1))
        torch.testing.assert_close(out[b, :n, H:], rev[0].flip(0))
        torch.testing.assert_close(h[1, b], h2[0, 0])
        torch.testing.assert_close(c[1, b], c2[0, 0])


@pytest.mark.parametrize("peephole", ["diagonal", "full", None])
def test_gradients_reach_every_parameter(peephole):
    torch.manual_seed(3)
    model = PeepholeLSTM(5, 4, num_layers=2, bidirectional=True, peephole=peephole)
    if peephole == "full":
        assert model.peephole_l0.shape == (2, 3, 4, 4) and model.peephole_l1.shape == (2, 3, 4, 4)
    if peephole == "diagonal":
        assert model.peephole_l0.shape == (2, 3, 4)
    assert model.weight_ih_l1.shape == (2, 16, 8)
    x = torch.randn(3, 6, 5)
    out, (h, c) = model(x, right_padded([6, 4, 2], 6))
    assert out.shape == (3, 6, 8) and h.shape == c.shape == (4, 3, 4)
    (out.sum() + h.sum() + c.sum()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("peephole", ["diagonal", "full", None])
def test_bf16_autocast_runs_and_is_finite(peephole):
    torch.manual_seed(4)
    model = PeepholeLSTM(6, 4, num_layers=2, bidirectional=True, peephole=peephole)
    x = torch.randn(2, 5, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, (h, c) = model(x, right_padded([5, 3], 5))
        loss = out.float().sum() + c.float().sum()
    assert torch.isfinite(out).all() and torch.isfinite(h).all() and torch.isfinite(c).all()
    assert c.dtype == torch.float32  # the cell state stays fp32
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    ref, _ = model(x, right_padded([5, 3], 5))
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


def test_chrono_init_sets_only_the_input_and_forget_biases_of_every_layer_and_direction():
    torch.manual_seed(5)
    model = PeepholeLSTM(6, 8, num_layers=2, bidirectional=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    chrono_init_(model, 50)
    H = 8
    for k in range(2):
        b = getattr(model, f"bias_l{k}")
        b_f, b_i = b[:, H : 2 * H], b[:, :H]
        assert (b_f >= 0).all() and (b_f <= torch.log(torch.tensor(49.0))).all() and b_f.std() > 0.3
        torch.testing.assert_close(b_i, -b_f)
        torch.testing.assert_close(b[:, 2 * H :], before[f"bias_l{k}"][:, 2 * H :])  # cell input and output gates
    for name, p in model.named_parameters():
        if not name.startswith("bias"):
            assert torch.equal(p, before[name]), name
    with pytest.raises(ValueError, match="t_max > 2"):
        chrono_init_(model, 2)


def test_chrono_init_carries_the_first_input_to_the_end_of_a_long_sequence():
    """At the default forget bias 1 a cell's memory time is ~3.7 steps: after 120 steps the last
    state hardly depends on the first input, and neither does the gradient that could teach the
    cell to keep it. Chrono-initialised cells keep it."""
    T = 120

    def sensitivity(chrono: bool) -> float:
        torch.manual_seed(6)
        model = PeepholeLSTM(16, 32)
        if chrono:
            chrono_init_(model, 2 * T)
        x = torch.randn(4, T, 16, requires_grad=True)
        _, (h, c) = model(x)
        c.sum().backward()
        return float(x.grad[:, 0].norm() / x.grad[:, -1].norm())  # first step's gradient relative to the last's

    default, chrono = sensitivity(False), sensitivity(True)
    assert default < 1e-6
    assert chrono > 1e-2


def test_bad_inputs_raise_clear_errors():
    model = PeepholeLSTM(3, 4)
    x = torch.randn(2, 5, 3)
    with pytest.raises(ValueError, match="mask must be"):
        model(x, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask must be"):
        model(x, torch.ones(5, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        model(x, torch.ones(2, 5))
    with pytest.raises(ValueError, match="right padded"):
        model(x, torch.tensor([[True, False, True, False, False]] * 2))
    with pytest.raises(ValueError, match="x must be"):
        model(torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="state must be"):
        model(x, state=(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3)))
    with pytest.raises(ValueError, match="peephole"):
        PeepholeLSTM(3, 4, peephole="vector")


def test_fused_path_with_an_empty_sequence_falls_back_to_the_loop():
    torch.manual_seed(5)
    model = PeepholeLSTM(3, 4, peephole=None)
    x = torch.randn(2, 4, 3)
    out, (h, c) = model(x, right_padded([4, 0], 4))
    assert (out[1] == 0).all() and (h[:, 1] == 0).all() and (c[:, 1] == 0).all()
    model.fused = False
    ref, _ = model(x, right_padded([4, 0], 4))
    torch.testing.assert_close(out, ref)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("peephole", ["diagonal", None])
def test_cuda_matches_cpu(peephole):
    torch.manual_seed(6)
    model = randomize_peepholes(PeepholeLSTM(5, 8, num_layers=2, bidirectional=True, peephole=peephole))
    x, mask = torch.randn(3, 7, 5), right_padded([7, 4, 2], 7)
    out, (h, c) = model(x, mask)
    out_gpu, (h_gpu, c_gpu) = model.cuda()(x.cuda(), mask.cuda())
    torch.testing.assert_close(out_gpu.cpu(), out, rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(c_gpu.cpu(), c, rtol=1e-3, atol=1e-4)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out_bf16, _ = model(x.cuda(), mask.cuda())
    assert torch.isfinite(out_bf16).all()
