"""Issue 53: every public function and method of cli/ and training/ has type hints on its parameters and return."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "rckit"
ROOMS = ("cli", "training")

Function = ast.FunctionDef | ast.AsyncFunctionDef


def public_functions(tree: ast.Module) -> list[tuple[Function, bool]]:
    """The module-level functions and the methods of module-level classes whose names do not start
    with ``_`` (``__init__`` included), each with whether it is a method; nested functions are not
    counted."""
    found: list[tuple[Function, bool]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            found.append((node, False))
        elif isinstance(node, ast.ClassDef):
            found += [
                (item, True)
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                and (item.name == "__init__" or not item.name.startswith("_"))
            ]
    return found


def missing_hints(function: Function, method: bool) -> list[str]:
    """The parameters without an annotation (``self``/``cls`` of a method, ``*args`` and
    ``**kwargs`` exempt), and ``return`` where the return type is not given (``__init__`` exempt)."""
    a = function.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if method and params and params[0].arg in ("self", "cls"):
        params = params[1:]
    missing = [p.arg for p in params if p.annotation is None]
    if function.returns is None and function.name != "__init__":
        missing.append("return")
    return missing


def test_every_public_function_of_cli_and_training_has_type_hints():
    files = sorted(path for room in ROOMS for path in (PACKAGE / room).glob("*.py"))
    assert files, "no modules found under cli/ and training/"
    gaps = []
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for function, method in public_functions(tree):
            missing = missing_hints(function, method)
            if missing:
                where = path.relative_to(ROOT)
                gaps.append(f"{where}:{function.lineno}:{function.name} lacks hints for {', '.join(missing)}")
    assert not gaps, "public functions without type hints:\n" + "\n".join(gaps)


def test_every_module_of_cli_and_training_defers_its_annotations():
    """``from __future__ import annotations`` in each: the hints are never evaluated at run time, so a
    type imported under ``TYPE_CHECKING`` (torch, for the CLI) is never needed."""
    lacking = []
    for room in ROOMS:
        for path in sorted((PACKAGE / room).glob("*.py")):
            tree = ast.parse(path.read_text())
            if not any(
                isinstance(node, ast.ImportFrom)
                and node.module == "__future__"
                and any(alias.name == "annotations" for alias in node.names)
                for node in tree.body
            ):
                lacking.append(str(path.relative_to(ROOT)))
    assert not lacking, f"without `from __future__ import annotations`: {lacking}"
