"""The training engine every model shares: one loop, read top to bottom.

``train()`` reads in the order a run happens: :func:`set_up` builds the model, optimiser (Adam
or RMSProp, with L2), warm-up schedule, EMA and batch order; :func:`resume_from` puts a stopped
run back where it was (or :func:`init_weights` starts a new run from another run's weights);
then :func:`train_step` runs over length-bucketed batches until ``max_steps``, ``time_budget``
or a SIGINT/SIGTERM (:func:`stop_reason`), and
:func:`evaluate_and_keep_best` scores a fixed dev subset with the EMA weights swapped in,
keeping the best checkpoint by the task's dev score (F1 for SQuAD, accuracy for cloze), beside
a ``last.pt`` every ``checkpoint_every`` steps. What is trained on is a task
(:mod:`rckit.training.tasks`): its batches, its loss and its dev metric; a prepared SQuAD
directory means the span task. Dev answers are decoded with the run's :class:`DecodeConfig`.
The model is a :class:`rckit.models.contract.ReadingModel`: the loop uses its contract and
nothing else (its loss, ``loss_terms``, ``reward_on``, ``cpu_bf16``, ``find_unused_parameters``).

A stopped run resumes exactly:
the sampler's order is a function of (seed, epoch), the checkpoint records the position in
the epoch and the RNG state, so N steps equal k steps + resume + N - k steps.

Run directory: ``config.json`` (model, train and decode settings, task, data),
``metrics.jsonl`` (one JSON per log/eval event), ``learning_curve.png``, ``last.pt``,
``best.pt``, ``summary.json``. The named parts of a loss (DCN+: its two loss terms and their
learned weights, from ``model.loss_terms``; the cloze copy task: answer and copy) are logged as
their means over the steps between two log lines in ``metrics.jsonl``, as ``loss_<name>``.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from rckit.answering.decoding import DecodeConfig
from rckit.config import differences
from rckit.data.batching import BucketBatchSampler
from rckit.device import autocast
from rckit.explain.curves import plot_learning_curve
from rckit.layers.lstm import cpu_has_bf16
from rckit.model_files.checkpoint import CheckpointError, load_checkpoint, remove_stale_temp_files, save_checkpoint
from rckit.model_files.load import load_model
from rckit.models.contract import ReadingModel
from rckit.training.config import TrainConfig
from rckit.training.distributed import DistInfo, barrier, init_distributed, largest
from rckit.training.ema import EMA
from rckit.training.optim import lr_factor, make_optimizer, set_learning_rate
from rckit.training.tasks import ClozeTask, SpanTask

if TYPE_CHECKING:
    from rckit.data.batching import Batch
    from rckit.data.cloze.examples import ClozeBatch
    from rckit.data.prepare import Prepared


def amp_dtype(
    cfg: TrainConfig, device: torch.device, model_cls: type[ReadingModel] = ReadingModel
) -> torch.dtype | None:
    """The autocast dtype of training. ``auto``: bf16 on CUDA with bf16 support; on a CPU with
    native bf16 (:func:`rckit.layers.lstm.cpu_has_bf16`) bf16 for the models whose class says it trains
    faster there (``cpu_bf16``, from the bf16 and fp32 rows of BENCHMARKS.md), else fp32."""
    if cfg.amp == "bf16":
        return torch.bfloat16
    if cfg.amp == "fp32":
        return None
    if cfg.amp == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
        return torch.bfloat16 if device.type == "cpu" and model_cls.cpu_bf16 and cpu_has_bf16() else None
    raise ValueError(f"amp must be bf16, fp32 or auto, got {cfg.amp!r}")


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


# ------------------------------------------------------------------------- what a run is made of


class RunFiles:
    """The run directory's files (see the module docstring)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.last, self.best = self.root / "last.pt", self.root / "best.pt"
        self.metrics, self.curve = self.root / "metrics.jsonl", self.root / "learning_curve.png"
        self.config, self.summary = self.root / "config.json", self.root / "summary.json"


@dataclass
class Run:
    """What a run is, fixed when it starts: its settings, task, files, processes and device."""

    model_name: str
    model_cfg: Any
    cfg: TrainConfig
    decode: DecodeConfig
    task: SpanTask | ClozeTask
    files: RunFiles
    dist: DistInfo
    device: torch.device
    dtype: torch.dtype | None  # autocast dtype, None for fp32
    init_from: dict | None = None  # the checkpoint a new run started from (--init-from), for config.json
    max_steps: int | None = None  # where the run stops (and the decay's horizon, train.decay_share)
    time_budget: float | None = None  # training seconds; with max_steps, the first reached stops the run


@dataclass
class Parts:
    """What set-up builds: the model, what trains it, and the order it reads the data in."""

    model: ReadingModel
    params: list
    opt: torch.optim.Optimizer
    ema: EMA
    sampler: BucketBatchSampler | None  # None: steps on batches chosen elsewhere (rckit bench)
    dev_rows: np.ndarray | None  # the fixed dev subset of periodic evaluation


@dataclass
class RunState:
    """Where the run is: what a checkpoint records so that a resumed run goes on exactly."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    elapsed: float = 0.0  # training seconds, summed over resumes
    best_score: float = -1.0


# ------------------------------------------------------------------------------------ the loop


def train(
    model_name: str,
    model_cls: type[ReadingModel],
    model_cfg: Any,
    cfg: TrainConfig,
    data: Prepared | SpanTask | ClozeTask,
    run_dir: str | Path,
    max_steps: int | None = None,
    time_budget: float | None = None,
    resume: bool = False,
    device: str | torch.device = "cpu",
    progress: bool = True,
    decode: DecodeConfig | None = None,
    init_from: str | Path | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Train and return a summary (steps, best dev score, seconds). See the module docstring.

    ``data``: a task from :mod:`rckit.training.tasks`, or prepared SQuAD data (the span task).
    ``max_steps``, ``time_budget`` (training seconds): the first reached stops the run; saved
    with it, so that ``resume`` with neither given continues with the saved ones.
    ``decode``: how dev answers are decoded; saved with the run (default :class:`DecodeConfig`).
    ``init_from``: a new run starts from the model weights of this checkpoint (another run's
    ``last.pt`` or ``best.pt``), see :func:`init_weights`; the optimiser, schedule and step
    count start afresh. ``clock``: what training time is read from (seconds; tests give one
    that ticks once a step).
    """
    check_settings(cfg, data, init_from, resume)  # before the run directory is made
    dist, device = start_processes(device, cfg)
    files = RunFiles(run_dir)
    if dist.is_main:
        open_run_dir(files, resume)
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    task = data if isinstance(data, (SpanTask, ClozeTask)) else SpanTask(data, cfg)
    run = Run(
        model_name,
        model_cfg,
        cfg,
        decode or DecodeConfig(),
        task,
        files,
        dist,
        device,
        amp_dtype(cfg, device, model_cls),
        max_steps=max_steps,
        time_budget=time_budget,
    )
    parts = set_up(run, model_cls)
    if init_from is not None:
        run.init_from = init_weights(run, parts, init_from)
    elif resume and files.config.exists():  # a resumed run still says where it started
        run.init_from = json.loads(files.config.read_text()).get("init_from")
    state = resume_from(run, parts) if resume else RunState()
    if dist.is_main:
        write_config(run)
        warn_of_a_constant_rate(run)
    bar = progress_bar(run.max_steps, state.step) if progress and dist.is_main else None
    stopped_by = train_until_stopped(run, parts, state, bar, clock)
    if bar is not None:
        bar.close()
    return write_summary(run, state, stopped_by, len(parts.sampler))


def check_settings(
    cfg: TrainConfig, data: Prepared | SpanTask | ClozeTask, init_from: str | Path | None, resume: bool
) -> None:
    """Refuse settings that cannot go together, naming them."""
    if cfg.copy_steps and not isinstance(data, ClozeTask):
        raise ValueError("train.copy_steps is a cloze readers' setting; this is a span run")
    if not 0.0 <= cfg.decay_share <= 1.0:
        raise ValueError(
            f"train.decay_share is the share of the run over which the learning rate decays, "
            f"between 0 and 1; got {cfg.decay_share}"
        )
    if init_from is not None and resume:
        raise ValueError(
            "--init-from starts a new run from another run's weights and --resume continues this one; give one of them"
        )


def warn_of_a_constant_rate(run: Run) -> None:
    """A decay placed on the run's horizon, in a run without one, would never happen: say so."""
    cfg = run.cfg
    if cfg.decay_share > 0 and cfg.decay_steps == 0 and run.max_steps is None and run.time_budget is None:
        print(
            f"rckit train: warning: train.decay_share={cfg.decay_share} places the learning rate's decay on the "
            "run's time budget or max steps, and this run has neither: the rate stays constant (give "
            "--time-budget or --max-steps)",
            file=sys.stderr,
            flush=True,
        )


def train_until_stopped(run: Run, parts: Parts, state: RunState, bar: tqdm | None, clock: Callable[[], float]) -> str:
    """Train from ``state`` until a stop (:func:`stop_reason`): a step, its log line, the
    evaluation and the checkpoint when due. Returns what stopped the run."""
    cfg, task, dist, device = run.cfg, run.task, run.dist, run.device
    net = data_parallel(parts.model, dist)
    sums = StepSums()
    t_start = clock() - state.elapsed
    stopped_by = "max_steps" if run.max_steps is not None and state.step >= run.max_steps else None
    batches = training_batches(parts.sampler, task.train_rows, state)
    parts.model.train()
    with StopFlag() as stop:
        while stopped_by is None:
            ids = next(batches)
            set_phase(run, parts.model, state.step)
            set_learning_rate(parts.opt, learning_rate(run, state))
            batch = task.collate(ids).to(device, non_blocking=True)
            loss, terms = train_step(net, parts, task, batch, cfg, device, run.dtype)
            state.step += 1
            state.batch_in_epoch += 1
            state.elapsed = clock() - t_start
            stopped_by = stop_reason(run, state, stop.requested)  # state.elapsed: the same on every rank
            sums.add(loss.item(), len(ids), terms)
            if state.step % cfg.log_every == 0:
                log_steps(run, sums, state, learning_rate(run, state), bar)
            if bar is not None:
                bar.update(1)
            if dist.is_main and (state.step % cfg.eval_every == 0 or stopped_by):
                t_eval = time.perf_counter()
                evaluate_and_keep_best(run, parts, state, bar)
                sums.t += time.perf_counter() - t_eval  # keep evaluation out of examples/s
            if state.step % cfg.checkpoint_every == 0 or stopped_by:
                checkpoint(run, parts, state, run.files.last)
            barrier(dist)
    return stopped_by


# ------------------------------------------------------------------------ set-up and resume


def start_processes(device: str | torch.device, cfg: TrainConfig) -> tuple[DistInfo, torch.device]:
    """Join the process group under torchrun (one CUDA device per process); check the batch splits."""
    device = torch.device(device)
    dist = init_distributed(device)
    if dist.enabled and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(device)
    if cfg.batch_size % dist.world_size:
        raise ValueError(f"batch_size {cfg.batch_size} must divide by the {dist.world_size} processes")
    return dist, device


def open_run_dir(files: RunFiles, resume: bool) -> None:
    """Create the run directory; refuse one that holds a run unless resuming it."""
    files.root.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(files.root)  # left by a checkpoint write that was killed before its rename
    if not resume and files.last.exists():
        raise FileExistsError(f"{files.root} already holds a run; pass --resume to continue it or choose another --out")


def set_up(run: Run, model_cls: type[ReadingModel]) -> Parts:
    """The model on its device, what trains it (:func:`optimisation`) and the batch order."""
    cfg, dist = run.cfg, run.dist
    run.task.attach_encoder(model_cls.contextual_of(run.model_cfg))  # an encoder's states, cached: maybe an hour
    model = model_cls(run.model_cfg, run.task.model_inputs()).to(run.device)
    run.task.check_model(model)
    sampler = BucketBatchSampler(
        run.task.train_lengths,
        cfg.batch_size // dist.world_size,
        seed=cfg.seed,
        pool_batches=cfg.pool_batches,
        num_replicas=dist.world_size,
        rank=dist.rank,
    )
    dev_rows = eval_subset(run.task.n_dev, cfg.eval_questions, cfg.seed)
    return optimisation(model, cfg, sampler, dev_rows)


def optimisation(
    model: ReadingModel, cfg: TrainConfig, sampler: BucketBatchSampler | None = None, dev_rows: np.ndarray | None = None
) -> Parts:
    """Adam/RMSProp over the trainable parameters and the EMA of ``model`` (the loop sets the
    learning rate before each step, :func:`lr_factor`); ``rckit bench`` times training steps
    with these, without a sampler or dev rows."""
    params = [p for p in model.parameters() if p.requires_grad]
    return Parts(model, params, make_optimizer(params, cfg), EMA(model, cfg.ema_decay), sampler, dev_rows)


def resume_from(run: Run, parts: Parts) -> RunState:
    """Load ``last.pt`` into ``parts``, restore the RNG, forget log lines written after it; say on
    stderr (stdout carries the summary) the step and training time it goes on from."""
    path = run.files.last
    if not path.exists():
        raise FileNotFoundError(f"--resume: no checkpoint at {path}")
    ckpt = load_checkpoint(path)
    # A setting added after the checkpoint was written is absent from it; the run had its default.
    written = {**asdict(type(run.model_cfg)()), **ckpt["model_config"]}
    if ckpt["model_name"] != run.model_name or written != asdict(run.model_cfg):
        was = {"model": ckpt["model_name"], **written}
        raise CheckpointError(
            f"{path}: written by a different model or config (checkpoint -> now: "
            f"{differences(was, {'model': run.model_name, **asdict(run.model_cfg)})}); refusing to "
            "resume: give the run's --preset and --set again, or choose another --out"
        )
    run.task.check_resume(ckpt, path)
    parts.model.load_state_dict(ckpt["model"])
    parts.opt.load_state_dict(ckpt["optimizer"])  # the learning rate is a function of step and time
    parts.ema.load_state_dict(ckpt["ema"])
    saved = ckpt.get("limits") or {}
    if run.max_steps is None and run.time_budget is None:  # --resume alone: the limits it was started with
        run.max_steps, run.time_budget = saved.get("max_steps"), saved.get("time_budget")
    elif run.dist.is_main and saved.get("time_budget") and run.time_budget != saved["time_budget"]:
        print(
            f"--resume: the time budget was {format_duration(saved['time_budget'])}, now "
            f"{format_duration(run.time_budget) if run.time_budget else 'none'}; the learning rate's "
            "decay follows the new one",
            file=sys.stderr,
            flush=True,
        )
    _set_rng_state(ckpt["rng"], run.device)
    if run.dist.is_main:
        _trim_metrics(run.files.metrics, ckpt["step"])
        print(
            f"resuming {run.files.root} from step {ckpt['step']} ({format_duration(ckpt['elapsed'])} of training "
            f"so far)",
            file=sys.stderr,
            flush=True,
        )
    return RunState(ckpt["step"], ckpt["epoch"], ckpt["batch_in_epoch"], ckpt["elapsed"], ckpt["best_score"])


def init_weights(run: Run, parts: Parts, path: str | Path) -> dict:
    """Load the model weights at ``path`` into a new run; return what they were.

    ``path`` is a checkpoint (``last.pt``/``best.pt``, its raw weights) or an exported
    ``.safetensors`` file (its averaged weights), such as the bundled model. Where the data's
    vocabulary differs from theirs, rows of word and character tables are taken by the word or
    character they stand for (:meth:`SpanTask.weights_from`; cloze data must have the same
    vocabulary). Every other tensor must fit a parameter of this model with the same shape;
    parameters the source lacks keep their initialisation and are named on stderr (e.g. DCN+'s
    mixed objective weights, started from a model trained on cross-entropy alone, or the null
    of a model that learns to abstain, started from one trained on SQuAD v1.1). The EMA starts
    from the loaded weights.
    """
    source = weights_at(path)
    own = parts.model.state_dict()
    state, taken = run.task.weights_from(source["model"], source["vocab"], parts.model, path)
    extra = sorted(set(state) - set(own))
    if extra:
        raise CheckpointError(
            f"{path}: --init-from holds weights this {run.model_name} model has no place for: "
            f"{', '.join(extra[:8])}{' ...' if len(extra) > 8 else ''}"
        )
    for name, t in state.items():
        if t.shape != own[name].shape:
            raise CheckpointError(
                f"{path}: --init-from: {name} is {tuple(t.shape)} there and {tuple(own[name].shape)} "
                f"in this model (model config: "
                f"{differences(source['model_config'], asdict(run.model_cfg))})"
            )
    missing = sorted(set(own) - set(state))
    parts.model.load_state_dict(state, strict=False)
    parts.ema = EMA(parts.model, run.cfg.ema_decay)
    if run.dist.is_main:
        mapped = "; ".join(
            f"{name}: {t['taken']:,} of {t['rows']:,} rows taken by word or character" for name, t in taken.items()
        )
        print(
            f"starting from the weights of {path} ({source['model_name']}, step {source['step']})"
            + (f"; its vocabulary differs ({mapped})" if taken else "")
            + (f"; kept at their initialisation: {', '.join(missing)}" if missing else ""),
            file=sys.stderr,
            flush=True,
        )
    return {
        "path": str(path),
        "model": source["model_name"],
        "step": source["step"],
        "initialised": missing,
        **({"rows_taken": taken} if taken else {}),
    }


def weights_at(path: str | Path) -> dict:
    """``model`` (state dict), ``vocab``, ``model_name``, ``model_config`` and ``step`` of a
    checkpoint (its raw weights) or an exported ``.safetensors`` file (its one set)."""
    model, _, meta = load_model(path, ema=False)
    return {
        "model": model.state_dict(),
        "vocab": meta["vocab"],
        "model_name": meta["model"],
        "model_config": meta["model_config"],
        "step": meta["step"],
    }


def format_duration(seconds: float) -> str:
    """``12.3s``, ``4m05s``, ``2h03m``: elapsed training time as a person reads it."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m{int(seconds % 60):02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def data_parallel(model: ReadingModel, dist: DistInfo) -> torch.nn.Module:
    """``model`` wrapped in DistributedDataParallel under torchrun, else itself."""
    if not dist.enabled:
        return model
    return DistributedDataParallel(model, broadcast_buffers=False, find_unused_parameters=model.find_unused_parameters)


def write_config(run: Run) -> None:
    run.files.config.write_text(
        json.dumps(
            {
                "model": run.model_name,
                "model_config": asdict(run.model_cfg),
                "train_config": asdict(run.cfg),
                "decode": asdict(run.decode),
                "task": run.task.kind,
                "data": run.task.describe(),
                "limits": {"max_steps": run.max_steps, "time_budget": run.time_budget},
                **({"init_from": run.init_from} if run.init_from else {}),
            },
            indent=1,
        )
    )


# ------------------------------------------------------------------------------- one step


def training_batches(sampler: BucketBatchSampler, rows: np.ndarray, state: RunState) -> Iterator[np.ndarray]:
    """Training rows, batch after batch and epoch after epoch, from ``state``'s place in the epoch.

    The caller counts ``state.batch_in_epoch`` up after each batch; the order of an epoch is a
    function of (seed, epoch), so a resumed run reads the batches the stopped one would have.
    """
    while True:
        sampler.set_epoch(state.epoch)
        order = list(sampler)
        while state.batch_in_epoch < len(order):
            yield rows[order[state.batch_in_epoch]]
        state.epoch += 1
        state.batch_in_epoch = 0


def set_phase(run: Run, model: ReadingModel, step: int) -> None:
    """The switches that depend on the step: a reward term (DCN+'s mixed objective) from
    ``reward_from``, the cloze copy task before ``copy_steps``."""
    model.reward_on = step >= run.cfg.reward_from
    run.task.copy_on = step < run.cfg.copy_steps


def train_step(
    net: torch.nn.Module,
    parts: Parts,
    task: SpanTask | ClozeTask,
    batch: Batch | ClozeBatch,
    cfg: TrainConfig,
    device: torch.device,
    dtype: torch.dtype | None,
) -> tuple[torch.Tensor, dict]:
    """Forward under autocast, the task's loss, backward, clip, optimiser step, EMA (the loop has
    set the learning rate).

    ``net`` is ``parts.model`` or its DistributedDataParallel wrapper. Returns the loss and its
    named parts (detached), for the log."""
    with autocast(device, dtype):
        out = net(batch)
    loss, terms = task.loss(parts.model, out, batch)
    parts.opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parts.params, cfg.grad_clip)
    parts.opt.step()
    parts.ema.update(parts.model)
    return loss, terms


def stop_reason(run: Run, state: RunState, signalled: bool) -> str | None:
    """``max_steps``, ``signal`` or ``time_budget`` if the run stops after this step, else None.

    Every process asks at every step, in one collective: a signal seen by one stops them all
    together, and ``state.elapsed`` becomes the largest of the processes' clocks, so that all of
    them stop at the same step and set the same learning rate (:func:`learning_rate`).
    """
    signal_any, state.elapsed = largest([float(signalled), state.elapsed], run.dist, run.device)
    out_of_time = run.time_budget is not None and state.elapsed >= run.time_budget
    if run.max_steps is not None and state.step >= run.max_steps:
        return "max_steps"
    if signal_any:
        return "signal"
    if out_of_time:
        return "time_budget"
    return None


def learning_rate(run: Run, state: RunState) -> float:
    """The rate of the next optimiser step: ``lr`` times :func:`lr_factor` at ``state``."""
    return run.cfg.lr * lr_factor(state.step, run.cfg, state.elapsed, run.time_budget, run.max_steps)


# ------------------------------------------------------------- logging, evaluation, checkpoints


class StepSums:
    """Sums over the steps since the last log line: steps, loss, examples, a model's loss terms, time."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.steps, self.loss, self.n, self.t, self.terms, self.counts = 0, 0.0, 0, time.perf_counter(), {}, {}

    def add(self, loss: float, n: int, terms: dict) -> None:
        self.steps += 1
        self.loss += loss
        self.n += n
        for k, v in terms.items():  # a model's loss parts and weights, on the steps that have them
            self.terms[k] = self.terms.get(k, 0.0) + float(v)
            self.counts[k] = self.counts.get(k, 0) + 1


def log(run: Run, record: dict) -> None:
    if run.dist.is_main:
        with run.files.metrics.open("a") as fh:
            fh.write(json.dumps(record) + "\n")


def log_steps(run: Run, sums: StepSums, state: RunState, lr: float, bar: tqdm | None) -> None:
    """One ``metrics.jsonl`` line of means over the steps since the last one (and the bar's postfix); the sums
    start again."""
    n_steps = max(sums.steps, 1)  # log_every, but fewer where a resumed run starts between two lines
    rec = {
        "step": state.step,
        "time": round(state.elapsed, 2),
        "loss": sums.loss / n_steps,
        "lr": lr,
        "examples_per_s": sums.n * run.dist.world_size / (time.perf_counter() - sums.t),
        **{f"loss_{k}": v / sums.counts[k] for k, v in sums.terms.items()},
    }
    log(run, rec)
    if bar is not None:
        post = {"loss": f"{rec['loss']:.3f}", "ex/s": f"{rec['examples_per_s']:.1f}"}
        if run.time_budget:
            post["left"] = f"{max(0.0, run.time_budget - state.elapsed) / 60:.1f}m"
        bar.set_postfix(post, refresh=False)
    sums.reset()


def evaluate_and_keep_best(run: Run, parts: Parts, state: RunState, bar: tqdm | None) -> dict:
    """Dev metrics with the EMA weights swapped in, logged; ``best.pt`` when the score improves."""
    with parts.ema.swapped_in(parts.model):
        result = run.task.evaluate(parts.model, parts.dev_rows, run.device, run.dtype, run.decode)
    log(run, {"step": state.step, "time": round(state.elapsed, 2), **result})
    if bar is not None:
        shown = " ".join(f"{k[4:]} {result[k]:.2f}" for k in run.task.metric_keys)
        bar.write(f"step {state.step}: dev {shown}")
    if "no_answer_threshold" in result:  # chosen on the dev (tuning) file: decoding follows it
        run.decode = replace(run.decode, no_answer_threshold=result["no_answer_threshold"])
    if result[run.task.score_key] > state.best_score:
        state.best_score = result[run.task.score_key]
        checkpoint(run, parts, state, run.files.best)
    plot_learning_curve(run.files.metrics, run.files.curve)
    return result


def checkpoint(run: Run, parts: Parts, state: RunState, path: Path) -> None:
    """The run in one dict (:mod:`rckit.model_files.checkpoint`), written by the main process only."""
    if not run.dist.is_main:
        return
    save_checkpoint(
        {
            "model_name": run.model_name,
            "model_config": asdict(run.model_cfg),
            "train_config": asdict(run.cfg),
            "decode": asdict(run.decode),
            "model": parts.model.state_dict(),
            "optimizer": parts.opt.state_dict(),
            "limits": {"max_steps": run.max_steps, "time_budget": run.time_budget},
            "ema": parts.ema.state_dict(),
            "step": state.step,
            "epoch": state.epoch,
            "batch_in_epoch": state.batch_in_epoch,
            "elapsed": state.elapsed,
            "best_score": state.best_score,
            "score_key": run.task.score_key,
            **run.task.checkpoint_fields(),  # task, vocab, embedding, data
            "rng": _rng_state(run.device),
        },
        path,
    )


def progress_bar(max_steps: int | None, initial: int) -> tqdm:
    return tqdm(total=max_steps, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr)


def write_summary(run: Run, state: RunState, stopped_by: str, batches_per_epoch: int) -> dict:
    summary = {
        "steps": state.step,
        "epochs": state.epoch + state.batch_in_epoch / max(1, batches_per_epoch),
        "seconds": round(state.elapsed, 1),
        f"best_{run.task.score_key}": state.best_score,
        "stopped_by": stopped_by,
        "run_dir": str(run.files.root),
    }
    if run.dist.is_main:
        run.files.summary.write_text(json.dumps(summary, indent=1))
    return summary
