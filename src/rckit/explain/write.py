"""An explanation written to a file as its suffix says: a PNG figure (:mod:`.png`), one HTML page
(:mod:`.page`) or the explanation itself as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rckit.explain.common import checked, write_atomically
from rckit.explain.page import write_html
from rckit.explain.png import write_png

SUFFIXES = (".png", ".html", ".json")


def write_explanation(explanation: Mapping[str, Any], path: str | Path) -> Path:
    """Write ``explanation`` to ``path`` as its suffix says: ``.png`` (a figure), ``.html`` (one page)
    or ``.json`` (the explanation itself). Any other suffix is a ValueError."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".png":
        write_png(explanation, path)
    elif suffix == ".html":
        write_html(explanation, path)
    elif suffix == ".json":
        checked(explanation)
        write_atomically(
            path,
            lambda tmp: tmp.write_text(json.dumps(explanation, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"),
        )
    else:
        raise ValueError(
            f"{path}: an explanation is written as {', '.join(SUFFIXES[:-1])} or {SUFFIXES[-1]}, "
            f"by the file's suffix (got {path.suffix or 'none'})"
        )
    return path
