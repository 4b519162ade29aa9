"""The training engine every model shares: one loop, read top to bottom.

``train()`` builds the model, optimiser (Adam or RMSProp, with L2), warm-up schedule and EMA, then runs
steps over length-bucketed batches until ``max_steps``, ``time_budget`` or a SIGINT/SIGTERM,
evaluating on a fixed dev subset with the EMA weights swapped in, keeping the best checkpoint
by the task's dev score (F1 for SQuAD, accuracy for cloze) and a ``last.pt`` every
``checkpoint_every`` steps. What is trained on is a task (:mod:`rckit.training.tasks`): its
batches, its loss and its dev metric; a prepared SQuAD directory means the span task.

A stopped run resumes exactly:
the sampler's order is a function of (seed, epoch), the checkpoint records the position in
the epoch and the RNG state, so N steps equal k steps + resume + N - k steps.

Run directory: ``config.json``, ``metrics.jsonl`` (one JSON per log/eval event),
``learning_curve.png``, ``last.pt``, ``best.pt``. A model whose ``loss()`` leaves a dict of
scalar tensors in ``model.loss_terms`` (DCN+: its two loss terms and their learned weights)
gets their means over each logging window in ``metrics.jsonl`` as ``loss_<name>``.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from rckit.config import differences
from rckit.data.batching import BucketBatchSampler
from rckit.evaluation.predict import autocast
from rckit.training.checkpoint import CheckpointError, load_checkpoint, remove_stale_temp_files, save_checkpoint
from rckit.training.distributed import any_true, barrier, init_distributed
from rckit.training.ema import EMA
from rckit.training.tasks import SpanTask


@dataclass
class TrainConfig:
    batch_size: int = 32  # global: split across processes under torchrun
    optimizer: str = "adam"  # "adam" (beta1, beta2, eps) or "rmsprop" (rmsprop_alpha, momentum, eps)
    lr: float = 1e-3
    warmup_steps: int = 1000  # lr = lr * log(step + 1) / log(warmup_steps), then constant
    beta1: float = 0.8
    beta2: float = 0.999
    eps: float = 1e-7
    rmsprop_alpha: float = 0.95  # RMSProp's decay of the squared-gradient average
    momentum: float = 0.9  # RMSProp only
    weight_decay: float = 3e-7  # L2 on every trainable parameter (added to the gradient)
    grad_clip: float = 5.0
    ema_decay: float = 0.9999  # 0: no averaging, evaluation and checkpoints use the raw weights
    max_c_len: int = 400  # training only; evaluation reads every context whole (cloze: document length)
    renumber_entities: bool = True  # cloze: draw the entity numbering afresh for every training batch
    max_q_len: int = 50
    long_contexts: str = "truncate"  # "truncate" (keep if the answer fits) or "drop"
    max_answer_len: int = 30
    eval_every: int = 1000
    eval_questions: int = 2000  # fixed random dev subset for periodic evaluation; 0 = all
    log_every: int = 50
    checkpoint_every: int = 500
    amp: str = "auto"  # "bf16", "fp32" or "auto" (bf16 on CUDA with bf16 support, else fp32)
    seed: int = 0
    pool_batches: int = 50


def warmup_factor(step: int, warmup: int) -> float:
    """Inverse-exponential warm-up (log curve) from 0 to 1 over ``warmup`` steps."""
    if warmup <= 1 or step >= warmup - 1:
        return 1.0
    return math.log(step + 1) / math.log(warmup)


def amp_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    if cfg.amp == "bf16":
        return torch.bfloat16
    if cfg.amp == "fp32":
        return None
    if cfg.amp == "auto":
        return torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else None
    raise ValueError(f"amp must be bf16, fp32 or auto, got {cfg.amp!r}")


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                                weight_decay=cfg.weight_decay)
    if cfg.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=cfg.lr, alpha=cfg.rmsprop_alpha, eps=cfg.eps,
                                   momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    raise ValueError(f"optimizer must be adam or rmsprop, got {cfg.optimizer!r}")


def eval_subset(n: int, k: int, seed: int) -> np.ndarray:
    if k <= 0 or k >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, k, replace=False))


class StopFlag:
    """SIGINT/SIGTERM ask the loop to checkpoint and stop; a second SIGINT interrupts at once."""

    def __init__(self):
        self.requested = False
        self._old = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _rng_state(device: torch.device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _trim_metrics(path: Path, step: int) -> None:
    """Forget log lines a killed run wrote after the checkpoint we resume from."""
    if not path.exists():
        return
    keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln).get("step", 0) <= step]
    path.write_text("".join(ln + "\n" for ln in keep))


def train(
    model_name: str,
    model_cls,
    model_cfg,
    cfg: TrainConfig,
    data,
    run_dir: str | Path,
    max_steps: int | None = None,
    time_budget: float | None = None,
    resume: bool = False,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict:
    """Train and return a summary (steps, best dev score, seconds). See the module docstring.

    ``data``: a task from :mod:`rckit.training.tasks`, or prepared SQuAD data (the span task).
    """
    device = torch.device(device)
    dist = init_distributed(device)
    if dist.enabled and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(device)
    run_dir = Path(run_dir)
    main = dist.is_main
    if cfg.batch_size % dist.world_size:
        raise ValueError(f"batch_size {cfg.batch_size} must divide by the {dist.world_size} processes")
    last_path, best_path, metrics_path = run_dir / "last.pt", run_dir / "best.pt", run_dir / "metrics.jsonl"
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(run_dir)  # left by a checkpoint write that was killed before its rename
        if not resume and last_path.exists():
            raise FileExistsError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --out")

    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    task = data if hasattr(data, "score_key") else SpanTask(data, cfg)
    model = model_cls(model_cfg, task.model_inputs()).to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, cfg)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_factor(s, cfg.warmup_steps))
    ema = EMA(model, cfg.ema_decay)

    rows = task.train_rows
    sampler = BucketBatchSampler(
        task.train_lengths,
        cfg.batch_size // dist.world_size,
        seed=cfg.seed,
        pool_batches=cfg.pool_batches,
        num_replicas=dist.world_size,
        rank=dist.rank,
    )
    dev_rows = eval_subset(task.n_dev, cfg.eval_questions, cfg.seed)

    step = epoch = batch_in_epoch = 0
    elapsed = 0.0
    best_score = -1.0
    if resume:
        if not last_path.exists():
            raise FileNotFoundError(f"--resume: no checkpoint at {last_path}")
        ckpt = load_checkpoint(last_path)
        if ckpt["model_name"] != model_name or ckpt["model_config"] != asdict(model_cfg):
            was = {"model": ckpt["model_name"], **ckpt["model_config"]}
            raise CheckpointError(f"{last_path}: written by a different model or config (checkpoint -> now: "
                                  f"{differences(was, {'model': model_name, **asdict(model_cfg)})}); refusing to "
                                  "resume: give the run's --preset and --set again, or choose another --out")
        task.check_resume(ckpt, last_path)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        ema.load_state_dict(ckpt["ema"])
        step, epoch, batch_in_epoch = ckpt["step"], ckpt["epoch"], ckpt["batch_in_epoch"]
        elapsed, best_score = ckpt["elapsed"], ckpt["best_score"]
        _set_rng_state(ckpt["rng"], device)
        if main:
            _trim_metrics(metrics_path, step)
    if main:
        (run_dir / "config.json").write_text(
            json.dumps({"model": model_name, "model_config": asdict(model_cfg), "train_config": asdict(cfg),
                        "task": task.kind, "data": task.describe()},
                       indent=1)
        )

    find_unused = getattr(model, "find_unused_parameters", False)  # DCN+ experts, QANet per-batch layer drop
    net = DistributedDataParallel(model, broadcast_buffers=False, find_unused_parameters=find_unused) \
        if dist.enabled else model
    dtype = amp_dtype(cfg, device)

    def checkpoint(path: Path) -> None:
        if not main:
            return
        save_checkpoint(
            {
                "model_name": model_name,
                "model_config": asdict(model_cfg),
                "train_config": asdict(cfg),
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "ema": ema.state_dict(),
                "step": step,
                "epoch": epoch,
                "batch_in_epoch": batch_in_epoch,
                "elapsed": elapsed,
                "best_score": best_score,
                "score_key": task.score_key,
                **task.checkpoint_fields(),  # task, vocab, embedding, data
                "rng": _rng_state(device),
            },
            path,
        )

    def log(record: dict) -> None:
        if main:
            with metrics_path.open("a") as fh:
                fh.write(json.dumps(record) + "\n")

    def evaluate() -> dict:
        with ema.swapped_in(model):
            return task.evaluate(model, dev_rows, device, dtype)

    bar = None
    if main and progress:
        from tqdm import tqdm

        bar = tqdm(total=max_steps, initial=step, unit="step", dynamic_ncols=True, file=sys.stderr)
    t_start = time.perf_counter() - elapsed
    window_loss, window_n, window_t, window_terms = 0.0, 0, time.perf_counter(), {}
    stopped_by = "max_steps"
    model.train()
    with StopFlag() as stop:
        done = max_steps is not None and step >= max_steps
        while not done:
            sampler.set_epoch(epoch)
            batches = list(sampler)
            while batch_in_epoch < len(batches):
                ids = rows[batches[batch_in_epoch]]
                batch = task.collate(ids).to(device, non_blocking=True)
                with autocast(device, dtype):
                    out = net(batch)
                loss = task.loss(model, out, batch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                opt.step()
                sched.step()
                ema.update(model)
                step += 1
                batch_in_epoch += 1
                elapsed = time.perf_counter() - t_start
                window_loss += loss.item()
                window_n += len(ids)
                for k, v in getattr(model, "loss_terms", {}).items():  # a model's loss parts and weights
                    window_terms[k] = window_terms.get(k, 0.0) + float(v)

                if step % cfg.log_every == 0:
                    dt = time.perf_counter() - window_t
                    n_steps = cfg.log_every
                    rec = {"step": step, "time": round(elapsed, 2), "loss": window_loss / n_steps,
                           "lr": sched.get_last_lr()[0], "examples_per_s": window_n * dist.world_size / dt,
                           **{f"loss_{k}": v / n_steps for k, v in window_terms.items()}}
                    log(rec)
                    if bar is not None:
                        post = {"loss": f"{rec['loss']:.3f}", "ex/s": f"{rec['examples_per_s']:.1f}"}
                        if time_budget:
                            post["left"] = f"{max(0.0, time_budget - elapsed) / 60:.1f}m"
                        bar.set_postfix(post, refresh=False)
                    window_loss, window_n, window_t, window_terms = 0.0, 0, time.perf_counter(), {}
                if bar is not None:
                    bar.update(1)

                out_of_time = time_budget is not None and elapsed >= time_budget
                finished = max_steps is not None and step >= max_steps
                want_stop = any_true(stop.requested or out_of_time, dist, device)
                if main and (step % cfg.eval_every == 0 or finished or want_stop):
                    t_eval = time.perf_counter()
                    result = evaluate()
                    log({"step": step, "time": round(elapsed, 2), **result})
                    if bar is not None:
                        shown = " ".join(f"{k[4:]} {result[k]:.2f}" for k in task.metric_keys)
                        bar.write(f"step {step}: dev {shown}")
                    if result[task.score_key] > best_score:
                        best_score = result[task.score_key]
                        checkpoint(best_path)
                    plot_learning_curve(metrics_path, run_dir / "learning_curve.png")
                    window_t += time.perf_counter() - t_eval  # keep evaluation out of examples/s
                if step % cfg.checkpoint_every == 0 or finished or want_stop:
                    checkpoint(last_path)
                barrier(dist)
                if finished or want_stop:
                    stopped_by = "max_steps" if finished else ("signal" if stop.requested else "time_budget")
                    done = True
                    break
            else:
                epoch += 1
                batch_in_epoch = 0
    if bar is not None:
        bar.close()
    summary = {"steps": step, "epochs": epoch + batch_in_epoch / max(1, len(sampler)), "seconds": round(elapsed, 1),
               f"best_{task.score_key}": best_score, "stopped_by": stopped_by, "run_dir": str(run_dir)}
    if main:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def plot_learning_curve(metrics_path: Path, out: Path) -> None:
    """Loss and dev scores (EM/F1 or accuracy) against step and against wall-clock time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [json.loads(ln) for ln in metrics_path.read_text().splitlines() if ln.strip()]
    train = [r for r in recs if "loss" in r]
    dev = [r for r in recs if any(k.startswith("dev_") for k in r)]
    # dev_em/dev_f1 for spans, dev_acc for cloze: whichever the run logged.
    keys = [k for k in ("dev_f1", "dev_em", "dev_acc") if any(k in r for r in dev)]
    # A model that logs the weights of its loss terms (DCN+'s mixed objective) gets a third row.
    weights = sorted({k for r in train for k in r if k.startswith("loss_w_")})
    rows = 3 if weights else 2
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.5 * rows), squeeze=False)
    for col, x in enumerate(("step", "time")):
        scale = 60.0 if x == "time" else 1.0
        label = "wall-clock minutes" if x == "time" else "step"
        ax = axes[0, col]
        ax.plot([r[x] / scale for r in train], [r["loss"] for r in train], lw=1)
        ax.set_xlabel(label)
        ax.set_ylabel("training loss")
        ax.grid(alpha=0.3)
        ax = axes[1, col]
        for key, marker in zip(keys, "os^"):
            ax.plot([r[x] / scale for r in dev], [r[key] for r in dev], marker=marker, label=key[4:].upper())
        ax.set_xlabel(label)
        ax.set_ylabel("dev score (subset)")
        ax.grid(alpha=0.3)
        ax.legend()
        if weights:
            ax = axes[2, col]
            for key in weights:
                pts = [(r[x] / scale, r[key]) for r in train if key in r]
                ax.plot(*zip(*pts), lw=1, label=key[len("loss_"):])
            ax.set_xlabel(label)
            ax.set_ylabel("loss-term weight 1/(2 sigma^2)")
            ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.legend()
    fig.suptitle(str(metrics_path.parent.name))
    fig.tight_layout()
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(out)
