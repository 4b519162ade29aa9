"""Whether the text holds the answer at all: a verifier beside a span reader trained on SQuAD v1.1.

A span reader always finds a best span, even for a question its text cannot answer. Training
the reader again with a null (docs/investigations/no-answer.md) cost it its answers, for want of
written unanswerable training questions. So the reader is kept exactly as trained, and the
decision to answer is learned separately, as in "Read + Verify" (Hu et al. 2019): the reader's
answers are unchanged wherever it answers.

The verifier reads features of one (context, question, best span) triple: the reader's evidence
in the window its best span came from, and lexical evidence a span softmax never sees
(:mod:`rckit.answering.verifier_features`, which says them). Its form is a small network on those
features, standardised: ``p(no answer) = sigmoid(w2 . relu(W1 x + b1) + b2)`` (with no hidden
layer: logistic regression). It runs in NumPy, so an ONNX reader stays PyTorch-free, and travels
in the model file's metadata (``verifier``, a JSON object: :meth:`Net.to_json`), in
``.safetensors`` and ``.onnx`` alike. The reader abstains where ``p(no answer)`` is above the
threshold chosen on held-out data (the tuning quarter of SQuAD v2.0 dev), or a threshold the
caller gives. Training: :mod:`rckit.training.verifier`, where the forms compared are said.

One network, :class:`Net`, is written once; :class:`Verifier` (a passage's answer) and
:class:`CollectionVerifier` (a collection's passages together) name the features they read.
"""

from __future__ import annotations

from typing import Self

import numpy as np

from rckit.answering.own_verifier import OwnVerifier
from rckit.answering.verifier_features import COLLECTION_FEATURES, FEATURES, FEATURES_VERSION


def features_differ(got: tuple[str, ...], wanted: tuple[str, ...], what: str = "verifier") -> str:
    """The one-line refusal of a verifier made by another version of rckit, naming what differs."""
    extra, missing = [f for f in got if f not in wanted], [f for f in wanted if f not in got]
    differ = (
        f"it reads {extra[:3]} that this rckit does not compute"
        if extra
        else f"it lacks {missing[:3]}"
        if missing
        else "its features are in another order"
    )
    return (
        f"this {what} was made by another version of rckit ({differ}): train it again (rckit verifier), "
        "or take it out of the file (rckit verifier --remove --into FILE)"
    )


class Net:
    """Standardised inputs, ReLU layers, a sigmoid: ``p(no answer)`` of each row of :attr:`FEATURES`.
    ``threshold``: refuse the answer where ``p(no answer)`` is above it. ``record``: how it was
    made (data, counts, the held-out figures), kept with it in the model file. A verifier names
    the features it reads (:attr:`FEATURES`) and what it is called in a refusal (:attr:`what`);
    the features a file lists are checked where it is read (:meth:`from_json`)."""

    FEATURES: tuple[str, ...] = ()
    what = "verifier"

    def __init__(
        self,
        mean,
        scale,
        layers: list[tuple[np.ndarray, np.ndarray]],
        threshold: float,
        record: dict | None = None,
    ):
        self.mean = np.asarray(mean, np.float32)
        self.scale = np.asarray(scale, np.float32)
        self.layers = [(np.asarray(w, np.float32), np.asarray(b, np.float32)) for w, b in layers]
        self.threshold = float(threshold)
        self.record = dict(record or {})
        self.check()
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"a {self.what}'s threshold is a probability, got {self.threshold}")

    def to_json(self) -> dict:
        """What a model file carries of it (its metadata's ``verifier``, or that one's ``collection``)."""
        return {
            "features": list(self.FEATURES),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "layers": [{"weight": w.tolist(), "bias": b.tolist()} for w, b in self.layers],
            "threshold": self.threshold,
            "record": self.record,
        }

    @classmethod
    def from_json(cls, d: dict, where: str = "the model file", **parts) -> Self:
        """The network :meth:`to_json` wrote, read from the metadata of the model file ``where``
        (``parts``: a subclass's own, given to its constructor). A file that lists other features
        than :attr:`FEATURES`, or whose arrays, threshold or keys are damaged, is refused in one line."""
        try:
            mean, scale = d["mean"], d["scale"]
            layers = [(layer["weight"], layer["bias"]) for layer in d["layers"]]
            threshold, features = d["threshold"], tuple(d["features"])
            if features != cls.FEATURES:
                raise ValueError(features_differ(features, cls.FEATURES, cls.what))
            return cls(mean, scale, layers, threshold, d.get("record"), **parts)
        except (KeyError, TypeError) as e:
            raise ValueError(f"{where}: damaged {cls.what} in its metadata ({e!r})") from None
        except ValueError as e:  # other features, a threshold that is no probability, wrong shapes
            raise ValueError(f"{where}: {e}") from None

    def check(self) -> None:
        """Refuse a network that cannot read its features into one probability (a damaged file)."""
        n = width = len(self.FEATURES)
        shapes = [(self.mean.shape, (n,)), (self.scale.shape, (n,))]
        for w, b in self.layers:
            shapes += [(w.shape[1:] if w.ndim == 2 else w.shape, (width,)), (b.shape, w.shape[:1])]
            width = w.shape[0] if w.ndim == 2 else -1
        bad = [(got, want) for got, want in shapes if tuple(got) != tuple(want)]
        if not self.layers or bad or width != 1:
            raise ValueError(
                f"damaged {self.what}: its arrays do not read {n} features into one probability "
                f"(shapes {[tuple(g) for g, _ in shapes]})"
            )

    def probability(self, x: np.ndarray) -> np.ndarray:
        """``p(no answer)`` of each row of ``x`` (n, features)."""
        h = (np.asarray(x, np.float32) - self.mean) / self.scale
        for i, (w, b) in enumerate(self.layers):
            h = h @ w.T + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return 1.0 / (1.0 + np.exp(-np.clip(h[:, 0], -60.0, 60.0)))


class CollectionVerifier(Net):
    """Whether a collection holds the answer to a question, from :data:`COLLECTION_FEATURES` of
    the passages retrieved and read: the passage verifier judges one passage at a time, and
    twenty passages give a wrong answer twenty chances to pass; this sees them together, with
    the retriever's evidence. ``threshold``: say "no answer in these documents" above it."""

    FEATURES = COLLECTION_FEATURES
    what = "collection verifier"


class Verifier(Net):
    """``p(no answer)`` from :data:`FEATURES` (one hidden ReLU layer, or none): abstain where it is
    above ``threshold``. ``collection``: the decision over the passages of a collection
    (:class:`CollectionVerifier`), where trained. ``own``: rckit's own reader
    (:mod:`rckit.answering.own_verifier`) that judges each answer instead of the network, alone or
    joined with it, where the file names one, with its own threshold (:attr:`answer_threshold`);
    the network, with ``threshold``, still judges a collection's passages (:meth:`judge`)."""

    FEATURES = FEATURES
    what = "verifier"

    def __init__(
        self,
        mean,
        scale,
        layers: list[tuple[np.ndarray, np.ndarray]],
        threshold: float,
        record: dict | None = None,
        collection: CollectionVerifier | None = None,
        own: OwnVerifier | None = None,
    ):
        super().__init__(mean, scale, layers, threshold, record)
        self.collection = collection
        self.own = own

    def to_json(self) -> dict:
        return {
            **super().to_json(),
            "features_version": FEATURES_VERSION,
            **({"collection": self.collection.to_json()} if self.collection is not None else {}),
            **({"own": self.own.to_json()} if self.own is not None else {}),
        }

    @property
    def answer_threshold(self) -> float:
        """The threshold on the p(no answer) that decides an answer: the own reader's where there
        is one, else the network's."""
        return self.threshold if self.own is None else self.own.threshold

    def judge(self, pairs: list[tuple[str, str]], x: np.ndarray) -> np.ndarray:
        """``p(no answer)`` of (context, question) ``pairs``: the own reader's where the verifier
        has one (joined with the network's on their features ``x`` where it is a join), else the
        network's on ``x``."""
        if self.own is None:
            return self.probability(x)
        if not pairs:
            return np.zeros(0, np.float64)
        return self.own.probability(pairs, None if self.own.join is None else self.probability(x))

    @classmethod
    def from_json(
        cls, d: dict, where: str = "the model file", threads: int | None = None, spin: bool = True
    ) -> Verifier:
        """The verifier of the model file ``where`` from its metadata ``d``, with its collection
        verifier; the own reader it names is loaded from beside that file (``threads`` as the
        reader's; ``spin`` is the span reader's onnxruntime setting, kept for its callers)."""
        if d.get("cross"):
            raise ValueError(
                f"{where}: its verifier names issue 62's cross-encoder, which this rckit no longer reads: "
                "take it out (rckit verifier --remove --into FILE) or put rckit's own reader in its place "
                "(rckit verifier --own READER --into FILE)"
            )
        own = OwnVerifier.from_json(d["own"], where, threads) if d.get("own") else None
        collection = CollectionVerifier.from_json(d["collection"], where) if d.get("collection") else None
        verifier = super().from_json(d, where, collection=collection, own=own)
        if d.get("features_version", 1) != FEATURES_VERSION:  # the same names, computed otherwise
            raise ValueError(
                f"{where}: its verifier computes its features as rckit's version "
                f"{d.get('features_version', 1)} of them did, this rckit as version {FEATURES_VERSION}: "
                "train it again (rckit verifier), or take it out (rckit verifier --remove --into FILE)"
            )
        return verifier
