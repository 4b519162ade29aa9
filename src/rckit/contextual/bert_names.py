"""The names of a BERT encoder's weights: Hugging Face BERT's (the files of all-MiniLM-L6-v2 and of
rckit's own encoders) and :mod:`rckit.contextual.bert`'s, each way. Free of PyTorch, so that the
ONNX path (:mod:`rckit.answering.pointer_graph`) reads a reader file where PyTorch is not installed.
"""

from __future__ import annotations

# Hugging Face BERT's names -> rckit.contextual.bert's: the embeddings', then each layer's parts.
HF_FIXED = {
    "embeddings.word_embeddings.weight": "word.weight",
    "embeddings.position_embeddings.weight": "position.weight",
    "embeddings.token_type_embeddings.weight": "token_type.weight",
    "embeddings.LayerNorm.weight": "norm.weight",
    "embeddings.LayerNorm.bias": "norm.bias",
}
HF_PER_LAYER = {
    "attention.self.query": "query",
    "attention.self.key": "key",
    "attention.self.value": "value",
    "attention.output.dense": "attn_out",
    "attention.output.LayerNorm": "attn_norm",
    "intermediate.dense": "ff_in",
    "output.dense": "ff_out",
    "output.LayerNorm": "ff_norm",
}


def hf_names_to_ours(state: dict) -> dict:
    """A Hugging Face BERT state dict (with or without a ``bert.`` prefix) in :mod:`rckit.contextual.bert`'s names;
    the pooler and buffers such as ``position_ids`` are left out."""
    out = {}
    for name, value in state.items():
        name = name.removeprefix("bert.")
        if name in HF_FIXED:
            out[HF_FIXED[name]] = value
        elif name.startswith("encoder.layer."):
            n, rest = name[len("encoder.layer.") :].split(".", 1)
            part, kind = rest.rsplit(".", 1)
            if part in HF_PER_LAYER:
                out[f"layers.{n}.{HF_PER_LAYER[part]}.{kind}"] = value
    return out


def ours_to_hf_names(state: dict) -> dict:
    """rckit.contextual.bert's names back to Hugging Face BERT's (the inverse of :func:`hf_names_to_ours`)."""
    fixed = {ours: hf for hf, ours in HF_FIXED.items()}
    per_layer = {ours: hf for hf, ours in HF_PER_LAYER.items()}
    out = {}
    for name, value in state.items():
        if name in fixed:
            out[fixed[name]] = value
        else:
            _, n, part, kind = name.split(".")  # layers.N.part.kind
            out[f"encoder.layer.{n}.{per_layer[part]}.{kind}"] = value
    return out
