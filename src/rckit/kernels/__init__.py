"""The switch for rckit's CPU fast paths (:mod:`rckit.kernels.cpu`).

The layers and models compute what the papers write; where a faster way to compute the same
thing on CPU has paid off, the layer calls it from :mod:`rckit.kernels.cpu` behind one ``if``::

    if x.device.type == "cpu" and kernels.enabled("conv"):
        return cpu.separable_conv(...)

Fast paths, by name (what each computes: :mod:`rckit.kernels.cpu`; what each is worth:
BENCHMARKS.md, "CPU kernels"):

- ``residual``: QANet's ``x + dropout(relu(y)) * keep / p_l`` with one byte mask drawn from
  16-bit random lanes;
- ``conv``: the depthwise conv in oneDNN's channels-last layout, hand-written backward;
- ``attention``: self-attention in fp32 under bf16 autocast;
- ``char_cnn``: the char CNN at real characters only;
- ``dedupe``: outside training, shared contexts and repeated tokens computed once;
- ``graph_attention``, ``graph_char_cnn``, ``graph_conv``: in an exported ONNX graph only,
  self-attention as one 3-D Attention node, the char CNN as table look-ups, the separable conv as
  2-D convs over (B, C, 1, T) (:mod:`rckit.kernels.graph`).

All are on by default. Switch them off with the environment variable ``RCKIT_KERNELS``, read
at import: ``none`` (plain everywhere), ``all`` (the default), a list of the ones to keep
(``RCKIT_KERNELS=conv,dedupe``) or of the ones to leave out (``RCKIT_KERNELS=-attention,-conv``).
In code, ``with kernels.use("none"): ...`` does the same for a block (tests, benchmarks).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

NAMES = ("residual", "conv", "attention", "char_cnn", "dedupe", "graph_attention", "graph_char_cnn", "graph_conv")
CPU = NAMES[:5]  # the fast paths of PyTorch on CPU (:mod:`.cpu`)
GRAPH = NAMES[5:]  # the forms of an exported graph (:mod:`.graph`)


def parse(spec: str) -> frozenset[str]:
    """The fast paths a spec turns on: ``all``/empty, ``none``, ``a,b`` or ``-a,-b``."""
    spec = spec.strip().lower()
    if spec in ("", "all"):
        return frozenset(NAMES)
    if spec == "none":
        return frozenset()
    items = [s.strip() for s in spec.split(",") if s.strip()]
    negative = [s.startswith("-") for s in items]
    if any(negative) and not all(negative):
        raise ValueError(f"kernel spec {spec!r} mixes names to keep and names to leave out")
    names = [s.lstrip("-") for s in items]
    for name in names:
        _check(name)
    return frozenset(NAMES) - frozenset(names) if all(negative) else frozenset(names)


def _check(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"unknown kernel {name!r}; the kernels are {', '.join(NAMES)} (or 'all', 'none')")


_enabled = parse(os.environ.get("RCKIT_KERNELS", "all"))


def enabled(name: str) -> bool:
    """Whether fast path ``name`` is on (the layers also check that the tensors are on CPU)."""
    _check(name)
    return name in _enabled


def active() -> tuple[str, ...]:
    """The fast paths that are on, in the order of ``NAMES``."""
    return tuple(n for n in NAMES if n in _enabled)


@contextmanager
def use(spec: str) -> Iterator[None]:
    """Run a block with the fast paths of ``spec`` (as ``RCKIT_KERNELS``) on, the rest off."""
    global _enabled
    before, _enabled = _enabled, parse(spec)
    try:
        yield
    finally:
        _enabled = before
