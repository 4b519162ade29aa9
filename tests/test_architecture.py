"""docs/architecture.md's map of the rooms names every module under src/rckit, and nothing that is not there."""

from __future__ import annotations

import ast
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


def floors() -> list[list[str]]:
    """The code block under "## Import floors", top floor first: each line's rooms (``cli``,
    ``presets.py``, ...)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("## Import floors", 1)[1].split("```", 2)[1]
    return [[name.strip() for name in line.split(",")] for line in block.splitlines() if line.strip()]


def room_of(module: str) -> str | None:
    """The room of ``rckit.X...``: a folder's name, or a top-level module's file name."""
    parts = module.split(".")
    if parts[0] != "rckit" or len(parts) < 2:
        return None
    return parts[1] if (PACKAGE / parts[1]).is_dir() else parts[1] + ".py"


def imports(path: Path) -> set[str]:
    """Every rckit module ``path`` imports, at the top or inside a function (``from rckit import
    kernels`` names ``rckit.kernels``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            if node.module == "rckit":
                found |= {f"rckit.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("rckit.")}


def test_every_import_runs_down_the_floors():
    levels = floors()
    floor_of = {room: i for i, line in enumerate(levels) for room in line}
    rooms = {
        p.name if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    assert sorted(rooms - set(floor_of)) == [], "rooms the floors leave out"
    assert sorted(set(floor_of) - rooms) == [], "floors name rooms that are not there"
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = path.relative_to(PACKAGE).parts[0]
        for module in sorted(imports(path)):
            there = room_of(module)
            if there is not None and there != here and floor_of[there] <= floor_of[here]:
                upward.append(
                    f"{path.relative_to(PACKAGE)} imports {module} (floor {floor_of[there]} from {floor_of[here]})"
                )
    assert not upward, "imports that do not run down the floors:\n" + "\n".join(upward)


def test_the_floors_test_sees_an_upward_import(tmp_path):
    """The check above can fail: a module of answering/ importing training/ is an upward import."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from rckit.training.loop import train\n    from rckit import kernels\n")
    found = imports(module)
    assert found == {"rckit.training.loop", "rckit.kernels"}
    floor_of = {room: i for i, line in enumerate(floors()) for room in line}
    assert floor_of[room_of("rckit.training.loop")] < floor_of["answering"]
    assert room_of("rckit.kernels") == "kernels" and room_of("rckit.presets") == "presets.py"


LONGEST_FUNCTION, LONGEST_FILE = 80, 700  # docs/style.md


def long_places(root: Path) -> list[str]:
    """Functions over LONGEST_FUNCTION lines and files over LONGEST_FILE lines under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > LONGEST_FILE:
            found.append(f"{path.relative_to(root)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > LONGEST_FUNCTION:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {n} lines")
    return found


def test_functions_and_files_keep_to_their_length():
    assert long_places(PACKAGE) == []


def test_the_length_check_sees_a_long_function(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(LONGEST_FUNCTION))
    (tmp_path / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}")
    assert long_places(tmp_path) == [f"m.py:5 long: {LONGEST_FUNCTION + 1} lines"]
