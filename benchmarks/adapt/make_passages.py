"""The passages of the adaptation benchmark's documents, as rckit's collections cut them.

The domain set (docs/adapt.md) is questions written over manuals installed on this machine under
/usr/share/doc. This script reads each chosen document with rckit's own readers, cuts it into
200-word passages like ``rckit index`` does, keeps the prose ones (at least 50 words, most of them
alphabetic) and writes one JSON file per group of documents for the question writers:
``{"passages": [{"id": "group:n", "document": path, "text": ...}]}``.

    python benchmarks/adapt/make_passages.py --out runs/adapt/passages
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rckit.retrieval.documents import read_documents
from rckit.retrieval.passages import cut_passages

DOC_ROOT = Path("/usr/share/doc")

# group -> [(document under /usr/share/doc, at most this many prose passages)]; "dev" documents
# come from packages no training group reads, so the split by document is also a split by package.
GROUPS = {
    "a": [("valgrind/html/manual-core.html", 40), ("base-passwd/users-and-groups.html", 13)],
    "b": [("python3/python-policy.html", 30), ("dpkg/spec/triggers.txt", 28)],
    "c": [
        ("zlib1g-dev/FAQ.gz", 15),
        ("zlib1g-dev/examples/zlib_how.html", 25),
        ("coreutils/README.gz", 11),
        ("openssh-client/README.Debian.gz", 10),
        ("man-db/README.md.gz", 9),
    ],
    "d": [("nettle-dev/nettle.html", 40), ("systemd/README.gz", 10), ("bzip2/manual.pdf.gz", 30)],
    "dev": [
        ("fontconfig/fontconfig-user.pdf.gz", 23),
        ("zstd/README.md.gz", 6),
        ("dpkg/spec/rootless-builds.txt", 6),
        ("valgrind/html/mc-manual.html", 20),
    ]
    + [
        (f"libffi8/html/{name}.html", 4)
        for name in (
            "Introduction",
            "The-Basics",
            "The-Closure-API",
            "Primitive-Types",
            "Size-and-Alignment",
            "Structures",
            "Memory-Usage",
            "Thread-Safety",
            "Arrays-Unions-Enums",
            "Complex",
        )
    ],
}


def prose(text: str) -> bool:
    words = text.split()
    return len(words) >= 50 and sum(w.isalpha() for w in words) / len(words) > 0.6


def passages(path: Path, limit: int) -> list[str]:
    _, documents = read_documents(path, path.read_bytes())
    out = []
    for doc in documents:
        for start, end in cut_passages(doc.text, 200):
            if prose(doc.text[start:end]) and len(out) < limit:
                out.append(doc.text[start:end])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for group, docs in GROUPS.items():
        rows = []
        for name, limit in docs:
            for text in passages(DOC_ROOT / name, limit):
                rows.append({"id": f"{group}:{len(rows)}", "document": name, "text": text})
        (args.out / f"{group}.json").write_text(json.dumps({"passages": rows}, indent=1, ensure_ascii=False))
        print(f"{group}: {len(rows)} passages from {len(docs)} documents")


if __name__ == "__main__":
    main()
