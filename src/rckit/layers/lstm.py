"""LSTM with peephole connections, written from its equations (Graves 2013, Sec. 2; Hermann et al.
2015, Sec. 3.2, Deep LSTM Reader), used by the Hermann et al. readers, DCN and DCN+.

For each layer ``k`` and time step ``t``, with ``x`` the layer's input::

    i(t) = sigmoid(W_xi x(t) + W_hi h(t-1) + w_ci * c(t-1) + b_i)
    f(t) = sigmoid(W_xf x(t) + W_hf h(t-1) + w_cf * c(t-1) + b_f)
    c(t) = f(t) * c(t-1) + i(t) * tanh(W_xc x(t) + W_hc h(t-1) + b_c)
    o(t) = sigmoid(W_xo x(t) + W_ho h(t-1) + w_co * c(t) + b_o)
    h(t) = o(t) * tanh(c(t))

The input and forget gates peep at ``c(t-1)``, the output gate at the new ``c(t)``.
``peephole="diagonal"`` makes ``w_c*`` vectors (Graves' reading: elementwise products),
``"full"`` H x H matrices (the paper's ``W_kc*`` taken literally), ``None`` drops them (the
standard LSTM of ``torch.nn.LSTM``). Where the Deep LSTM Reader's equations are written with
the forget gate over ``x(t)`` instead of the layer input ``x'(t, k)``, or with ``W_kxo`` in all
three terms of the output gate, we read a typo: every gate reads ``x'(t, k)``, and the output
gate has its own ``W_kxo``, ``W_kho``, ``W_kco``. That reader's skips and output projection are
its own (it stacks single-layer modules); stacked layers here feed each layer the previous
one's output, like ``nn.LSTM``, with ``dropout`` in between (``nn.Dropout`` on the hand-written
path, ``torch.lstm``'s own on the fused path: same distribution, different random streams).

Gates are ordered (i, f, g, o) with one bias per gate (``nn.LSTM``'s ``b_ih + b_hh``), so
:meth:`PeepholeLSTM.from_torch` copies an ``nn.LSTM`` exactly. Masks are right padded; a padded
step leaves ``(h, c)`` unchanged, so final states are those after each sequence's last real
token and padded outputs are zero. The backward direction reads each sequence reversed within
its own length, which keeps a right-padded batch right padded with the same mask, so both
directions run in one recurrence (``bmm`` over the direction axis).

Computation: one matmul gives the input projections of all steps, gates and directions; the
loop (:func:`_forward_loop`) does one ``(B, H) x (H, 4H)`` matmul per step and in-place updates
under ``no_grad``; autograd sees one node per layer (:class:`_Recurrence`), whose backward is
hand-written BPTT (:func:`_backward_loop`). With ``peephole=None`` and ``fused=True`` the module
calls ``nn.LSTM``'s kernels (``torch.lstm``: oneDNN on CPU, cuDNN on CUDA; packed sequences when
a batch has padding) with its own parameters; ``fused=False`` keeps the hand-written path. The
recurrence runs in the parameters' dtype with autocast off (under bf16 autocast only the input
projection is bf16); the fused path follows ``nn.LSTM`` under autocast and returns its final
states in the parameters' dtype. Speeds: BENCHMARKS.md ("LSTM").

Init: as ``nn.LSTM`` (uniform +-1/sqrt(H)), peepholes 0, forget-gate bias 1 (Gers et al. 2000;
Jozefowicz et al. 2015). A forget gate at ``sigmoid(b_f)`` gives a memory time of
``1 + exp(b_f)`` steps, 3.7 at ``b_f = 1``: what a cell wrote 60 tokens ago reaches the end
attenuated ~1e-8, and so does the gradient that would teach it to keep it.
:func:`chrono_init_` spreads the times over 2 .. T steps for readers of long documents.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

PEEPHOLES = {None: 0, "diagonal": 1, "full": 2}


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX-512 BF16 or AMX, as oneDNN sees it). Without it
    bf16 is emulated, slower than fp32, and oneDNN has no bf16 LSTM at all (an AVX2 machine refuses
    to create the primitive)."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def _forward_loop(
    xp: Tensor, mask: Tensor, min_len: int, h0: Tensor, c0: Tensor, w_hh: Tensor, peep: Tensor, kind: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Run the cell over ``xp`` (T, S, B, 4H), input projections plus bias, S directions.

    ``mask`` (T, B, 1) True on real steps, all True for ``t < min_len``; ``w_hh`` (S, 4H, H);
    ``peep`` (S, 3, H) diagonal or (S, 3, H, H) full [out, in], rows (ci, cf, co); ``kind`` 0/1/2
    = none/diagonal/full. Returns the states ``hs``, ``cs`` (T+1, S, B, H), index 0 the initial
    state, and the activated gates ``acts`` (T, S, B, 4H) = (i, f, tanh g, o).
    """
    T, S, B, G = xp.size(0), xp.size(1), xp.size(2), xp.size(3)
    H = G // 4
    hs = xp.new_empty((T + 1, S, B, H))
    cs = xp.new_empty((T + 1, S, B, H))
    acts = xp.new_empty((T, S, B, G))
    hs[0] = h0
    cs[0] = c0
    w_hh_t = w_hh.transpose(1, 2)  # (S, H, 4H)
    w_cif = peep  # placeholders for TorchScript: every name is bound on every path
    w_co = peep
    if kind == 1:
        w_cif = peep[:, :2].unsqueeze(1)  # (S, 1, 2, H)
        w_co = peep[:, 2].unsqueeze(1)  # (S, 1, H)
    elif kind == 2:
        w_cif = peep[:, :2].reshape(S, 2 * H, H).transpose(1, 2)  # (S, H, 2H)
        w_co = peep[:, 2].transpose(1, 2)  # (S, H, H)
    h = hs[0]
    c = cs[0]
    for t in range(T):
        g = acts[t]  # (S, B, 4H)
        torch.baddbmm(xp[t], h, w_hh_t, out=g)
        g4 = g.view(S, B, 4, H)
        if kind == 1:
            g4[:, :, :2].addcmul_(w_cif, c.unsqueeze(2))
        elif kind == 2:
            g[:, :, : 2 * H].baddbmm_(c, w_cif)
        g4[:, :, :2].sigmoid_()
        g4[:, :, 2].tanh_()
        i, f, gg, o = g4[:, :, 0], g4[:, :, 1], g4[:, :, 2], g4[:, :, 3]  # each (S, B, H)
        c_new = torch.addcmul(f * c, i, gg, out=cs[t + 1])
        if kind == 1:
            o.addcmul_(w_co, c_new)
        elif kind == 2:
            o.baddbmm_(c_new, w_co)
        o.sigmoid_()
        h_new = torch.mul(o, torch.tanh(c_new), out=hs[t + 1])
        if t >= min_len:  # some rows are padding here: they keep the previous state
            m = mask[t]  # (B, 1), broadcast over (S, B, H)
            c_new.copy_(torch.where(m, c_new, c))
            h_new.copy_(torch.where(m, h_new, h))
        h = h_new
        c = c_new
    return hs, cs, acts


def _backward_loop(
    dhs: Tensor,
    dc_last: Tensor,
    mask: Tensor,
    min_len: int,
    hs: Tensor,
    cs: Tensor,
    acts: Tensor,
    w_hh: Tensor,
    peep: Tensor,
    kind: int,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """BPTT through :func:`_forward_loop`: gradients w.r.t. ``xp``, ``h0``, ``c0`` and ``peep``.

    ``dhs`` (T+1, S, B, H) is the gradient of ``hs``, ``dc_last`` (S, B, H) that of ``cs[T]``.
    Writing ``m`` for the mask and ``tc = tanh(c(t))``, one step back is::

        da_o = m dh tc o (1 - o)
        dc~  = m (dc + dh o (1 - tc^2)) + da_o W_co            (c~: the cell before masking)
        da_i = dc~ g i (1 - i),  da_f = dc~ c(t-1) f (1 - f),  da_g = dc~ i (1 - g^2)
        dh(t-1) = da W_hh + (1 - m) dh
        dc(t-1) = dc~ f + da_i W_ci + da_f W_cf + (1 - m) dc

    Everything but ``dh`` and ``dc`` is known before the loop, so the factors are computed for
    all steps at once (for padded rows the stored state stands in for ``c~``; their factors are
    multiplied by ``m = 0``). Weight gradients are summed over steps after the loop.
    """
    T, S, B, G = acts.size(0), acts.size(1), acts.size(2), acts.size(3)
    H = G // 4
    m = mask.view(T, 1, B, 1).to(acts.dtype)
    a4 = acts.view(T, S, B, 4, H)
    i, f, g, o = a4[:, :, :, 0], a4[:, :, :, 1], a4[:, :, :, 2], a4[:, :, :, 3]  # each (T, S, B, H)
    c_prev = cs[:-1]
    tc = torch.tanh(cs[1:])
    a_o = tc * o * (1 - o) * m  # da_o = dh a_o
    b_c = o * (1 - tc * tc) * m  # dc~ = m dc + dh b_c (+ da_o W_co when full)
    c_i = g * i * (1 - i)
    c_f = c_prev * f * (1 - f)
    c_ifg = torch.stack([c_i, c_f, i * (1 - g * g)], 3)  # (T, S, B, 3, H): da_{i,f,g} = dc~ c_ifg
    e_c = f  # dc(t-1) = dc~ e_c (+ da_{i,f} W_c{i,f} when full)
    w_cif = peep
    w_co = peep
    if kind == 1:
        b_c = b_c + a_o * peep[:, 2].unsqueeze(1)
        e_c = f + c_i * peep[:, 0].unsqueeze(1) + c_f * peep[:, 1].unsqueeze(1)
    elif kind == 2:
        w_cif = peep[:, :2].reshape(S, 2 * H, H)  # (S, 2H, H)
        w_co = peep[:, 2]  # (S, H, H)
    nm = 1 - m
    dg = acts.new_empty((T, S, B, 4, H))
    dh = torch.zeros_like(dc_last)
    dc = dc_last
    for t in range(T - 1, -1, -1):
        dh = dh + dhs[t + 1]
        padded = t >= min_len
        if padded:
            dcn = torch.addcmul(dc * m[t], dh, b_c[t])
        else:
            dcn = torch.addcmul(dc, dh, b_c[t])
        da_o = torch.mul(dh, a_o[t], out=dg[t, :, :, 3])
        if kind == 2:
            dcn = dcn.baddbmm(da_o, w_co)
        torch.mul(c_ifg[t], dcn.unsqueeze(2), out=dg[t, :, :, :3])
        dgt = dg[t].view(S, B, G)
        if padded:
            dh = torch.baddbmm(dh * nm[t], dgt, w_hh)
            dc = torch.addcmul(dc * nm[t], dcn, e_c[t])
        else:
            dh = torch.bmm(dgt, w_hh)
            dc = dcn * e_c[t]
        if kind == 2:
            dc = dc.baddbmm(dgt[:, :, : 2 * H], w_cif)
    dh0 = dh + dhs[0]
    dxp = dg.view(T, S, B, G)
    return dxp, dh0, dc, _peephole_grads(dg, c_prev, cs[1:], peep, kind)


def _peephole_grads(dg: Tensor, c_prev: Tensor, c: Tensor, peep: Tensor, kind: int) -> Tensor:
    """The peepholes' gradients summed over steps and batch from the gates' ``dg`` (T, S, B, 4, H):
    ``w_ci`` and ``w_cf`` peep at ``c_prev`` = c(t-1), ``w_co`` at ``c`` = c(t) (T, S, B, H);
    ``peep`` itself where there are none (``kind`` 0)."""
    if kind == 1:
        return torch.stack(
            [
                (dg[:, :, :, 0] * c_prev).sum((0, 2)),
                (dg[:, :, :, 1] * c_prev).sum((0, 2)),
                (dg[:, :, :, 3] * c).sum((0, 2)),
            ],
            1,
        )  # (S, 3, H)
    if kind == 2:
        return torch.stack(
            [
                torch.einsum("tsbo,tsbi->soi", dg[:, :, :, 0], c_prev),
                torch.einsum("tsbo,tsbi->soi", dg[:, :, :, 1], c_prev),
                torch.einsum("tsbo,tsbi->soi", dg[:, :, :, 3], c),
            ],
            1,
        )  # (S, 3, H, H)
    return peep


class _Recurrence(torch.autograd.Function):
    """One layer's recurrence (all directions) as a single autograd node; see the loops."""

    @staticmethod
    def forward(ctx, xp, mask, min_len, h0, c0, w_hh, peep, kind):
        hs, cs, acts = _forward_loop(xp, mask, min_len, h0, c0, w_hh, peep, kind)
        ctx.save_for_backward(mask, hs, cs, acts, w_hh, peep)
        ctx.min_len, ctx.kind = min_len, kind
        return hs, cs[-1].clone()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dhs, dc_last):
        mask, hs, cs, acts, w_hh, peep = ctx.saved_tensors
        dxp, dh0, dc0, dpeep = _backward_loop(
            dhs.contiguous(), dc_last, mask, ctx.min_len, hs, cs, acts, w_hh, peep, ctx.kind
        )
        dw_hh = torch.einsum("tsbg,tsbh->sgh", dxp, hs[:-1])  # (S, 4H, H): sum over steps and batch
        return dxp, None, None, dh0, dc0, dw_hh, (dpeep if ctx.kind else None), None


class PeepholeLSTM(nn.Module):
    """Multi-layer, optionally bidirectional LSTM with peepholes; batch first, masks right padded.

    Parameters per layer ``k`` (S = number of directions, forward first): ``weight_ih_l{k}``
    (S, 4H, D_k), ``weight_hh_l{k}`` (S, 4H, H), ``bias_l{k}`` (S, 4H), gates ordered (i, f, g, o),
    and ``peephole_l{k}``: (S, 3, H) diagonal or (S, 3, H, H) full, rows (w_ci, w_cf, w_co).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        peephole: str | None = "diagonal",
        dropout: float = 0.0,
        fused: bool = True,
    ):
        super().__init__()
        if peephole not in PEEPHOLES:
            raise ValueError(f"peephole must be 'diagonal', 'full' or None, got {peephole!r}")
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bidirectional, self.peephole, self.fused = bidirectional, peephole, fused
        self.num_directions = 2 if bidirectional else 1
        self.dropout_p = dropout
        self.dropout = nn.Dropout(dropout)
        S, H = self.num_directions, hidden_size
        for k in range(num_layers):
            d_in = input_size if k == 0 else H * S
            self.register_parameter(f"weight_ih_l{k}", nn.Parameter(torch.empty(S, 4 * H, d_in)))
            self.register_parameter(f"weight_hh_l{k}", nn.Parameter(torch.empty(S, 4 * H, H)))
            self.register_parameter(f"bias_l{k}", nn.Parameter(torch.empty(S, 4 * H)))
            if peephole is not None:
                shape = (S, 3, H) if peephole == "diagonal" else (S, 3, H, H)
                self.register_parameter(f"peephole_l{k}", nn.Parameter(torch.empty(shape)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        H = self.hidden_size
        for name, p in self.named_parameters():
            if name.startswith("peephole"):
                nn.init.zeros_(p)
            else:
                nn.init.uniform_(p, -bound, bound)
            if name.startswith("bias"):
                with torch.no_grad():
                    p[:, H : 2 * H] = 1.0  # forget gate

    def layer_params(self, k: int) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """``(weight_ih, weight_hh, bias, peephole or None)`` of layer ``k``."""
        peep = getattr(self, f"peephole_l{k}") if self.peephole is not None else None
        return getattr(self, f"weight_ih_l{k}"), getattr(self, f"weight_hh_l{k}"), getattr(self, f"bias_l{k}"), peep

    @torch.no_grad()
    def load_torch_weights(self, lstm: nn.LSTM) -> PeepholeLSTM:
        """Copy the weights of an ``nn.LSTM`` of the same sizes (biases summed); peepholes untouched."""
        if (lstm.input_size, lstm.hidden_size, lstm.num_layers, lstm.bidirectional) != (
            self.input_size,
            self.hidden_size,
            self.num_layers,
            self.bidirectional,
        ):
            raise ValueError(f"nn.LSTM sizes {lstm} do not match {self}")
        if lstm.proj_size:
            raise ValueError("nn.LSTM with proj_size > 0 has no PeepholeLSTM equivalent")
        for k in range(self.num_layers):
            w_ih, w_hh, b, _ = self.layer_params(k)
            for s, suffix in enumerate(["", "_reverse"][: self.num_directions]):
                w_ih[s] = getattr(lstm, f"weight_ih_l{k}{suffix}")
                w_hh[s] = getattr(lstm, f"weight_hh_l{k}{suffix}")
                if lstm.bias:
                    b[s] = getattr(lstm, f"bias_ih_l{k}{suffix}") + getattr(lstm, f"bias_hh_l{k}{suffix}")
                else:
                    b[s] = 0.0
        return self

    @classmethod
    def from_torch(cls, lstm: nn.LSTM, fused: bool = True) -> PeepholeLSTM:
        """A ``peephole=None`` module computing exactly what ``lstm`` computes (batch first)."""
        w = lstm.weight_ih_l0
        module = cls(
            lstm.input_size,
            lstm.hidden_size,
            lstm.num_layers,
            lstm.bidirectional,
            peephole=None,
            dropout=lstm.dropout,
            fused=fused,
        ).to(device=w.device, dtype=w.dtype)
        return module.load_torch_weights(lstm)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        state: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """``x`` (B, T, D); ``mask`` (B, T) bool, True on real tokens, right padded.

        Returns ``out`` (B, T, S*H), zero at padded positions, and ``(h_n, c_n)``, each
        (num_layers*S, B, H): the state after each sequence's last real token (backward
        direction: after reading back to position 0). ``state`` is an optional ``(h_0, c_0)``
        of the same shapes.
        """
        if x.dim() != 3 or x.size(-1) != self.input_size:
            raise ValueError(f"x must be (B, T, {self.input_size}), got {tuple(x.shape)}")
        B, T, _ = x.shape
        S, H, L = self.num_directions, self.hidden_size, self.num_layers
        if mask is not None:
            if mask.shape != (B, T):
                raise ValueError(f"mask must be (B, T) = {(B, T)} like x, got {tuple(mask.shape)}")
            if mask.dtype != torch.bool:
                raise ValueError(f"mask must be bool (True = real token), got {mask.dtype}")
            lengths = mask.sum(1)  # (B,)
            if not torch.equal(mask, torch.arange(T, device=x.device) < lengths.unsqueeze(1)):
                raise ValueError("mask must be right padded: each row's real tokens first")
        else:
            lengths = torch.full((B,), T, dtype=torch.long, device=x.device)
        if state is not None:
            h0, c0 = state
            if h0.shape != (L * S, B, H) or c0.shape != (L * S, B, H):
                raise ValueError(f"state must be two {(L * S, B, H)} tensors, got {tuple(h0.shape)}, {tuple(c0.shape)}")
        else:
            h0 = c0 = x.new_zeros((L * S, B, H), dtype=self.weight_hh_l0.dtype)
        min_len = int(lengths.min()) if B else 0
        if self.peephole is None and self.fused and min_len > 0:
            return self._forward_fused(x, lengths, min_len, h0, c0)
        return self._forward_loops(x, mask, lengths, min_len, h0, c0)

    def _forward_loops(self, x, mask, lengths, min_len, h0, c0):
        B, T, _ = x.shape
        S, H = self.num_directions, self.hidden_size
        kind = PEEPHOLES[self.peephole]
        steps = torch.arange(T, device=x.device)
        mask_t = (steps.unsqueeze(1) < lengths).unsqueeze(-1)  # (T, B, 1)
        if S == 2:
            # position read at step t: t forward, length-1-t backward (padding stays in place)
            rev = torch.where(steps < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - steps, steps)  # (B, T)
            read = torch.stack([steps.expand(B, T), rev], -1)  # (B, T, S); an involution per direction
            s_ix = torch.arange(S, device=x.device)
            b_ix = torch.arange(B, device=x.device)
        h_n, c_n, inp = [], [], x
        for k in range(self.num_layers):
            w_ih, w_hh, b, peep = self.layer_params(k)
            dt = w_hh.dtype  # the recurrence's dtype: the parameters', float32 under autocast
            xp = F.linear(inp, w_ih.reshape(S * 4 * H, -1), b.reshape(S * 4 * H))  # (B, T, S*4H)
            xp = xp.view(B, T, S, 4 * H)  # (B, T, S, 4H)
            if S == 1:
                xp = xp.permute(1, 2, 0, 3)  # (T, 1, B, 4H)
            else:
                xp = xp[
                    b_ix.view(1, 1, B), read.permute(1, 2, 0), s_ix.view(1, S, 1)
                ]  # (T, S, B, 4H), per-length reversal
            with torch.autocast(x.device.type, enabled=False):
                hs, c_last = _Recurrence.apply(
                    xp.to(dt).contiguous(),
                    mask_t,
                    min_len,
                    h0[k * S : (k + 1) * S].to(dt),
                    c0[k * S : (k + 1) * S].to(dt),
                    w_hh,
                    peep if peep is not None else w_hh.new_empty(0),
                    kind,
                )
            if S == 1:
                out = hs[1:, 0].transpose(0, 1)  # (B, T, H)
            else:
                out = hs[1:][read, s_ix, b_ix.view(B, 1, 1)].reshape(B, T, S * H)  # (B, T, S*H), back in order
            if mask is not None:
                out = out * mask.unsqueeze(-1).to(out.dtype)
            h_n.append(hs[T])
            c_n.append(c_last)
            inp = self.dropout(out) if k < self.num_layers - 1 else out
        return inp, (torch.cat(h_n), torch.cat(c_n))

    def _forward_fused(self, x, lengths, min_len, h0, c0):
        """``peephole=None`` through ``torch.lstm`` (the kernels of ``nn.LSTM``), our parameters."""
        B, T, _ = x.shape
        params = []
        for k in range(self.num_layers):
            w_ih, w_hh, b, _ = self.layer_params(k)
            for s in range(self.num_directions):
                params += [w_ih[s], w_hh[s], b[s], torch.zeros_like(b[s])]  # one bias: b_hh = 0
        args = (params, True, self.num_layers, self.dropout_p, self.training, self.bidirectional)
        dtype = h0.dtype
        if x.device.type == "cpu" and torch.is_autocast_enabled("cpu") and not cpu_has_bf16():
            # oneDNN has no bf16 LSTM on a CPU without native bf16 (AVX2): the kernel runs in fp32 there
            with torch.autocast("cpu", enabled=False):
                out, (h_n, c_n) = self._forward_fused(x.float(), lengths, min_len, h0.float(), c0.float())
            return out, (h_n.to(dtype), c_n.to(dtype))
        # under autocast torch.lstm casts its inputs itself, as for nn.LSTM
        if min_len == T:
            out, h_n, c_n = torch.lstm(x, (h0.to(x.dtype), c0.to(x.dtype)), *args, True)
            return out, (h_n.to(dtype), c_n.to(dtype))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        hx = (
            h0.index_select(1, packed.sorted_indices).to(x.dtype),
            c0.index_select(1, packed.sorted_indices).to(x.dtype),
        )
        data, h_n, c_n = torch.lstm(packed.data, packed.batch_sizes, hx, *args)
        out, _ = pad_packed_sequence(
            PackedSequence(data, packed.batch_sizes, packed.sorted_indices, packed.unsorted_indices),
            batch_first=True,
            total_length=T,
        )
        return out, (
            h_n.index_select(1, packed.unsorted_indices).to(dtype),
            c_n.index_select(1, packed.unsorted_indices).to(dtype),
        )

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
            f"bidirectional={self.bidirectional}, peephole={self.peephole!r}, dropout={self.dropout_p}, "
            f"fused={self.fused}"
        )


@torch.no_grad()
def chrono_init_(lstm: PeepholeLSTM, t_max: float) -> PeepholeLSTM:
    """Chrono initialisation (Tallec & Ollivier 2018, "Can recurrent neural networks warp time?"):
    every layer and direction's gate biases set to ``b_f ~ log(U(1, t_max - 1))`` and
    ``b_i = -b_f``, in place.

    A cell's characteristic memory time is ``1 + exp(b_f)`` (module docstring), so the draws give
    times spread over 2 .. ``t_max`` steps, where the default forget bias 1 gives every cell
    about 3.7; ``b_i = -b_f`` keeps a long-memory cell from being overwritten by every input.
    The other biases and all weights keep their initialisation.
    """
    if t_max <= 2:
        raise ValueError(f"chrono initialisation needs t_max > 2, got {t_max}")
    H = lstm.hidden_size
    for k in range(lstm.num_layers):
        bias = getattr(lstm, f"bias_l{k}")  # (S, 4H), gates (i, f, g, o)
        u = torch.rand(bias.shape[0], H, dtype=bias.dtype, device=bias.device)
        b_f = torch.log(1.0 + u * (t_max - 2.0))  # log(U(1, t_max - 1))
        bias[:, H : 2 * H] = b_f
        bias[:, :H] = -b_f
    return lstm
