"""Maxout layers (Goodfellow et al. 2013) and a sparse mixture of maxout experts (Shazeer et al. 2017).

:class:`Maxout` computes ``max_j (W x + b)_{:, j}`` over ``pool`` linear pieces per output unit;
the highway maxout networks of DCN's decoder are built from it.

:class:`MixtureOfMaxouts` is the first layer of DCN+'s highway maxout networks. A gate
``g = W_g x`` scores ``n_experts`` experts; each input row goes to its top ``k = 2`` experts only,
their two gate scores are softmaxed (the other experts get weight 0), and the output is the
weighted sum of those two experts' maxout outputs. Only the chosen experts are computed: rows
are gathered per expert, so the cost is ``k`` maxouts a row whatever ``n_experts`` is.

Load balancing: with hard top-k routing an expert that is never chosen gets no gradient and
stays unchosen, and the gate tends to collapse onto a few experts (at initialisation some
experts already receive no row of a batch). Two remedies from Shazeer et al.: in training the
gate scores get Gaussian noise whose per-expert scale ``softplus(W_noise x)`` is learned
(initialised at softplus(0) = 0.69), and we return Shazeer et al.'s
importance term ``CV(importance)^2``, where ``importance_e`` is the sum over (real) rows of
expert ``e``'s gate weight; the caller scales it (``moe_balance``) and adds it to the loss.
Shazeer et al.'s load term (a smooth count, through the noise, of the rows each expert gets) is
not computed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Maxout(nn.Module):
    """``(..., in_dim) -> (..., out_dim)``: the max of ``pool`` affine pieces per output."""

    def __init__(self, in_dim: int, out_dim: int, pool: int):
        super().__init__()
        self.out_dim, self.pool = out_dim, pool
        self.linear = nn.Linear(in_dim, out_dim * pool)

    def pool_max(self, pre: torch.Tensor) -> torch.Tensor:
        """Max over the pieces of pre-activations ``(..., out_dim * pool)``."""
        # max, not amax: the same values, and a backward that scatters to the chosen unit where
        # amax's compares every unit with the maximum (3x the time of DCN's explanation on CPU)
        return pre.unflatten(-1, (self.out_dim, self.pool)).max(-1).values  # (..., out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool_max(self.linear(x))


class MixtureOfMaxouts(nn.Module):
    """Sparse top-``k`` mixture of :class:`Maxout` experts with a learned linear gate."""

    def __init__(self, in_dim: int, out_dim: int, pool: int, n_experts: int, k: int = 2):
        super().__init__()
        if not 1 <= k <= n_experts:
            raise ValueError(f"k={k} must be in [1, n_experts={n_experts}]")
        self.k, self.out_dim = k, out_dim
        self.gate = nn.Linear(in_dim, n_experts)
        self.noise = nn.Linear(in_dim, n_experts)  # per-expert std of the training-time gate noise
        nn.init.zeros_(self.noise.weight)
        nn.init.zeros_(self.noise.bias)
        self.experts = nn.ModuleList(Maxout(in_dim, out_dim, pool) for _ in range(n_experts))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Chosen experts (N, k) long and their weights (N, k), softmax over the chosen k only.

        In training the gate scores get Gaussian noise of learned scale (noisy top-k gating), so
        that every expert keeps being tried; evaluation routes deterministically.
        """
        scores = self.gate(x)  # (N, E)
        if self.training:
            scores = scores + torch.randn_like(scores) * F.softplus(self.noise(x))
        scores, chosen = scores.topk(self.k, dim=-1)  # (N, k)
        return chosen, torch.softmax(scores.float(), dim=-1).to(x.dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` (..., in_dim), ``mask`` (...) bool (rows that count for the balance term).

        Returns the output (..., out_dim) and the balance term ``CV(importance)^2`` (scalar).
        """
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1])  # (N, in)
        chosen, weight = self.route(flat)  # (N, k), (N, k)
        out = flat.new_zeros(flat.shape[0], self.out_dim)  # (N, out)
        for e, expert in enumerate(self.experts):
            row, slot = (chosen == e).nonzero(as_tuple=True)  # (n_e,), (n_e,)
            y = expert(flat[row]) * weight[row, slot].unsqueeze(1)  # (n_e, out)
            out = out.index_add(0, row, y.to(out.dtype))
        # Importance of each expert: its summed gate weight over the real rows.
        gates = torch.zeros(flat.shape[0], len(self.experts), device=x.device, dtype=torch.float32)
        gates = gates.scatter(1, chosen, weight.float())  # (N, E)
        if mask is not None:
            gates = gates * mask.reshape(-1, 1).to(gates.dtype)
        importance = gates.sum(0)  # (E,)
        balance = importance.var(unbiased=False) / importance.mean().square().clamp(min=1e-12)
        return out.view(*lead, self.out_dim), balance
