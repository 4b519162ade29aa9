"""Time rckit.Reader on one long document (20,000 words by default), read in overlapping windows.

    python benchmarks/long_document.py [RUN|FILE] [--words 20000] [--top-k 1] [--stride N] [--repeat 3]
        [--question "Who was the mayor of the town?"]

The document is filler paragraphs with one fact sentence at ``--fact-at`` (a fraction of the
way in); the question asks for it (``--question``: another one, e.g. about something the document
does not hold, to see a model that can abstain say so). With a trained model the answer should be the fact's name;
without one (no RUN/FILE, no $RCKIT_MODEL, no bundled model) an untrained QANet of the
cpu-small sizes stands in, so the time is still what such a model costs but the answer is
arbitrary. Prints tokens, windows, batches and the median seconds over ``--repeat`` runs;
figures belong in BENCHMARKS.md, not here.
"""

from __future__ import annotations

import argparse
import statistics
import time

FILLER = [
    "The harbour town grew slowly along the river, its warehouses built from the grey stone of the hills.",
    "Fishing boats left before dawn and came back in the afternoon, when the market opened by the quay.",
    "In winter the roads to the capital were often closed, and letters took weeks to arrive.",
    "The old church was rebuilt twice, first after a fire and later after a storm damaged its tower.",
    "Merchants from the south brought salt, cloth and olive oil, and left with timber and dried fish.",
    "A railway line reached the valley late in the century, and the town doubled in size within a decade.",
]
FACT = "The keeper of the northern lighthouse in those years was a woman named Ada Lindqvist."
QUESTION = "Who was the keeper of the northern lighthouse?"


def make_document(n_words: int, fact_at: float) -> str:
    sentences, words, i = [], 0, 0
    while words < n_words:
        s = FILLER[i % len(FILLER)]
        sentences.append(s)
        words += len(s.split())
        i += 1
    sentences.insert(int(fact_at * len(sentences)), FACT)
    paragraphs = [" ".join(sentences[j : j + 6]) for j in range(0, len(sentences), 6)]
    return "\n\n".join(paragraphs)


def stand_in_reader(context: str):
    """An untrained cpu-small QANet with the document's words as its vocabulary."""
    from rckit.answering.reader import Reader
    from rckit.answering.torch_backend import TorchModel
    from rckit.data.embeddings import EmbeddingInfo
    from rckit.data.tokenize import tokenize
    from rckit.data.vocab import SPECIALS, Vocab, Vocabularies
    from rckit.models.qanet import QANet
    from rckit.presets import run_configs

    mcfg, tcfg, decode = run_configs("qanet", "cpu-small", [])
    forms = sorted({t.lower() for t in tokenize(context + " " + QUESTION)[0]})
    words = Vocab(SPECIALS + forms, n_trainable=2)
    char_list = SPECIALS + sorted({c for f in forms for c in f})
    chars = Vocab(char_list, n_trainable=len(char_list))
    vocabs = Vocabularies(words, chars, lowercase=True, max_word_len=16)
    import torch

    torch.manual_seed(0)
    info = EmbeddingInfo(torch.randn(len(words), 50), n_trainable_words=2, n_chars=len(chars))
    return Reader(
        TorchModel(QANet(mcfg, info)),
        vocabs,
        decode,
        window=tcfg.max_c_len,
        info={"model": "qanet (untrained stand-in, cpu-small)"},
    )


def main() -> None:
    from rckit.answering.reader import Reader, windows
    from rckit.data.tokenize import tokenize

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "model",
        nargs="?",
        help="run directory or exported file (default: the default model, else an untrained stand-in)",
    )
    p.add_argument("--words", type=int, default=20000)
    p.add_argument("--fact-at", type=float, default=0.8, help="where the fact sits, as a fraction of the document")
    p.add_argument("--top-k", type=int, default=1)
    p.add_argument("--stride", type=int)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, help="the model's threads (PyTorch's or onnxruntime's)")
    p.add_argument("--question", default=QUESTION, help="what to ask (default: the fact's question)")
    args = p.parse_args()
    context = make_document(args.words, args.fact_at)
    try:
        reader = Reader.load(args.model, threads=args.threads)
    except FileNotFoundError:
        if args.model:
            raise
        reader = stand_in_reader(context)
    n_tokens = len(tokenize(context)[0])
    stride = args.stride or reader.window // 2
    n_windows = len(windows(n_tokens, reader.window, stride))
    reader.answer(context[:2000], QUESTION)  # warm-up: first-call allocations and caches
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        answers = reader.answer(context, args.question, top_k=args.top_k, stride=stride)
        times.append(time.perf_counter() - t0)
    best = answers[0]
    print(f"model            {reader.info.get('model')} ({reader.info.get('source', 'in memory')})")
    print(f"document         {len(context.split()):,} words, {n_tokens:,} tokens, {len(context):,} characters")
    print(
        f"windows          {n_windows} of {reader.window} tokens, stride {stride}, "
        f"{-(-n_windows // reader.batch_size)} batches of up to {reader.batch_size}"
    )
    print(f"backend          {reader.info['backend']}, threads {args.threads or 'default'}")
    print(
        f"seconds          median {statistics.median(times):.2f} over {args.repeat} "
        f"({', '.join(f'{t:.2f}' for t in times)}); {1000 * statistics.median(times) / n_windows:.1f} ms a window"
    )
    print(f"question         {args.question}")
    print(
        f"answer           {best['answer']!r} (score {best['score']:.3f}, characters {best['start']}-{best['end']}; "
        f"no-answer probability {best['no_answer_probability']}; "
        f"the fact is at {context.index(FACT)}-{context.index(FACT) + len(FACT)})"
    )


if __name__ == "__main__":
    main()
