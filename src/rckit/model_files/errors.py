"""The error a saved model raises when its file cannot be used, in a module without PyTorch so
that the answering path on onnxruntime (:mod:`rckit.answering.onnx_backend`) raises the same one."""


class CheckpointError(RuntimeError):
    """A checkpoint or model file that is truncated, damaged, another program's or another
    version's: refused whole, with one line naming the file and what is wrong."""


class MissingPackage(ImportError):
    """An optional package a command needs is not installed: the message says which install adds it."""
