"""The two device knobs every command shares: which device, and which autocast dtype.

Training (:mod:`rckit.training`) and evaluation (:mod:`rckit.evaluation`) both run a model
under :func:`autocast`; neither owns it, so it lives here, beside :func:`pick_device`, which
turns a ``--device`` argument into a ``torch.device``.
"""

from __future__ import annotations

import contextlib

import torch


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` to ``dtype`` on ``device``; nothing for ``None`` or float32."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def pick_device(name: str) -> torch.device:
    """``auto`` (CUDA when there is one, else CPU) or a device name, checked against this machine."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name}: not a device name (cpu, cuda, cuda:1 ...)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: no CUDA device is available here (use --device cpu)")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device
