"""What each QANet CPU optimisation is worth: ``rckit bench`` numbers for a list of variants.

    python benchmarks/qanet_ablation.py --data-dir ../shared/data/squad-v1.1

Every variant runs ``rckit bench qanet --preset paper [--amp bf16] [--set ...]`` itself
(training examples/s at batch 32 with contexts cut at 400 tokens, inference examples/s at
batch 32 on whole contexts, single-question latency, peak RSS) in a fresh subprocess, so each
peak RSS is that variant's own. The ``before`` variant puts back the implementations this work replaced
(they are kept below, verbatim in behaviour): the dense char CNN over all 16 char slots,
``F.dropout`` (one Bernoulli draw per element), the conv with a transposed 1x1 conv, padding
zeroed with ``masked_fill``, sinusoids recomputed by every block, SDPA in bf16 under autocast,
the depthwise conv as oneDNN's grouped conv on transposed (B, C, T) tensors, padding products
and attention masks even where nothing is padded. ``round 1`` puts back only the round-2
changes (the fp32 depthwise conv, the no-padding path, autograd through the fp32 SDPA in
place of ``Fp32Attention``) and the round-3 ones, i.e. the code as the first round of CPU work
left it (with round 4 put back too). (Round 2 also tried one char conv over a zero-separated sequence; it was reverted,
BENCHMARKS.md.) ``round 2`` puts back the round-3 changes: the depthwise conv through oneDNN's
NHWC 2-D kernel (``nhwc_conv``; round 2 had shifted adds in fp32 and the 1-D grouped conv
under autocast), the char CNN's products-first matmul (``char_products``; round 2 unfolded
(R, k, Dc) patches), and the round-4 ones. ``round 3`` puts back the round-4 changes: the
attention function that took q, k, v apart and kept its fp32 output for backward
(``round3_attention``), the ReLU that kept its output for backward (``relu_mask``), and 4 KiB
pages (huge pages off, ``-huge_pages``). ``+heap_limit`` runs ``rckit bench --heap-limit-mb 2`` (memory.py).
``-X`` rows put back only ``X`` (what removing that one optimisation costs); ``+X`` rows add
an option that is off by default; ``malloc-tuned`` rows run with glibc's mmap/trim thresholds
raised (an environment setting, not a code change). ``--variants`` picks rows, ``--repeat`` repeats each (this
machine is shared: compare medians, check ``uptime``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# Runs in the child: apply the patches named in argv[2], then run `rckit bench` itself.
CHILD = r"""
import json, sys
import torch
import torch.nn.functional as F

data_dir, spec = sys.argv[1], json.loads(sys.argv[2])
if spec["threads"]:
    torch.set_num_threads(spec["threads"])

import rckit.layers.attention as attention
import rckit.layers.conv as conv_mod
import rckit.layers.dropout as dropout_mod
import rckit.layers.embedding as embedding
import rckit.models.qanet as qanet


def dense_char_cnn(self, chars):  # the char CNN as it was: every one of the W char slots
    B, T, W = chars.shape
    char_mask = (chars != 0).reshape(B * T, 1, W)  # (B*T, 1, W)
    x = self.dropout(self.embed(chars)).reshape(B * T, W, -1)  # (B*T, W, Dc)
    x = x.transpose(1, 2).masked_fill(~char_mask, 0.0)  # (B*T, Dc, W)
    x = torch.relu(self.conv(x))  # (B*T, C, W)
    x = x.masked_fill(~char_mask, 0.0).amax(dim=2)  # (B*T, C)
    return x.view(B, T, -1)  # (B, T, C)


def bernoulli_dropout(x, p, training=True):
    return F.dropout(x, p, training)


def bernoulli_residual(self, x, y, survival, per_example):  # the residual as it was
    y = F.dropout(y, self.p, self.training)
    if self.training and survival < 1.0:
        if per_example:
            keep = torch.rand(x.shape[0], 1, 1, device=x.device) < survival  # (B, 1, 1)
            y = y * keep.to(y.dtype)
        y = y / survival
    return x + y


def masked_fill_padding(x, mask):
    return x.masked_fill(~mask.unsqueeze(-1), 0.0)


def uncached_pe(T, d, device, dtype):
    return qanet._sinusoids.__wrapped__(T, d, torch.device(device), dtype)


def bf16_attention(self, x, mask):  # SDPA in the autocast dtype
    B, T, d = x.shape
    H = self.n_heads
    q, k, v = self.qkv(x).view(B, T, 3, H, d // H).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, H, T, d_h)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])  # (B, H, T, d_h)
    return self.out(y.transpose(1, 2).reshape(B, T, d))  # (B, T, d)


def grouped_conv_forward(self, x):  # the conv as it was: oneDNN's grouped conv on (B, C, T)
    x = self.pointwise(self.depthwise(x.transpose(1, 2)))  # (B, C_out, T)
    return x.transpose(1, 2)


def round2_taps(x, weight):  # round 2's depthwise conv: k shifted multiply-adds on (B, T, C)
    k, T = weight.shape[-1], x.shape[1]
    taps = weight[:, 0, :].t().to(x.dtype)  # (k, C)
    xp = F.pad(x, (0, 0, k // 2, k // 2))  # (B, T + k - 1, C)
    y = xp[:, :T] * taps[0]
    for j in range(1, k):
        y.addcmul_(xp[:, j:j + T], taps[j])
    return y


class Round2Taps(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return round2_taps(x, weight)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        k, T = weight.shape[-1], x.shape[1]
        grad_x = round2_taps(grad, weight.flip(-1))
        xp = F.pad(x, (0, 0, k // 2, k // 2))
        gw = torch.stack([(grad * xp[:, j:j + T]).sum((0, 1)) for j in range(k)])  # (k, C)
        return grad_x, gw.t().unsqueeze(1).to(weight.dtype)


def round2_conv_forward(self, x):  # round 2: shifted adds in fp32 on CPU, else oneDNN's 1-D grouped conv
    if x.device.type != "cpu" or torch.is_autocast_enabled("cpu") or x.dtype != torch.float32:
        return grouped_conv_forward(self, x)
    y = Round2Taps.apply(x, self.depthwise.weight)
    return F.linear(y, self.pointwise.weight[:, :, 0], self.pointwise.bias)


def round2_char_cnn(self, chars):  # round 2's char CNN: unfolded (R, k, Dc) patches, one matmul
    B, T, W = chars.shape
    C, _, k = self.conv.weight.shape
    h = k // 2
    flat = chars.reshape(B * T, W)
    real = flat != 0
    span = (real.cumsum(1) > 0) & (real.flip(1).cumsum(1).flip(1) > 0)
    word, pos = span.nonzero(as_tuple=True)
    R = word.shape[0]
    if R == 0:
        return self.conv.weight.new_zeros(B, T, C)
    ids = flat[word, pos]
    is_real = (ids != 0).unsqueeze(1)
    x = self.dropout(self.embed(ids)) * is_real
    if torch.is_autocast_enabled(x.device.type):
        x = x.to(torch.get_autocast_dtype(x.device.type))
    nb_word = F.pad(word, (h, h), value=-1).unfold(0, k, 1)
    same_word = (nb_word == word.unsqueeze(1)).unsqueeze(2)
    patches = F.pad(x, (0, 0, h, h)).unfold(0, k, 1).transpose(1, 2) * same_word  # (R, k, Dc)
    weight = self.conv.weight.permute(0, 2, 1).reshape(C, -1)
    y = torch.relu(F.linear(patches.reshape(R, -1), weight, self.conv.bias)) * is_real
    out = y.new_zeros(B * T, C).index_reduce(0, word, y, "amax")
    return out.view(B, T, C)


class Round3Attention(torch.autograd.Function):  # round 3: separate q, k, v; the fp32 output kept for backward
    @staticmethod
    def forward(ctx, q, k, v, bias):
        out, lse = attention._CPU_FLASH(q.float(), k.float(), v.float(), attn_mask=bias)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, bias, out, lse = ctx.saved_tensors
        gq, gk, gv = attention._CPU_FLASH_BACKWARD(grad.float().contiguous(), q.float(), k.float(), v.float(), out,
                                                   lse, 0.0, False, attn_mask=bias)
        return gq.to(q.dtype), gk.to(k.dtype), gv.to(v.dtype), None


round4_attention = attention.MultiHeadSelfAttention.forward


def round3_attention(self, x, mask):
    if not (torch.is_grad_enabled() and torch.is_autocast_enabled("cpu") and attention._CPU_FLASH is not None):
        return round4_attention(self, x, mask)
    B, T, d = x.shape
    q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4).unbind(0)
    bias = None if mask is None else attention._additive(mask[:, None, None, :])
    y = Round3Attention.apply(q, k, v, bias)  # (B, H, T, d_h)
    return self.out(y.transpose(1, 2).reshape(B, T, d))


fused_residual = qanet.EncoderBlock.residual


def relu_apart(self, x, y, survival, per_example, relu=False):  # round 3: the ReLU's output kept for backward
    return fused_residual(self, x, torch.relu(y) if relu else y, survival, per_example)


PATCHES = {
    "round3_attention": lambda: setattr(attention.MultiHeadSelfAttention, "forward", round3_attention),
    "relu_mask": lambda: setattr(qanet.EncoderBlock, "residual", relu_apart),
    "attention_fn": lambda: setattr(attention, "_CPU_FLASH", None),
    "dw_conv": lambda: setattr(conv_mod.DepthwiseSeparableConv1d, "forward", grouped_conv_forward),
    "unpadded": lambda: setattr(qanet, "padding_mask", lambda mask: mask),
    "char_cnn": lambda: setattr(embedding.CharCNN, "forward", dense_char_cnn),
    "dropout": lambda: (setattr(dropout_mod, "dropout", bernoulli_dropout),
                        setattr(qanet.EncoderBlock, "residual", bernoulli_residual)),
    "padding": lambda: setattr(qanet, "zero_padding", masked_fill_padding),
    "pe_cache": lambda: setattr(qanet, "positional_encoding", uncached_pe),
    "fp32_attention": lambda: setattr(attention.MultiHeadSelfAttention, "forward", bf16_attention),
    "nhwc_conv": lambda: setattr(conv_mod.DepthwiseSeparableConv1d, "forward", round2_conv_forward),
    "char_products": lambda: setattr(embedding.CharCNN, "forward", round2_char_cnn),
}
for name in spec["undo"]:
    PATCHES[name]()

from rckit.cli import main

argv = ["bench", "qanet", "--preset", "paper", "--data-dir", data_dir, "--amp", spec["amp"], "--json",
        "--steps", str(spec["steps"]), "--questions", str(spec["questions"])]
for override in spec["set"]:
    argv += ["--set", override]
argv += spec["extra"]
main(argv)  # prints the bench result as one JSON line
"""

ALL_UNDO = ["char_cnn", "dropout", "padding", "pe_cache", "fp32_attention", "dw_conv", "unpadded"]
ROUND_2 = ["dw_conv", "unpadded", "attention_fn"]  # the second round of CPU work (BENCHMARKS.md)
ROUND_3 = ["nhwc_conv", "char_products"]  # the third
ROUND_4 = ["round3_attention", "relu_mask"]  # the fourth, with huge pages off (NO_THP)
ROUND_1 = ROUND_2 + ["char_products"]  # "dw_conv" already puts back round 1's conv


# glibc serves blocks above its mmap threshold (at most 32 MB unless set) with fresh pages,
# so every large temporary page-faults; these keep them in the reusable heap instead.
MALLOC_TUNED = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**34)}


def variant(undo=(), set_=(), amp="fp32", threads=0, env=None, extra=()):
    return {"undo": list(undo), "set": list(set_), "amp": amp, "threads": threads, "env": env or {},
            "extra": list(extra)}


# `rckit` turns huge pages on before importing torch (memory.use_huge_pages); the child imports
# torch first, so run() sets the variable for it, and these rows turn it off.
NO_THP = {"THP_MEM_ALLOC_ENABLE": "0"}
HEAP = ["--heap-limit-mb", "2"]  # rckit bench's own option (memory.py), off by default


BATCH, CKPT = "model.layer_dropout=batch", "model.checkpoint_blocks=true"
VARIANTS = {
    "before": variant(ALL_UNDO),
    "after": variant(),
    "round 3": variant(ROUND_4, env=NO_THP),
    "round 3 bf16": variant(ROUND_4, amp="bf16", env=NO_THP),
    "-huge_pages": variant(env=NO_THP),
    "-huge_pages bf16": variant(amp="bf16", env=NO_THP),
    "-round3_attention bf16": variant(["round3_attention"], amp="bf16"),
    "-relu_mask bf16": variant(["relu_mask"], amp="bf16"),
    "round 2": variant(ROUND_3 + ROUND_4, env=NO_THP),
    "round 2 bf16": variant(ROUND_3 + ROUND_4, amp="bf16", env=NO_THP),
    "-nhwc_conv": variant(["nhwc_conv"]),
    "-nhwc_conv bf16": variant(["nhwc_conv"], amp="bf16"),
    "-char_products bf16": variant(["char_products"], amp="bf16"),
    "+heap_limit": variant(extra=HEAP),
    "+heap_limit bf16": variant(amp="bf16", extra=HEAP),
    "round 1": variant(ROUND_1 + ROUND_4, env=NO_THP),
    "round 1 bf16": variant(ROUND_1 + ROUND_4, amp="bf16", env=NO_THP),
    "-dw_conv": variant(["dw_conv"]),
    "-dw_conv bf16": variant(["dw_conv"], amp="bf16"),
    "-unpadded": variant(["unpadded"]),
    "-attention_fn bf16": variant(["attention_fn"], amp="bf16"),
    "-char_cnn": variant(["char_cnn"]),
    "-dropout": variant(["dropout"]),
    "-padding": variant(["padding"]),
    "-pe_cache": variant(["pe_cache"]),
    "+layer_dropout=batch": variant(set_=[BATCH]),
    "+checkpoint_blocks": variant(set_=[CKPT]),
    "before bf16": variant(ALL_UNDO, amp="bf16"),
    "after bf16": variant(amp="bf16"),
    "-fp32_attention bf16": variant(["fp32_attention"], amp="bf16"),
    "+layer_dropout=batch bf16": variant(set_=[BATCH], amp="bf16"),
    "+checkpoint_blocks bf16": variant(set_=[CKPT], amp="bf16"),
    "after 1 thread": variant(threads=1),
    "after malloc-tuned": variant(env=MALLOC_TUNED),
    "after bf16 malloc-tuned": variant(amp="bf16", env=MALLOC_TUNED),
    "+batch +ckpt bf16": variant(set_=[BATCH, CKPT], amp="bf16"),
    "+batch bf16 malloc-tuned": variant(set_=[BATCH], amp="bf16", env=MALLOC_TUNED),
    "+batch +ckpt bf16 malloc-tuned": variant(set_=[BATCH, CKPT], amp="bf16", env=MALLOC_TUNED),
    "+batch +ckpt malloc-tuned": variant(set_=[BATCH, CKPT], env=MALLOC_TUNED),
}

COLUMNS = [("train_examples_per_s", "train ex/s"), ("train_first_pass_examples_per_s", "1st pass"), ("inference_examples_per_s", "infer ex/s"),
           ("latency_ms_median", "lat ms"), ("latency_ms_p90", "p90 ms"), ("peak_rss_mb", "peak MB")]


def run(name: str, spec: dict, args) -> dict:
    spec = {**spec, "steps": args.steps, "questions": args.questions}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", CHILD, args.data_dir, json.dumps(spec)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONWARNINGS": "ignore", "THP_MEM_ALLOC_ENABLE": "1", **spec["env"]})
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"variant {name!r} failed:\n{p.stderr[-3000:]}")
    res = json.loads(lines[-1])
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["load"] = round(os.getloadavg()[0], 2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default="../shared/data/squad-v1.1")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from: {', '.join(VARIANTS)}")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps (as rckit bench)")
    ap.add_argument("--questions", type=int, default=1024, help="size of the dev slice (as rckit bench)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", help="also write every run to this file")
    args = ap.parse_args()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {list(VARIANTS)}")

    print(f"{'variant':32s} " + " ".join(f"{h:>10s}" for _, h in COLUMNS) + f" {'load':>6s}", flush=True)
    runs = []
    for _ in range(args.repeat):
        for name in names:
            res = run(name, VARIANTS[name], args)
            runs.append({"variant": name, **res})
            print(f"{name:32s} " + " ".join(f"{res[k]:>10}" for k, _ in COLUMNS) + f" {res['load']:>6}", flush=True)
    if args.repeat > 1:
        print(f"\nmedians of {args.repeat} runs", flush=True)
        for name in names:
            mine = [r for r in runs if r["variant"] == name]
            med = {k: statistics.median(r[k] for r in mine) for k, _ in COLUMNS}
            print(f"{name:32s} " + " ".join(f"{round(med[k], 2):>10}" for k, _ in COLUMNS))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
