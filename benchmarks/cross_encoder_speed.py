"""What fine-tuning the cross-encoder verifier costs on this machine (issue 62): examples a second,
forward and backward with AdamW, on SQuAD dev questions with their gold spans, at several input
lengths and with every layer or only the top ones trained.

    python benchmarks/cross_encoder_speed.py --data ../shared/data/squad-v1.1/dev-v1.1.json.gz [--examples 200]

The first batch of each setting is a warm-up and is not counted. Figures go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from safetensors.torch import load_file

from rckit.contextual.encoders import find_encoder
from rckit.contextual.pieces import PieceTokenizer
from rckit.data.squad import load_json
from rckit.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from rckit.training.cross_verifier import Example, torch_inputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a SQuAD file")
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    enc = find_encoder("minilm")
    tok = PieceTokenizer(enc.root / "tokenizer.json")
    weights = load_file(str(enc.root / "model.safetensors"))
    raw = load_json(args.data)
    examples = [
        Example(p["context"], q["question"], a["answer_start"], a["answer_start"] + len(a["text"]), 1.0, "gold")
        for art in raw["data"]
        for p in art["paragraphs"]
        for q in p["qas"]
        for a in q["answers"][:1]
    ][: args.examples + args.batch]
    rows = []
    for train_layers, pieces in ((0, 256), (0, 192), (0, 128), (3, 192)):
        model = CrossEncoder.from_encoder(weights, enc.config, CrossEncoderConfig(train_layers=train_layers))
        params = model.trainable()
        opt = torch.optim.AdamW(params, lr=5e-5)
        model.train()
        n, lengths, t0 = 0, [], None
        for lo in range(0, len(examples), args.batch):
            batch = examples[lo : lo + args.batch]
            x = torch_inputs(tok, batch, pieces)
            z = model.read(x["ids"], x["mask"], x["types"])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(z, torch.ones(len(batch)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if t0 is None:  # the warm-up batch
                t0 = time.perf_counter()
                continue
            n += len(batch)
            lengths.append(x["ids"].shape[1])
        rows.append(
            {
                "layers_trained": train_layers or len(model.bert.layers),
                "max_pieces": pieces,
                "mean_padded_pieces": round(sum(lengths) / len(lengths), 1),
                "examples_per_second": round(n / (time.perf_counter() - t0), 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
