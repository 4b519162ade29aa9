"""Why a cloze reader sits at ln(candidates) on real data: train it on a cloze directory and
watch its attention, with the copy task and an oracle attention as switches.

Trains one reader (fixed sizes: hidden and attention ``--hidden``, no dropout, Adam) with the
library's model, loss, renumbering and copy task, and prints every ``--every`` steps the
training loss, the accuracy on (a spread subset of) the evaluation split, and where the
attention readers look: the attention mass on the answer's mentions (``s_ans``), on any entity
mention (``s_ent``), and the answer's share of the document's tokens (what uniform attention
would give it).

    --copy-steps K   the copy task for the first K steps (train.copy_steps in the engine)
    --oracle F       mix F of an oracle attention (uniform on the answer's mentions) into the
                     reader's own in training (Attentive Reader only): is the copy path
                     learnable when the attention is right?
    --register-steps K  Deep LSTM Reader, first K steps: at every document position the output
                     head applied to y(t) must name the last entity mentioned up to t (an
                     entity register: write on a mention, hold it, read it out through W(a))
    --register-head  read the register out through its own map M_r instead of the answer's M
                     (W_r(a) = e(a)^T M_r): y(t) can hold the latest entity and the answer apart
    --answer-from S  no answer loss until step S (the auxiliaries alone before it)
    --track-steps K  Deep LSTM Reader, K steps from --answer-from: at every document position
                     from the answer's first mention on, the output head applied to y(t) must name the answer (the
                     answer so far: the final loss, asked at every step after the answer is seen)
    --fixed-numbering  keep each example's entity numbering
    --chrono T       Deep LSTM Reader: model.chrono=T, the chrono initialisation of its cells'
                     gate biases (memories of 2 .. T steps instead of the forget bias 1's ~3.7)
    --flag query|answer  Deep LSTM Reader: add a learned vector to the embedding of every document
                     token whose word occurs in the query (``query``; not padding, unknown or
                     the specials), or of every mention of the answer (``answer``, an
                     oracle): is matching words against the query what the reader cannot find
                     for itself, and can it hold a marked entity to the end of a real document?
                     (a diagnostic; the paper's reader reads embeddings only)
    --flag-steps K   with --flag: flag only the first K training steps, and never in evaluation

    python benchmarks/cloze_probe.py --data runs/cloze-mem/data               (128 questions, train = dev)
    python benchmarks/cloze_probe.py --data runs/cloze-mem/data --oracle 1.0
    python benchmarks/cloze_probe.py --data runs/cloze-mem/data --copy-steps 100
    python benchmarks/cloze_probe.py --data runs/squad-cloze --steps 1200 --every 200 --eval-n 500 --copy-steps 300

Seeded; with ``OMP_NUM_THREADS=1`` the same command prints the same lines on the same machine.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch

import rckit.models.attentive_reader as attentive
from rckit.data.cloze.dataset import load_cloze_data
from rckit.data.cloze.examples import (
    ENTITY_OFFSET,
    PLACEHOLDER_ID,
    copy_targets,
    entity_mentions,
    renumber_entities,
    with_copy_positions,
)
from rckit.models import MODELS
from rckit.models.losses import cloze_loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a cloze directory (train.jsonl + dev.jsonl, ...)")
    ap.add_argument(
        "--model", default="attentive_reader", choices=["deep_lstm_reader", "attentive_reader", "impatient_reader"]
    )
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--max-len", type=int, default=300, help="documents cut to this many tokens")
    ap.add_argument("--eval-n", type=int, default=0, help="evaluate on this many spread questions (0: all)")
    ap.add_argument("--copy-steps", type=int, default=0)
    ap.add_argument("--oracle", type=float, default=0.0)
    ap.add_argument("--register-steps", type=int, default=0)
    ap.add_argument("--register-head", action="store_true")
    ap.add_argument("--track-steps", type=int, default=0)
    ap.add_argument("--track-weight", type=float, default=1.0)
    ap.add_argument("--answer-from", type=int, default=0, help="no answer loss before this step")
    ap.add_argument("--fixed-numbering", action="store_true")
    ap.add_argument("--chrono", type=float, default=0.0)
    ap.add_argument("--flag", choices=["query", "answer"])
    ap.add_argument("--flag-steps", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    data = load_cloze_data(a.data)
    cfg_cls, model_cls = MODELS[a.model]
    sizes = {"hidden": a.hidden, "dropout": 0.0}
    if a.chrono:
        if a.model != "deep_lstm_reader":
            ap.error("--chrono is for the Deep LSTM Reader")
        sizes["chrono"] = a.chrono
    if a.model != "deep_lstm_reader":
        sizes["attention"] = a.hidden
    model = model_cls(cfg_cls(**sizes), data.embedding_info())
    if a.register_head:
        model.register_head = torch.nn.Linear(model.answer.in_features, model.answer.out_features)
    current = {}
    if a.flag_steps and not a.flag:
        ap.error("--flag-steps needs --flag")
    if a.flag:
        if a.model != "deep_lstm_reader":
            ap.error("--flag is for the Deep LSTM Reader")

        class MatchedEmbedding(torch.nn.Module):
            """The model's embedding, plus ``v`` at the flagged document tokens."""

            def __init__(self, embed, dim):
                super().__init__()
                self.inner, self.v = embed, torch.nn.Parameter(torch.randn(dim) * 0.7)

            def forward(self, ids):
                x = self.inner(ids)
                b = current.get("batch")
                if b is None or ids is not b.c_words or current.get("unflagged"):
                    return x
                if a.flag == "answer":
                    flag = b.c_words == (b.answer + ENTITY_OFFSET).unsqueeze(1)  # (B, Td)
                else:
                    q = torch.where(b.q_words > PLACEHOLDER_ID, b.q_words, -1)  # (B, Tq): words, not specials
                    flag = (b.c_words.unsqueeze(2) == q.unsqueeze(1)).any(2) & b.c_mask  # (B, Td)
                return x + flag.unsqueeze(-1).to(x.dtype) * self.v

        model.embed = MatchedEmbedding(model.embed, model.delim.shape[0])
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    gen = torch.Generator().manual_seed(a.seed)

    if a.oracle:
        if a.model != "attentive_reader":
            ap.error("--oracle is for the Attentive Reader")
        own = attentive.attention_weights

        def mixed(m, w_ms, d_mask):  # the reader's attention, with --oracle of it on the answer's mentions
            s = own(m, w_ms, d_mask)
            b = current.get("batch")
            if b is None or not model.training:
                return s
            ans = (b.c_words == (b.answer + ENTITY_OFFSET).unsqueeze(1)).to(s.dtype)
            return (1 - a.oracle) * s + a.oracle * ans / ans.sum(1, keepdim=True).clamp(min=1)

        attentive.attention_weights = mixed

    if a.register_steps or a.track_steps:
        if a.model != "deep_lstm_reader":
            ap.error("--register-steps and --track-steps are for the Deep LSTM Reader")
        read = model.read

        def keep_y(x, mask):
            current["y"] = read(x, mask)
            return current["y"]

        model.read = keep_y

    def doc_outputs(b) -> torch.Tensor:
        """y at the document positions of the joined sequence: (B, Td, G)."""
        y = current["y"]  # (B, T, G) over the joined sequence
        B, Td = b.c_words.shape
        start = b.q_mask.sum(1) + 1 if model.config.form == "qca" else torch.zeros(B, dtype=torch.long)
        pos = (start.unsqueeze(1) + torch.arange(Td)).clamp(max=y.shape[1] - 1)  # (B, Td)
        return y.gather(1, pos.unsqueeze(-1).expand(B, Td, y.shape[-1]))

    def track_loss(b) -> torch.Tensor:
        """Cross-entropy of the answer from y at every document position from its first mention on."""
        y_doc = doc_outputs(b)
        B, Td = b.c_words.shape
        seen = (b.c_words == (b.answer + ENTITY_OFFSET).unsqueeze(1)).cummax(1).values & b.c_mask  # (B, Td)
        e = model.embed(model.entity_ids)
        logits = (model.answer(y_doc) @ e.T).masked_fill(~b.candidates.unsqueeze(1), torch.finfo(y_doc.dtype).min)
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(B * Td, -1).float(), b.answer.repeat_interleave(Td), reduction="none"
        )
        return (ce * seen.reshape(-1)).sum() / seen.sum().clamp(min=1)

    def register_loss(b) -> torch.Tensor:
        """Cross-entropy of the last entity mentioned up to each document position, from y there."""
        y_doc = doc_outputs(b)
        B, Td = b.c_words.shape
        mentions = entity_mentions(b)
        idx = torch.where(mentions, torch.arange(Td).expand(B, Td), torch.full((B, Td), -1))
        last = idx.cummax(1).values  # (B, Td) position of the latest mention, -1 before the first
        valid = (last >= 0) & b.c_mask
        target = torch.where(valid, b.c_words.gather(1, last.clamp(min=0)) - ENTITY_OFFSET, 0)  # (B, Td)
        e = model.embed(model.entity_ids)
        head = model.register_head if a.register_head else model.answer
        logits = (head(y_doc) @ e.T).masked_fill(~b.candidates.unsqueeze(1), torch.finfo(y_doc.dtype).min)
        ce = torch.nn.functional.cross_entropy(logits.reshape(B * Td, -1).float(), target.reshape(-1), reduction="none")
        return (ce * valid.reshape(-1)).sum() / valid.sum().clamp(min=1)

    rows = np.arange(len(data.dev))
    if a.eval_n:
        rows = rows[:: max(1, len(rows) // a.eval_n)]

    def accuracy() -> float:
        model.eval()
        current["unflagged"] = bool(a.flag_steps)
        hits = 0
        with torch.no_grad():
            for i in range(0, len(rows), 100):
                b = data.dev.collate(rows[i : i + 100], a.max_len)
                current["batch"] = b
                hits += int((model(b).logits.argmax(1) == b.answer).sum())
        model.train()
        return 100.0 * hits / len(rows)

    t0, losses = time.perf_counter(), []
    for step in range(1, a.steps + 1):
        b = data.train.collate(torch.randperm(len(data.train), generator=gen)[: a.batch].numpy(), a.max_len)
        if not a.fixed_numbering:
            b = renumber_entities(b, gen)
        if step <= a.copy_steps:
            b = with_copy_positions(b, gen)
        current["batch"] = b
        current["unflagged"] = bool(a.flag_steps) and step > a.flag_steps
        out = model(b)
        loss = (1.0 if step > a.answer_from else 0.0) * cloze_loss(out.logits, b.answer, ~b.answer_cut)
        if b.copy_at is not None:
            target, valid = copy_targets(b)
            loss = loss + cloze_loss(out.copy_logits, target, valid)
        if step <= a.register_steps:
            loss = loss + register_loss(b)
        if a.answer_from < step <= a.answer_from + a.track_steps:
            loss = loss + a.track_weight * track_loss(b)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        losses.append(loss.item())
        if step % a.every:
            continue
        line = f"step {step} loss {np.mean(losses[-a.every :]):.3f} acc {accuracy():.1f}"
        if hasattr(model, "attend"):
            current["batch"] = None  # the reader's own attention, without the oracle
            with torch.no_grad():
                s = model.attend(replace(b, copy_at=None)).s
                if s.dim() == 3:  # the Impatient Reader: the mean over real query steps
                    s = s.sum(1) / b.q_mask.sum(1, keepdim=True)
                ans = b.c_words == (b.answer + ENTITY_OFFSET).unsqueeze(1)
                share = ans.sum(1) / b.c_mask.sum(1)
                line += (
                    f" s_ans {(s * ans).sum(1).mean():.3f} s_ent {(s * entity_mentions(b)).sum(1).mean():.3f}"
                    f" uniform_ans {share.mean():.3f}"
                )
        print(f"{line} t {time.perf_counter() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
