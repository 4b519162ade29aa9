"""docs/architecture.md's map of the rooms names every module under src/rckit, and nothing that is not there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "rckit"


def rooms_map() -> dict[str, str]:
    """The code block under "## The rooms": each entry (``cli/``, ``config.py``, ...) with its text,
    continuation lines included."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## The rooms", 1)[1].split("```", 2)[1]
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        head = re.match(r"^  (\S+)\s*(.*)$", line)
        if head:
            current = head.group(1)
            entries[current] = head.group(2)
        elif current is not None and line.strip():
            entries[current] += " " + line.strip()
    return entries


def test_every_module_is_named_in_its_room_and_every_name_is_a_module():
    entries = rooms_map()
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) == 1:  # a module at the top: its own entry
            if path.name not in entries:
                missing.append(path.name)
            continue
        room = parts[0] + "/"
        if room not in entries:
            missing.append(room)
        elif path.name != "__init__.py" and not re.search(rf"(?<![\w.]){re.escape(path.name)}", entries[room]):
            missing.append(str(path.relative_to(PACKAGE)))
    assert not missing, f"docs/architecture.md does not name: {sorted(set(missing))}"
    named = [
        (room, name) for room, text in entries.items() if room.endswith("/") for name in re.findall(r"[\w]+\.py", text)
    ]
    assert named, "the map names no module"
    gone = [f"{room}{name}" for room, name in named if not list((PACKAGE / room).rglob(name))]
    assert not gone, f"docs/architecture.md names modules that are not there: {gone}"
