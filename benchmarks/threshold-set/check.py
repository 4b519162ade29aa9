#!/usr/bin/env python3
"""Validate this folder's questions.json with the yardstick's checker (benchmarks/yardstick/check.py takes a path)."""

import importlib.util
import sys
from pathlib import Path


def main() -> int:
    sys.dont_write_bytecode = True  # leave no __pycache__ in benchmarks/yardstick
    here = Path(__file__).resolve().parent
    spec = importlib.util.spec_from_file_location("yardstick_check", here.parent / "yardstick" / "check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    return check.main(str(here / "questions.json"))


if __name__ == "__main__":
    sys.exit(main())
