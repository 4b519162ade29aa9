"""How DCN+'s two loss terms pull on the model: gradient norms of ``w_ce * L_ce`` and
``w_rl * L_rl`` and the cosine between them, over training batches, at a run's checkpoint.

    python benchmarks/dcn_plus_gradients.py runs/dcn_plus-mixed-40m --data-dir ../shared/data/squad-v1.1

With ``--credit`` the reward term is eq. 16's (``joint``) or the per-pointer variant. Beside the
gradients it prints what the sampled spans are like: their F1 and the greedy span's, the share
drawn with the end before the start (the empty answer), and the share of draws whose start is
the gold start yet gets a negative joint reward (pushed down by eq. 16 for its end's sake).

``w`` are the checkpoint's learned weights 1/(2 sigma^2); for a run trained on cross-entropy
alone both terms are weighted 1 (``--weights 1``). The batches are the first ``--batches``
of the run's training order at its seed (epoch 0), in training mode (dropout, sampled spans).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from rckit.config import from_dict
from rckit.data.batching import BucketBatchSampler
from rckit.data.sources import DataSource, prepare_data
from rckit.model_files.checkpoint import load_checkpoint
from rckit.model_files.runs import checkpoint_of
from rckit.models.dcn import DCNPlus, DCNPlusConfig
from rckit.models.losses import iterative_span_loss, self_critical_loss
from rckit.training.config import TrainConfig
from rckit.training.tasks import SpanTask


def flat_grad(model, loss) -> torch.Tensor:
    grads = torch.autograd.grad(
        loss, [p for p in model.parameters() if p.requires_grad], retain_graph=True, allow_unused=True
    )
    return torch.cat([g.flatten() for g in grads if g is not None])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--weights", choices=["learned", "1"], default="learned")
    ap.add_argument("--credit", choices=["joint", "pointer"], default="joint")
    args = ap.parse_args()
    torch.set_num_threads(1)

    ckpt = load_checkpoint(checkpoint_of(args.run))
    cfg = from_dict(DCNPlusConfig, {**ckpt["model_config"], "mixed_objective": True})
    # Checkpoints written before decoding had its own section kept max_answer_len among the training settings.
    tcfg = from_dict(TrainConfig, {k: v for k, v in ckpt["train_config"].items() if k != "max_answer_len"})
    task = SpanTask(prepare_data(DataSource(data_dir=args.data_dir)), tcfg)
    model = DCNPlus(cfg, task.model_inputs())
    state = ckpt["model"]
    if "log_sigma2_raw" not in state:  # a cross-entropy run: sample spans with its weights, weight both by 1
        state = {**state, "log_sigma2_raw": model.log_sigma2_raw.detach()}
    model.load_state_dict(state)
    model.train()
    torch.manual_seed(0)
    sampler = BucketBatchSampler(task.train_lengths, tcfg.batch_size, seed=tcfg.seed)
    sampler.set_epoch(0)
    reward = task.reward_fn()
    rows = []
    for ids in list(sampler)[: args.batches]:
        batch = task.collate(task.train_rows[ids])
        out = model(batch)
        ce = iterative_span_loss(out, batch.y_start, batch.y_end)
        rl = self_critical_loss(out, batch, reward, args.credit)
        valid = batch.y_start >= 0
        s_hat, e_hat = out.sample.start[valid], out.sample.end[valid]
        f1 = reward(
            batch.index[valid],
            torch.stack([s_hat, out.starts[-1][valid]], 1),
            torch.stack([e_hat, out.ends[-1][valid]], 1),
        )  # (b, 2): sample, greedy
        right_start = s_hat == batch.y_start[valid]
        w = torch.exp(-model.log_sigma2().detach()) / 2 if args.weights == "learned" else torch.ones(2)
        g_ce, g_rl = flat_grad(model, w[0] * ce), flat_grad(model, w[1] * rl)
        rows.append(
            {
                "ce": float(ce.detach()),
                "rl_value": float(rl.detach()),
                "w_ce": float(w[0]),
                "w_rl": float(w[1]),
                "grad_ce": float(g_ce.norm()),
                "grad_rl": float(g_rl.norm()),
                "cosine": float(torch.nn.functional.cosine_similarity(g_ce, g_rl, dim=0)),
                "f1_sample": float(f1[:, 0].mean()),
                "f1_greedy": float(f1[:, 1].mean()),
                "end_before_start": float((e_hat < s_hat).float().mean()),
                "right_start": float(right_start.float().mean()),
                "right_start_pushed_down": float((right_start & (f1[:, 0] < f1[:, 1])).float().mean()),
            }
        )
    mean = {k: round(float(np.mean([r[k] for r in rows])), 4) for k in rows[0]}
    print(
        json.dumps(
            {
                "run": args.run,
                "step": ckpt["step"],
                "credit": args.credit,
                "batches": len(rows),
                **mean,
                "grad_rl_over_ce": round(mean["grad_rl"] / mean["grad_ce"], 4),
            }
        )
    )


if __name__ == "__main__":
    main()
