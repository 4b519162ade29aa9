"""rckit: neural machine reading comprehension (SQuAD, cloze) in PyTorch."""

__version__ = "0.1.0"
