"""A PyTorch span model as what :class:`rckit.answering.reader.Reader` calls: NumPy inputs in
(:data:`rckit.data.padding.INPUTS`), NumPy logits out (:data:`OUTPUTS`), as the ONNX file of
the same model does on onnxruntime (:mod:`rckit.answering.onnx_backend`); everything around the
forward pass (tokenizing, windows, decoding, the no-answer rule) is the Reader's, shared."""

from __future__ import annotations

import numpy as np
import torch

from rckit.data.padding import INPUTS, STATE_INPUTS
from rckit.models.contract import ReadingModel

OUTPUTS = ("start_logits", "end_logits", "start_null", "end_null")  # the last two for a model that can abstain


class TorchModel:
    """``model`` (a span :class:`ReadingModel`, in eval mode on ``device``) called on NumPy inputs.

    ``threads``: torch's intra-op threads for this process (None leaves torch's setting)."""

    backend = "torch"

    def __init__(self, model: ReadingModel, device: str | torch.device = "cpu", threads: int | None = None):
        if threads is not None:
            torch.set_num_threads(threads)
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.parameters = sum(p.numel() for p in model.parameters())

    @torch.inference_mode()
    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Start/end logits (B, Tc) float32, and the null's (B,) for a model that can abstain."""
        states = {k: torch.from_numpy(inputs[k]).to(self.device) for k in STATE_INPUTS if k in inputs}
        out = self.model.answer_pass(*(torch.from_numpy(inputs[k]).to(self.device) for k in INPUTS), **states)
        got = {"start_logits": out.start_logits, "end_logits": out.end_logits}
        if out.start_null is not None:
            got.update(start_null=out.start_null, end_null=out.end_null)
        return {k: v.float().cpu().numpy() for k, v in got.items()}


class TorchPointer:
    """rckit's own reader (:class:`rckit.models.encoder_reader.EncoderReader`, in eval mode) as
    :class:`rckit.answering.pointer_reader.PointerReader` calls it: NumPy ``ids``, ``mask``,
    ``types``, ``allowed`` in, the start and end scores (B, P) float32 out."""

    backend = "torch"

    def __init__(self, model: torch.nn.Module, device: str | torch.device = "cpu"):
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.parameters = sum(p.numel() for p in model.parameters())

    @torch.inference_mode()
    def __call__(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        x = [torch.from_numpy(inputs[k]).to(self.device) for k in ("ids", "mask", "types", "allowed")]
        out = self.model(*x)
        return out.start.float().cpu().numpy(), out.end.float().cpu().numpy()
