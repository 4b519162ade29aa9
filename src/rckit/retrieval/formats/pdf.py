"""The text of a PDF, page by page, with pypdf.

Each page's ``extract_text()``, stripped; pages joined by a blank line, a region for each page
that has text (``page`` is its 1-based number in the file, not its printed label). A PDF encrypted
with an empty user password (common: it only restricts printing or copying) is opened; one that
needs a password is refused. So is a PDF none of whose pages has text (a scan: it needs OCR first).

A damaged file is refused whole, never half-read: any error on any page refuses it, and so does a
file without ``%%EOF`` near its end (cut short: pypdf in its forgiving mode may rebuild what is
left of a file and read some of its pages), and so does a reference to an object that is not
in the file (pypdf reads it as nothing and only warns) or a page tree that lists more pages than
are there. pypdf's log is kept off stderr while a file is read; a file it repairs otherwise (wrong
offsets in its cross-reference table, a stream of the wrong length) is read.

pypdf (and cryptography, for AES-encrypted files) is imported when a file is read, not when this
module is.
"""

from __future__ import annotations

import io
import logging
import re
from contextlib import contextmanager

# Extracted text: (title or None, text, regions as (start, page, section)).
Extracted = tuple[str | None, str, list[tuple[int, int | None, str | None]]]

NO_TEXT = "no text layer (a scanned PDF? make it searchable with OCR first, e.g. ocrmypdf)"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")  # a broken font's text may hold them; SQLite's text cannot
_MISSING = re.compile(r"Object \d+ \d+ not defined")  # pypdf's warning for a reference to no object


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextmanager
def _pypdf_log():
    """pypdf's log kept off stderr while a file is read (a folder of PDFs would fill the terminal),
    its messages kept: pypdf only warns of some damage."""
    log = logging.getLogger("pypdf")
    kept, propagate = _Kept(), log.propagate
    log.addHandler(kept)
    log.propagate = False
    try:
        yield kept.messages
    finally:
        log.removeHandler(kept)
        log.propagate = propagate


def _title(reader) -> str | None:
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:  # a damaged information dictionary only costs the title
        return None
    if not isinstance(title, str):
        return None
    title = " ".join(_UNSTORABLE.sub("", title).split())
    return title or None


def extract(data: bytes) -> Extracted:
    """A PDF's title (its metadata's /Title, None without one), its text and a region per page."""
    import pypdf
    from pypdf.errors import DependencyError

    if b"%PDF-" not in data[:1024]:
        raise ValueError("not a PDF (no %PDF- header)")
    if b"%%EOF" not in data[-1024:]:
        raise ValueError("truncated (no %%EOF at its end)")
    with _pypdf_log() as log:
        try:
            reader = pypdf.PdfReader(io.BytesIO(data))
            if reader.is_encrypted:
                try:
                    opened = reader.decrypt("")
                except NotImplementedError as e:
                    raise ValueError(f"encrypted in a way pypdf cannot read ({e})") from None
                if opened == pypdf.PasswordType.NOT_DECRYPTED:
                    raise ValueError("encrypted (needs a password)")
            pages = []
            for n, page in enumerate(reader.pages, 1):
                try:
                    pages.append((n, _UNSTORABLE.sub("", page.extract_text()).strip()))
                except DependencyError:
                    raise
                except Exception as e:
                    raise ValueError(f"not a readable PDF (page {n}: {type(e).__name__}: {e})") from None
            tree = reader.trailer["/Root"]["/Pages"]
            listed = tree["/Count"] if "/Count" in tree else len(pages)
            title = _title(reader)
        except DependencyError as e:  # decrypting AES: pypdf checks for cryptography only then
            if "cryptography" in str(e):
                raise ImportError(str(e), name="cryptography") from None
            raise ValueError(f"not a readable PDF ({e})") from None
        except (ValueError, ImportError):
            raise
        except Exception as e:  # pypdf's errors on a damaged file are many kinds, all a refusal
            raise ValueError(f"not a readable PDF ({type(e).__name__}: {e})") from None
    missing = [m for m in log if _MISSING.match(m)]
    if missing:  # pypdf reads a missing object as nothing: a page or its text would be lost
        raise ValueError(f"damaged ({missing[0].rstrip('.').lower()})")
    if listed != len(pages):
        raise ValueError(f"damaged (its page tree lists {listed} pages, {len(pages)} are there)")
    if not pages:
        raise ValueError("no pages")
    parts, regions, pos = [], [], 0
    for n, text in pages:
        if not text:
            continue
        if parts:
            pos += 2
        regions.append((pos, n, None))
        parts.append(text)
        pos += len(text)
    if not parts:
        raise ValueError(NO_TEXT)
    return title, "\n\n".join(parts), regions
