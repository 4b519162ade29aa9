"""Whether the text answers the question with the reader's span, read together: the cross-encoder verifier.

The feature verifier (:mod:`rckit.answering.verifier`) reads the question and the passage apart,
through words matched by stem and the reader's confidence; a question written to look answerable
(an antonym, a swapped condition) passes both. The answer verifiers of the SQuAD 2.0 papers that
work read them together (Hu et al. 2019, "Read + Verify"; Zhang et al. 2020, "Retrospective
Reader"): a transformer reads the question, the candidate answer and the passage around it as one
sequence and says whether that span answers that question. Here it is all-MiniLM-L6-v2 (the
encoder the default reader already reads), fine-tuned with a head on its first piece
(:mod:`rckit.models.cross_encoder`, trained by :mod:`rckit.training.cross_verifier`).

One input, in the encoder's WordPiece pieces (:func:`cross_inputs`)::

    [CLS] question [SEP] candidate [SEP] window [SEP]
      0      0       0       1       1      1     1     segment (E_type)

The question keeps at most :data:`MAX_QUESTION` pieces and the candidate :data:`MAX_CANDIDATE`;
the window is the passage's pieces centred on the candidate's, as many as the rest of
``max_pieces`` allows (the whole passage where it fits). No span (the reader found none): an
empty candidate, the passage's first pieces.

``p(no answer) = 1 - sigmoid(logit)``, the logit of the first piece's last state. The exported
graph (``rckit verifier --cross-encoder``) takes the pieces' word vectors rather than their ids:
the word table is frozen in training, so the file does not carry it and answering looks it up in
the installed encoder's own weights, checked by digest (a model file names both the graph, by
name and SHA-256, and the encoder). The graph runs on onnxruntime, so the light install verifies
without PyTorch; this module imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from rckit.contextual.pieces import PieceTokenizer
from rckit.data.prepare import file_digest

MAX_PIECES = 192  # the whole input, special pieces included
MAX_QUESTION = 48  # a question's pieces kept (the longest SQuAD questions run to about 40)
MAX_CANDIDATE = 32  # a candidate's pieces kept
BATCH = 16

Triple = tuple[str, str, int | None, int | None]  # (context, question, start, end): the span context[start:end]


def cross_inputs(tokenizer: PieceTokenizer, triples: list[Triple], max_pieces: int = MAX_PIECES) -> dict:
    """``ids`` (B, P) int64, ``mask`` (B, P) bool and ``types`` (B, P) int64 of ``triples``
    (module docstring), P the longest input; each distinct text is cut into pieces once."""
    if max_pieces < 8:
        raise ValueError(f"a cross-encoder's input needs at least 8 pieces, got {max_pieces}")
    texts: dict[str, int] = {}
    for context, question, start, end in triples:
        for t in (context, question, "" if start is None else context[start:end]):
            texts.setdefault(t, len(texts))
    pieces = tokenizer.pieces(list(texts))
    rows = []
    for context, question, start, end in triples:
        q = pieces[texts[question]][0][:MAX_QUESTION]
        cand = np.zeros(0, np.int64) if start is None else pieces[texts[context[start:end]]][0][:MAX_CANDIDATE]
        c_ids, c_off = pieces[texts[context]]
        room = max(max_pieces - 4 - len(q) - len(cand), 0)
        lo = 0
        if len(c_ids) > room:
            inside = np.flatnonzero((c_off[:, 1] > (start or 0)) & (c_off[:, 0] < (end or 0)))
            if start is not None and len(inside):
                middle = (int(inside[0]) + int(inside[-1])) // 2
                lo = min(max(middle - room // 2, 0), len(c_ids) - room)
        window = c_ids[lo : lo + room]
        ids = np.concatenate(
            [[tokenizer.cls], q, [tokenizer.sep], cand, [tokenizer.sep], window, [tokenizer.sep]]
        ).astype(np.int64)
        types = np.zeros(len(ids), np.int64)
        types[len(q) + 2 :] = 1
        rows.append((ids, types))
    P = max((len(ids) for ids, _ in rows), default=0)
    out = {
        "ids": np.zeros((len(rows), P), np.int64),
        "mask": np.zeros((len(rows), P), bool),
        "types": np.zeros((len(rows), P), np.int64),
    }
    for b, (ids, types) in enumerate(rows):
        out["ids"][b, : len(ids)] = ids
        out["mask"][b, : len(ids)] = True
        out["types"][b, : len(ids)] = types
    return out


class CrossVerifier:
    """``p(no answer)`` of (context, question, span) triples from a fine-tuned cross-encoder.

    ``run``: word vectors (B, P, d) float32, ``mask`` (B, P) bool, ``types`` (B, P) int64 -> the
    logits (B,) that the span answers the question (the exported graph on onnxruntime, or the
    PyTorch module in training); ``table``: the encoder's word vectors (vocabulary, d);
    ``meta``: what the model file says of it (:meth:`to_json`), its ``threshold`` among it."""

    def __init__(
        self,
        run: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
        tokenizer: PieceTokenizer,
        table: np.ndarray,
        max_pieces: int = MAX_PIECES,
        meta: dict | None = None,
    ):
        self.run, self.tokenizer, self.table = run, tokenizer, table
        self.max_pieces = int(max_pieces)
        self.meta = dict(meta or {})
        # Abstain where p(no answer) is above this (chosen on the tuning quarter; 0.5 until then).
        self.threshold = float(self.meta.get("threshold", 0.5))
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"a verifier's threshold is a probability, got {self.threshold}")

    @property
    def batch(self) -> int:
        """Inputs per call: one for an int8 graph, whose activations are quantized with one scale
        per call (so a triple's probability does not depend on what shares its call), else
        :data:`BATCH`."""
        return 1 if self.meta.get("quantized") == "int8" else BATCH

    def logits(self, triples: list[Triple], batch: int | None = None) -> np.ndarray:
        """The logit that each triple's span answers its question, in batches of ``batch``
        (default :attr:`batch`) inputs of like length (less padding)."""
        batch = self.batch if batch is None else batch
        out = np.zeros(len(triples), np.float32)
        order = sorted(range(len(triples)), key=lambda i: len(triples[i][0]) + len(triples[i][1]))
        for lo in range(0, len(order), batch):
            rows = order[lo : lo + batch]
            x = cross_inputs(self.tokenizer, [triples[i] for i in rows], self.max_pieces)
            out[rows] = self.run(self.table[x["ids"]], x["mask"], x["types"])
        return out

    def probability(self, triples: list[Triple]) -> np.ndarray:
        """``p(no answer)`` of each triple: one minus the sigmoid of its logit."""
        z = np.clip(self.logits(triples).astype(np.float64), -60.0, 60.0)
        return (1.0 / (1.0 + np.exp(z))).astype(np.float32)

    def to_json(self) -> dict:
        return dict(self.meta)

    @classmethod
    def from_json(cls, d: dict, where: str | Path, threads: int | None = None, spin: bool = True) -> CrossVerifier:
        """The verifier that the model file ``where`` names in ``d``: its graph beside the file
        (``file``), checked by ``sha256``; the encoder ``encoder`` (a name or folder), checked by
        ``encoder_digest``. A missing or damaged file is refused in one line naming it."""
        from rckit.contextual.encoders import encoder_weights, find_encoder

        for key in ("file", "sha256", "encoder", "encoder_digest", "max_pieces"):
            if key not in d:
                raise ValueError(f"{where}: damaged cross-encoder verifier in its metadata (no {key!r})")
        graph = Path(where).parent / str(d["file"])
        if not graph.is_file():
            raise ValueError(
                f"{where}: its verifier's graph {graph} is missing (rckit verifier --remove --into FILE takes the "
                "verifier out)"
            )
        if file_digest(graph) != d["sha256"]:
            raise ValueError(f"{graph}: damaged (its SHA-256 differs from the one {Path(where).name} names)")
        files = find_encoder(str(d["encoder"]))
        if files.digest != d["encoder_digest"]:
            raise ValueError(
                f"{where}: its verifier was fine-tuned from the encoder {d['encoder_digest']}, and "
                f"{d['encoder']!r} here is {files.digest}"
            )
        try:
            import onnxruntime as ort
        except ModuleNotFoundError:
            raise ModuleNotFoundError(
                "the cross-encoder verifier runs on onnxruntime: pip install 'rckit[onnx]'", name="onnxruntime"
            ) from None
        word = "embeddings.word_embeddings.weight"
        (table,) = encoder_weights(files.root, lambda name: name.removeprefix("bert.") == word).values()
        options = ort.SessionOptions()
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        if threads is not None:
            options.intra_op_num_threads = threads
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own types for a file it cannot read
            raise ValueError(f"{graph}: not a readable ONNX graph ({str(e).splitlines()[0][:200]})") from None

        def run(vectors: np.ndarray, mask: np.ndarray, types: np.ndarray) -> np.ndarray:
            feed = {"vectors": vectors.astype(np.float32), "mask": mask.astype(bool), "types": types.astype(np.int64)}
            return session.run(["logit"], feed)[0]

        return cls(run, PieceTokenizer(files.root / "tokenizer.json"), table, int(d["max_pieces"]), d)
