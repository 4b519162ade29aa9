"""Texts to per-token contextual states: the one path from text to what a reader reads beside GloVe.

:class:`ContextualEncoder` holds an encoder's tokenizer and a runner (pieces in, states of the
chosen layers out): :class:`TorchRunner` (the plain module of :mod:`rckit.contextual.bert`) or an
ONNX Runtime session. :meth:`ContextualEncoder.states` reads each text alone — a context, or a
question — in the encoder's own windows (:func:`~rckit.contextual.pieces.piece_windows`), batches
the windows of many texts by length, and pools the pieces' states onto the text's tokens by their
character offsets (:func:`~rckit.contextual.pieces.pool`). Data preparation (the cache of a split),
evaluation and the Reader all call it, so a model reads at answer time what it trained on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rckit.contextual.encoders import EncoderFiles, find_encoder
from rckit.contextual.pieces import PieceTokenizer, owners, piece_windows, pool
from rckit.contextual.spec import ContextualSpec

Runner = Callable[[np.ndarray, np.ndarray], np.ndarray]  # ids (B, P), mask (B, P) -> (B, P, K, D) float32

MAX_PIECES = 256  # the encoder's window, [CLS] and [SEP] included (all-MiniLM-L6-v2 was tuned at 256)
BATCH_PIECES = 8192  # padded pieces per forward
PAD_SLACK = 1.25  # a batch's widest window at most 1.25 times its narrowest (+16 pieces)


class TorchRunner:
    """The encoder in PyTorch (:class:`rckit.contextual.bert.BertEncoder`), fp32, no gradients."""

    def __init__(self, files: EncoderFiles, layers: tuple[int, ...]):
        import torch

        from rckit.contextual.bert import BertEncoder

        self.torch = torch
        self.module = BertEncoder.load(files.root, files.config)
        self.layers = layers

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode():
            out = self.module(torch.from_numpy(ids), torch.from_numpy(mask), self.layers)
        return out.float().numpy()


class Memo:
    """Texts -> their pieces' states and spans, the most recently used kept up to ``limit`` bytes;
    safe to share between a server's threads."""

    def __init__(self, limit: int):
        self.limit, self.size = limit, 0
        self.items: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, text: str) -> tuple[np.ndarray, np.ndarray] | None:
        with self.lock:
            got = self.items.get(text)
            if got is not None:
                self.items.move_to_end(text)
            return got

    def put_all(self, read: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        with self.lock:
            for text, item in read.items():
                cost = item[0].nbytes + item[1].nbytes + len(text)
                if text in self.items or cost > self.limit:
                    continue
                self.items[text] = item
                self.size += cost
                while self.size > self.limit:
                    old, (states, offsets) = self.items.popitem(last=False)
                    self.size -= states.nbytes + offsets.nbytes + len(old)


class ContextualEncoder:
    """Texts -> per-token states ``(T, K, D)`` float32 of ``layers`` of encoder ``files``."""

    def __init__(
        self,
        files: EncoderFiles,
        layers: tuple[int, ...],
        runner: Runner | None = None,
        max_pieces: int | None = None,
        memo_mb: float = 0,
    ):
        layers = tuple(int(layer) for layer in layers)
        if not layers or min(layers) < 0 or max(layers) > files.n_layers:
            raise ValueError(
                f"contextual layers {list(layers)}: the encoder {files.name!r} has layers 0 "
                f"(embeddings) to {files.n_layers}"
            )
        if max_pieces is None:  # the default window, or the encoder's positions if it has fewer
            max_pieces = min(MAX_PIECES, int(files.config["max_position_embeddings"]))
        if not 3 <= max_pieces <= int(files.config["max_position_embeddings"]):
            raise ValueError(
                f"max_pieces {max_pieces}: between 3 and the encoder's "
                f"{files.config['max_position_embeddings']} positions"
            )
        self.files, self.layers, self.max_pieces = files, layers, max_pieces
        self.tokenizer = PieceTokenizer(files.root / "tokenizer.json")
        self.runner = runner if runner is not None else TorchRunner(files, layers)
        # The states of the texts read last, up to memo_mb: a passage asked one question after another
        # (the page, a server's clients) is read by the encoder once.
        self.memo = Memo(int(memo_mb * 2**20)) if memo_mb > 0 else None

    @classmethod
    def load(
        cls,
        spec: ContextualSpec,
        runner: str = "torch",
        graphs: str | Path | None = None,
        threads: int | None = None,
        spin: bool = True,
        memo_mb: float = 0,
    ) -> ContextualEncoder:
        """The encoder of ``spec``, refused in one line where its files' digest is not the one the
        model was trained with. ``runner``: ``torch`` or ``onnxruntime`` (its graph built on first use
        and kept under ``graphs``, int8-quantized where ``spec.int8``: :mod:`rckit.contextual.onnx_runner`);
        ``threads`` and ``spin`` as the model's own runtime takes them (PyTorch's threads are the
        process's, set by the model's loader); ``memo_mb``: keep the states of the texts read last,
        up to that many MiB, and read them from there when asked again."""
        files = find_encoder(spec.name)
        if spec.digest is not None and files.digest != spec.digest:
            raise ValueError(
                f"the model was trained on the contextual encoder {spec.name!r} with digest "
                f"{spec.digest}, and the one installed at {files.root} has digest {files.digest}: "
                f"install the encoder it was trained with, or train again on this one"
            )
        if runner == "onnxruntime":
            from rckit.contextual.onnx_runner import OnnxRunner

            if graphs is None:
                raise ValueError("the encoder on onnxruntime needs a folder to keep its graph in")
            return cls(
                files,
                spec.layers,
                OnnxRunner(files, spec.layers, graphs, spec.int8, threads, spin),
                spec.max_pieces,
                memo_mb,
            )
        return cls(files, spec.layers, max_pieces=spec.max_pieces, memo_mb=memo_mb)

    @property
    def dim(self) -> int:
        return self.files.dim

    @property
    def spec(self) -> ContextualSpec:
        return ContextualSpec(self.files.name, self.layers, self.files.digest, self.max_pieces, self.dim)

    def states(self, texts: list[str], token_offsets: list[np.ndarray]) -> list[np.ndarray]:
        """For each text, the states of its tokens (character spans ``token_offsets[i]``, (T, 2)):
        (T, K, D) float32, each text read alone."""
        read = self.piece_states(texts)
        return [pool(states, offsets, token_offsets[t]) for t, (states, offsets) in enumerate(read)]

    def piece_states(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """For each text, its pieces' states (P, K, D) float32 and their character spans (P, 2);
        texts the memo holds are not read again."""
        out: list[tuple[np.ndarray, np.ndarray] | None] = [self.memo.get(t) if self.memo else None for t in texts]
        todo = sorted({t for t, got in zip(texts, out) if got is None})
        if todo:
            fresh = dict(zip(todo, self._piece_states(todo)))
            out = [got if got is not None else fresh[t] for t, got in zip(texts, out)]
            if self.memo is not None:
                self.memo.put_all(fresh)
        return out

    def _piece_states(self, texts: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        pieces = self.tokenizer.pieces(texts)
        size = self.max_pieces - 2

        def fits(batch: list[int], width: int) -> bool:
            """Whether a window of ``width`` pieces joins ``batch`` (its windows no wider): the padded
            batch stays under BATCH_PIECES, and its narrowest window is not padded to much more than
            its own width (a question read beside its paragraph would cost as much as the paragraph)."""
            narrowest = spans[batch[0]][2] - spans[batch[0]][1] + 2
            return (len(batch) + 1) * width <= BATCH_PIECES and width <= PAD_SLACK * narrowest + 16

        # Every window of every text, as (text, lo, hi), then read in batches of similar length.
        spans = [(t, lo, hi) for t, (ids, _) in enumerate(pieces) for lo, hi in piece_windows(len(ids), size)]
        order = sorted(range(len(spans)), key=lambda w: spans[w][2] - spans[w][1])
        read: list[np.ndarray | None] = [None] * len(spans)
        batch: list[int] = []
        for w in order + [None]:
            if batch and (w is None or not fits(batch, spans[w][2] - spans[w][1] + 2)):
                self._read(batch, spans, pieces, read)
                batch = []
            if w is not None:
                batch.append(w)
        out = []
        first = 0
        for t, (ids, offsets) in enumerate(pieces):
            n_windows = len(piece_windows(len(ids), size))
            wins = spans[first : first + n_windows]
            win_states = read[first : first + n_windows]
            first += n_windows
            K, D = len(self.layers), self.dim
            piece_states = np.zeros((len(ids), K, D), np.float32)
            if len(ids):
                best, where = owners(len(ids), [(lo, hi) for _, lo, hi in wins])
                for w, s in enumerate(win_states):
                    mine = best == w
                    piece_states[mine] = s[where[mine]]
            out.append((piece_states, offsets))
        return out

    def _read(self, batch: list[int], spans, pieces, read) -> None:
        """The windows ``batch`` through the encoder; each window's piece states (without [CLS] and
        [SEP]) into ``read``."""
        widths = [spans[w][2] - spans[w][1] for w in batch]
        P = max(widths) + 2
        ids = np.zeros((len(batch), P), np.int64)
        mask = np.zeros((len(batch), P), bool)
        for b, w in enumerate(batch):
            t, lo, hi = spans[w]
            ids[b, 0], ids[b, 1 : hi - lo + 1], ids[b, hi - lo + 1] = (
                self.tokenizer.cls,
                pieces[t][0][lo:hi],
                self.tokenizer.sep,
            )
            mask[b, : hi - lo + 2] = True
        states = self.runner(ids, mask)  # (B, P, K, D)
        for b, w in enumerate(batch):
            read[w] = states[b, 1 : widths[b] + 1]
