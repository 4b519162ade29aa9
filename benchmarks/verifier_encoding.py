"""Does the installed QANet's frozen encoding help the verifier (issue 43) beyond its features?

    python benchmarks/verifier_encoding.py   # after rckit verifier ... --cache /tmp/vcache

Pools the model encoder's outputs (M0, M1, M2: a forward hook) of every training and tuning pair
of rckit.training.verifier, weighted by the start and end probabilities, with the mean and max of
M2, and fits a logistic regression and a 64-unit network on the features, the pooled encoding, and
both; prints each one's tuning-quarter F1 at its best threshold. Figures: docs/no-answer.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from rckit.answering.reader import Reader
from rckit.data.padding import INPUTS, answer_inputs, merge_answer_inputs
from rckit.data.squad import load_json
from rckit.model_files.source import installed_files
from rckit.training import verifier as tv

CACHE = Path("/tmp/vcache")


def pooled(reader: Reader, pairs) -> np.ndarray:
    """(pairs, 6 d): the model encoder's outputs pooled per pair (its first window)."""
    module = reader.model.model
    caught = []
    hook = module.model_enc.register_forward_hook(lambda m, i, o: caught.append(o))
    job = reader.plan([(p.context, p.question) for p in pairs])
    feats = {}
    for items in reader.batches(job):
        inputs = merge_answer_inputs([answer_inputs(job.arrays, items)])
        caught.clear()
        with torch.inference_mode():
            out = module.answer_pass(*(torch.from_numpy(inputs[k]) for k in INPUTS))
        m0, m1, m2 = caught[-3:]
        mask = torch.from_numpy(inputs["c_mask"][inputs["q_context"]])
        ps = torch.softmax(out.start_logits.masked_fill(~mask, -1e30), -1)
        pe = torch.softmax(out.end_logits.masked_fill(~mask, -1e30), -1)
        m = mask.float().unsqueeze(-1)
        mean2 = (m2 * m).sum(1) / m.sum(1)
        max2 = m2.masked_fill(~mask.unsqueeze(-1), -1e4).max(1).values
        f = torch.cat(
            [
                torch.einsum("bt,btd->bd", ps, m0),
                torch.einsum("bt,btd->bd", ps, m1),
                torch.einsum("bt,btd->bd", pe, m0),
                torch.einsum("bt,btd->bd", pe, m2),
                mean2,
                max2,
            ],
            -1,
        )
        for (i, _, _, _), row in zip(items, f.numpy()):
            feats.setdefault(i, row)
    hook.remove()
    return np.stack([feats[i] for i in range(len(pairs))])


class Head:
    def __init__(self, net, mean, scale):
        self.net, self.mean, self.scale = net, mean, scale

    def probability(self, x):
        with torch.no_grad():
            return torch.sigmoid(self.net(torch.from_numpy((x - self.mean) / self.scale).float())[:, 0]).numpy()


def fit(x, y, weight, hidden, epochs=20, wd=1e-2, drop=0.0) -> Head:
    torch.manual_seed(0)
    mean, scale = x.mean(0), x.std(0)
    scale = np.where(scale > 1e-6, scale, 1.0)
    xt = torch.from_numpy((x - mean) / scale).float()
    wt = torch.from_numpy(weight / weight.mean()).float()
    yt = torch.from_numpy(y)
    net = (
        torch.nn.Sequential(
            torch.nn.Dropout(drop),
            torch.nn.Linear(x.shape[1], hidden),
            torch.nn.ReLU(),
            torch.nn.Dropout(drop),
            torch.nn.Linear(hidden, 1),
        )
        if hidden
        else torch.nn.Linear(x.shape[1], 1)
    )
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=wd)
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        net.train()
        for idx in torch.randperm(len(xt), generator=g).split(256):
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(xt[idx])[:, 0], yt[idx], weight=wt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    return Head(net, mean, scale)


def main() -> None:
    t = time.time()
    files = installed_files("qanet")
    reader = Reader.load(files["safetensors"], "cpu", always_answer=True)
    reader_onnx = Reader.load(files["onnx"], "cpu", always_answer=True)  # the features' cache is keyed on it
    dev = load_json("../shared/data/squad-v2.0/dev-v2.0.reconstructed.json.gz")
    pairs = tv.training_pairs(
        load_json("../shared/data/squad-v1.1/train-v1.1.reconstructed.json.gz"), dev, 10_000, 0, True
    )
    tune, tune_raw = tv.tuning_pairs(dev)
    x, _ = tv.cached_features(reader_onnx, pairs, CACHE)
    xt, texts = tv.cached_features(reader_onnx, tune, CACHE)
    e, et = pooled(reader, pairs), pooled(reader, tune)
    print(f"read in {time.time() - t:.0f} s; pooled encoding {e.shape}", flush=True)
    y = np.asarray([p.unanswerable for p in pairs], np.float32)
    dev_side = np.asarray([p.kind in ("written", "dev_answerable") for p in pairs])
    for name, a, at in (
        ("features", x, xt),
        ("encoding", e, et),
        ("both", np.concatenate([x, e], 1), np.concatenate([xt, et], 1)),
    ):
        for hidden, w, drop in ((0, 10, 0.0), (64, 10, 0.3), (64, 30, 0.3)):
            head = fit(a, y, np.where(dev_side, w, 1.0).astype(np.float32), hidden, drop=drop)
            got = tv.tuned(head.probability(at), texts, tune, tune_raw)
            print(f"{name:9s} hidden {hidden:2d} x{w}: tuning F1 {got['f1']:.2f} at {got['threshold']:.3f}", flush=True)


if __name__ == "__main__":
    main()
