"""Forward+backward time of PeepholeLSTM against torch.nn.LSTM on CPU at the Deep LSTM Reader's sizes.

    python benchmarks/bench_lstm.py --threads 2 --repeat 3

A two-layer reader encoder with skip connections (Hermann et al. 2015): layer 1 reads the
embedded input x (B, T, 256), layer 2 reads x || y'(1), width 256 + H. Each variant runs both
layers forward, then backward from the sum of both outputs; the input requires grad like a
trained embedding. Prints the median milliseconds per batch and the ratio to nn.LSTM. Batches
are full length (length-bucketed) unless ``--pad``, which draws lengths in [T/2, T] and feeds
nn.LSTM packed sequences.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rckit.layers.lstm import PeepholeLSTM

VARIANTS = ["nn.LSTM", "diagonal", "full", "none-handwritten", "none-fused"]


def reader_layers(variant: str, d_in: int, hidden: int) -> list[nn.Module]:
    sizes = [(d_in, hidden), (d_in + hidden, hidden)]
    if variant == "nn.LSTM":
        return [nn.LSTM(d, hidden, batch_first=True) for d, _ in sizes]
    peephole = {"diagonal": "diagonal", "full": "full"}.get(variant)
    return [PeepholeLSTM(d, hidden, peephole=peephole, fused=variant == "none-fused") for d, _ in sizes]


def step(layers: list[nn.Module], x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, padded: bool) -> None:
    inp, outs = x, []
    for layer in layers:
        if isinstance(layer, nn.LSTM):
            if padded:
                packed = pack_padded_sequence(inp, lengths, batch_first=True, enforce_sorted=False)
                y, _ = pad_packed_sequence(layer(packed)[0], batch_first=True, total_length=x.size(1))
            else:
                y, _ = layer(inp)
        else:
            y, _ = layer(inp, mask)
        outs.append(y)
        inp = torch.cat([x, y], -1)  # (B, T, d_in + H): the reader's skip connection
    sum(o.sum() for o in outs).backward()


def time_ms(layers, x, mask, lengths, padded, repeat: int) -> float:
    step(layers, x, mask, lengths, padded)  # warm-up (TorchScript compiles on first calls)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step(layers, x, mask, lengths, padded)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--lengths", type=int, nargs="+", default=[200, 600])
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    ap.add_argument("--pad", action="store_true", help="random lengths in [T/2, T] instead of full batches")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, {args.threads} threads, batch {args.batch}, input {args.input}, "
        f"2 layers (layer 2 input {args.input} + H), forward+backward, median of {args.repeat}, "
        f"{'padded' if args.pad else 'full-length'} batches"
    )
    print(f"{'T':>4} {'H':>4} " + " ".join(f"{v:>22}" for v in args.variants))
    for T in args.lengths:
        for H in args.hidden:
            x = torch.randn(args.batch, T, args.input, requires_grad=True)
            lengths = torch.randint(T // 2, T + 1, (args.batch,)) if args.pad else torch.full((args.batch,), T)
            lengths[0] = T
            mask = torch.arange(T) < lengths.unsqueeze(1)  # (B, T)
            ms = {
                v: time_ms(reader_layers(v, args.input, H), x, mask, lengths, args.pad, args.repeat)
                for v in args.variants
            }
            base = ms.get("nn.LSTM")
            cells = [f"{ms[v]:9.1f} ms" + (f" ({ms[v] / base:4.2f}x)" if base else "") for v in args.variants]
            print(f"{T:>4} {H:>4} " + " ".join(f"{c:>22}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
