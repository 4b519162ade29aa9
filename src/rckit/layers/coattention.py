"""The coattention step of DCN (Xiong et al. 2017) and DCN+ (Xiong et al. 2018), with sentinels.

Batch-first, document ``D`` (B, m, h), question ``Q`` (B, n, h). Trainable sentinels ``d_0`` and
``q_0`` are appended at each sequence's real end (position ``len``, not after the padding), so
``D`` has ``m + 1`` and ``Q`` ``n + 1`` columns in the paper's notation. Then

    Q <- tanh(W Q + b)                       (optional; DCN eq. 3, DCN+ E_1^Q, after the sentinel)
    L = D Q^T                                (B, m+1, n+1), the affinity
    A^Q = softmax of L over document positions      each question word attends over D
    A^D = softmax of L over question positions      each document word attends over Q
    S^Q = (A^Q)^T D                          (B, n+1, h)  DCN's C^Q, DCN+'s S^Q
    S^D = A^D Q                              (B, m+1, h)  DCN+'s S^D
    C^D = A^D S^Q                            (B, m+1, h)  DCN+'s C^D

DCN's ``C^D = [Q; C^Q] A^D`` is ``[S^D; C^D]`` here, so both models share this one layer.

Reading of the normalisations: DCN writes ``A^Q = softmax(L)`` "across the document for each
word in the question" and ``C^Q = D A^Q``; for ``C^Q`` to be a weighted sum of document vectors
the softmax must run over document positions, which is what we do (and ``A^D`` over question
positions). For DCN+ we take the paper's ``S^D = E^Q softmax(A^T)``, ``S^Q = E^D softmax(A)``:
``S^D`` sums question vectors for each document word (``E^D softmax(A^T)`` would not type-check).

The outputs are returned at the real positions only: the sentinel column is used inside the
attention (a word may attend to "nothing") and then dropped, and padded positions are zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rckit.layers.masking import masked_softmax, zero_padding


def append_sentinel(x: torch.Tensor, mask: torch.Tensor, sentinel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Put ``sentinel`` (h,) at position ``len`` of every row: (B, T, h) -> (B, T+1, h), mask (B, T+1)."""
    B, T, _ = x.shape
    lengths = mask.sum(1, keepdim=True)  # (B, 1)
    position = torch.arange(T + 1, device=x.device)  # (T+1,)
    at_end = position == lengths  # (B, T+1)
    x = nn.functional.pad(zero_padding(x, mask), (0, 0, 0, 1))  # (B, T+1, h)
    x = x + at_end.unsqueeze(-1).to(x.dtype) * sentinel.to(x.dtype)  # (B, T+1, h)
    return x, position < lengths + 1


@dataclass
class CoattentionOutput:
    S_D: torch.Tensor  # (B, m, h) question summaries for each document word
    S_Q: torch.Tensor  # (B, n, h) document summaries for each question word
    C_D: torch.Tensor  # (B, m, h) second-level document summaries (question side attended twice)
    Q: torch.Tensor  # (B, n, h) the question after the optional projection


class Coattention(nn.Module):
    def __init__(self, dim: int, project_question: bool):
        super().__init__()
        self.d_sentinel = nn.Parameter(torch.randn(dim) * 0.1)
        self.q_sentinel = nn.Parameter(torch.randn(dim) * 0.1)
        self.q_proj = nn.Linear(dim, dim) if project_question else None

    def forward(
        self, D: torch.Tensor, Q: torch.Tensor, d_mask: torch.Tensor, q_mask: torch.Tensor
    ) -> CoattentionOutput:
        """``D`` (B, m, h), ``Q`` (B, n, h), masks True on real tokens; D and Q need not be zero at padding."""
        m, n = D.shape[1], Q.shape[1]
        D0, d_mask0 = append_sentinel(D, d_mask, self.d_sentinel)  # (B, m+1, h), (B, m+1)
        Q0, q_mask0 = append_sentinel(Q, q_mask, self.q_sentinel)  # (B, n+1, h), (B, n+1)
        if self.q_proj is not None:
            Q0 = zero_padding(torch.tanh(self.q_proj(Q0)), q_mask0)  # (B, n+1, h)
        L = torch.bmm(D0, Q0.transpose(1, 2))  # (B, m+1, n+1)
        A_Q = masked_softmax(L, d_mask0.unsqueeze(2), dim=1)  # (B, m+1, n+1), columns sum to 1 over D
        A_D = masked_softmax(L, q_mask0.unsqueeze(1), dim=2)  # (B, m+1, n+1), rows sum to 1 over Q
        S_Q = torch.bmm(A_Q.transpose(1, 2), D0)  # (B, n+1, h)
        S_D = torch.bmm(A_D, Q0)  # (B, m+1, h)
        C_D = torch.bmm(A_D, S_Q)  # (B, m+1, h)
        # Drop the sentinel column: slice to the input length, then zero it (it sat at ``len``).
        return CoattentionOutput(
            S_D=zero_padding(S_D[:, :m], d_mask),
            S_Q=zero_padding(S_Q[:, :n], q_mask),
            C_D=zero_padding(C_D[:, :m], d_mask),
            Q=zero_padding(Q0[:, :n], q_mask),
        )
