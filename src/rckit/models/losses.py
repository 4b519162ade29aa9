"""Every loss in rckit: plain functions of a model's logits and a batch, in float32.

- :func:`span_loss`: ``CE(start) + CE(end)`` of the gold token span, or of the null position
  for an unanswerable question (QANet, the Deep LSTM Reader's span head; the default of every
  span model);
- :func:`cloze_loss`: cross-entropy over the candidate entities (the cloze readers), also the
  copy task's;
- :func:`iterative_span_loss`: DCN's cross-entropy summed over its decoder iterations;
- :func:`self_critical_loss` and :func:`uncertainty_weighted`: DCN+'s mixed objective (a
  self-critical policy-gradient term on the F1 reward, and the learned weighting of the two
  terms), :mod:`rckit.models.dcn` explains them.

Examples without a gold answer (``y_start = -1``, or a cloze answer cut out of its document)
are left out of the means; a batch with none left gives a zero that still carries a gradient,
so a training step on it needs no special case.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

REWARD_CREDITS = ("joint", "pointer")  # DCNPlusConfig.reward_credit: how the F1 reward is credited (dcn.py)


def span_loss(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    y_start: torch.Tensor,
    y_end: torch.Tensor,
    start_null: torch.Tensor | None = None,
    end_null: torch.Tensor | None = None,
    answerable: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean over the trainable examples of ``CE(start) + CE(end)``, in float32.

    ``*_logits`` are (B, T) (padded positions already at ``finfo.min``), ``y_*`` (B,) inclusive
    token indices; an example with ``y_start`` or ``y_end`` equal to -1 is left out. With no
    example left the result is a zero that still carries a (zero) gradient, so a training step
    on such a batch needs no special case.

    With the null scores ``start_null``/``end_null`` (B,) (a model that can abstain) the
    softmaxes run over ``[null, tokens]``: an answerable example's targets move one place right,
    and an example with ``answerable`` False targets the null for both pointers (its ``y`` are
    -1), so unanswerable questions train too.
    """
    if start_null is not None:
        start_logits = torch.cat([start_null.unsqueeze(1), start_logits], dim=1)  # (B, 1 + T)
        end_logits = torch.cat([end_null.unsqueeze(1), end_logits], dim=1)
        y_start, y_end = null_targets(y_start, y_end, answerable)
    valid = (y_start >= 0) & (y_end >= 0)  # (B,)
    # Ignored rows are scored against position 0 and then dropped by the where(), with no
    # data-dependent branch (no host sync on GPU). Multiplying by 0 instead could hit inf * 0.
    ce_start = F.cross_entropy(start_logits.float(), y_start.clamp(min=0), reduction="none")  # (B,)
    ce_end = F.cross_entropy(end_logits.float(), y_end.clamp(min=0), reduction="none")  # (B,)
    ce = torch.where(valid, ce_start + ce_end, torch.zeros_like(ce_start))  # (B,)
    return ce.sum() / valid.sum().clamp(min=1)


def null_targets(
    y_start: torch.Tensor, y_end: torch.Tensor, answerable: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Targets over ``[null, tokens]``: an answerable example's move one place right (a -1, a
    span cut from its context, stays -1: left out), an unanswerable one's are the null, 0."""
    unanswerable = ~answerable if answerable is not None else torch.zeros_like(y_start, dtype=torch.bool)
    return (
        torch.where(unanswerable, 0, torch.where(y_start >= 0, y_start + 1, -1)),
        torch.where(unanswerable, 0, torch.where(y_end >= 0, y_end + 1, -1)),
    )


def cloze_loss(logits: torch.Tensor, answer: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the entity classes, in float32 (non-candidates already at finfo.min).

    ``valid`` (B,) bool leaves out examples whose answer was cut out of the document (it is
    then no candidate and its logit sits at finfo.min); a batch with none left gives a zero
    that still has a gradient.
    """
    ce = F.cross_entropy(logits.float(), answer, reduction="none")  # (B,)
    if valid is None:
        return ce.mean()
    return torch.where(valid, ce, torch.zeros_like(ce)).sum() / valid.sum().clamp(min=1)


def iteration_log_probs(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[index]`` in float32: (I, B, m), (I, B) -> (I, B)."""
    return logits.float().log_softmax(-1).gather(2, index.unsqueeze(2)).squeeze(2)


def iterative_span_loss(out, y_start: torch.Tensor, y_end: torch.Tensor) -> torch.Tensor:
    """CE of start and end summed over each example's active iterations, mean over answerable examples."""
    valid = (y_start >= 0) & (y_end >= 0)  # (B,)
    n_iters = out.start_iters.shape[0]
    ys, ye = y_start.clamp(min=0).expand(n_iters, -1), y_end.clamp(min=0).expand(n_iters, -1)  # (I, B)
    ce = -(iteration_log_probs(out.start_iters, ys) + iteration_log_probs(out.end_iters, ye))  # (I, B)
    ce = torch.where(out.active, ce, torch.zeros_like(ce)).sum(0)  # (B,)
    return torch.where(valid, ce, torch.zeros_like(ce)).sum() / valid.sum().clamp(min=1)


def self_critical_loss(out, batch, reward_fn, credit: str = "joint") -> torch.Tensor:
    """Self-critical policy-gradient term and the value of the loss it descends (see rckit.models.dcn).

    ``credit="joint"`` (eq. 16): the gradient is that of ``S = -mean R * log p(sampled trajectory)``,
    R = F1(s^, e^) - F1(s, e) (sample minus greedy); the value is ``V = mean (1 - F1(s^, e^))``.
    ``credit="pointer"``: ``S = -mean [R_s log p(s^..) + R_e log p(e^..)]`` with
    R_s = F1(s^, e) - F1(s, e) and R_e = F1(s, e^) - F1(s, e); the value is
    ``V = mean [(1 - F1(s^, e)) + (1 - F1(s, e^))]``. Means over answerable examples; rewards
    carry no gradient.
    """
    if credit not in REWARD_CREDITS:
        raise ValueError(f"reward_credit must be one of {REWARD_CREDITS}, got {credit!r}")
    valid = (batch.y_start >= 0) & (batch.y_end >= 0)  # (B,)
    n = valid.sum().clamp(min=1)
    s_hat, e_hat, s, e = out.sample.start, out.sample.end, out.starts[-1], out.ends[-1]

    def f1(*spans) -> torch.Tensor:  # (B, len(spans)), no gradient
        with torch.no_grad():
            return reward_fn(
                batch.index, torch.stack([a for a, _ in spans], 1), torch.stack([b for _, b in spans], 1)
            ).to(out.sample.log_prob)

    if credit == "joint":
        r = f1((s_hat, e_hat), (s, e))  # the sampled span, the greedy span
        shortfall = 1.0 - r[:, 0]  # (B,)
        pg = -(r[:, 0] - r[:, 1]) * out.sample.log_prob
    else:
        r = f1((s, e), (s_hat, e), (s, e_hat))  # greedy; the start's draw, the end's draw beside greedy
        shortfall = (1.0 - r[:, 1]) + (1.0 - r[:, 2])
        pg = -(r[:, 1] - r[:, 0]) * out.sample.start_log_prob - (r[:, 2] - r[:, 0]) * out.sample.end_log_prob
    V = torch.where(valid, shortfall, torch.zeros_like(shortfall)).sum() / n
    S = torch.where(valid, pg, torch.zeros_like(pg)).sum() / n
    return V + (S - S.detach())


def uncertainty_weighted(
    ce: torch.Tensor, rl: torch.Tensor, log_sigma2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``ce / (2 sigma_ce^2) + rl / (2 sigma_rl^2) + log sigma_ce^2 + log sigma_rl^2`` and the two weights.

    ``log_sigma2`` (2,) is (log sigma_ce^2, log sigma_rl^2). For fixed term values the minimum
    over ``log_sigma2`` is at ``sigma^2 = value / 2``, i.e. each weight ``1 / (2 sigma^2)`` settles
    at ``1 / value``.
    """
    w = torch.exp(-log_sigma2) / 2  # (2,)
    return ce * w[0] + rl * w[1] + log_sigma2.sum(), w
