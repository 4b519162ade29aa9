"""Dataclass configs: presets from small JSON/TOML files and ``--set a.b=c`` overrides."""

from __future__ import annotations

import dataclasses
import json
import tomllib
import types
import typing
from pathlib import Path


def _coerce(value: str, kind, name: str):
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if value.lower() in ("none", "null"):
            return None
        for a in args:
            try:
                return _coerce(value, a, name)
            except ValueError:
                continue
        raise ValueError(f"{name}: cannot read {value!r} as {kind}")
    if kind is bool:
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}: expected true/false, got {value!r}")
    if kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            raise ValueError(f"{name}: expected {kind.__name__}, got {value!r}") from None
    if kind is str:
        return value
    if origin in (list, tuple) or kind in (list, tuple):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{name}: expected a JSON list such as [1, 2], got {value!r}") from None
        if not isinstance(parsed, list):
            raise ValueError(f"{name}: expected a JSON list such as [1, 2], got {value!r}")
        return tuple(parsed) if (origin or kind) is tuple else list(parsed)
    raise ValueError(f"{name}: unsupported field type {kind}")


def apply_overrides(cfg, overrides: list[str] | dict):
    """Return a copy of dataclass ``cfg`` with ``key=value`` (or ``a.b=value``) fields set."""
    if isinstance(overrides, dict):
        items = list(overrides.items())
    else:
        items = []
        for o in overrides:
            if "=" not in o:
                raise ValueError(f"--set expects key=value, got {o!r}")
            k, v = o.split("=", 1)
            items.append((k.strip(), v.strip()))
    for key, value in items:
        cfg = _set(cfg, key.split("."), value, key)
    return cfg


def _set(cfg, path: list[str], value, full: str):
    hints = typing.get_type_hints(type(cfg))
    name = path[0]
    if name not in hints:
        known = ", ".join(f.name for f in dataclasses.fields(cfg))
        raise ValueError(f"unknown setting {full!r} for {type(cfg).__name__} (known: {known})")
    current = getattr(cfg, name)
    if len(path) > 1:
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"{full!r}: {name} has no sub-settings")
        return dataclasses.replace(cfg, **{name: _set(current, path[1:], value, full)})
    if isinstance(value, str):
        value = _coerce(value, hints[name], full)
    return dataclasses.replace(cfg, **{name: value})


def load_preset(path: str | Path) -> dict:
    """A preset file: a flat or nested mapping of field values (JSON or TOML)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except ValueError as e:  # JSONDecodeError, TOMLDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path}: not a readable preset ({e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a preset is an object of settings, not a {type(data).__name__}")
    return data


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def differences(before: dict, after: dict, limit: int = 4) -> str:
    """``key: old -> new`` for the (nested, dotted) settings where two config dicts differ.

    For one-line messages: at most ``limit`` keys are named, the rest counted.
    """
    a, b = flatten(before), flatten(after)
    diffs = [
        f"{k}: {json.dumps(a.get(k, '<absent>'))} -> {json.dumps(b.get(k, '<absent>'))}"
        for k in sorted(set(a) | set(b))
        if a.get(k, "<absent>") != b.get(k, "<absent>")
    ]
    more = f" and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return ", ".join(diffs[:limit]) + more


def from_dict(kind, data: dict):
    """Rebuild a (possibly nested) dataclass from ``dataclasses.asdict`` output."""
    hints = typing.get_type_hints(kind)
    kwargs = {}
    names = {f.name for f in dataclasses.fields(kind)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{kind.__name__}: unknown fields {sorted(unknown)}")
    for k, v in data.items():
        t = hints[k]
        if dataclasses.is_dataclass(t) and isinstance(v, dict):
            v = from_dict(t, v)
        elif isinstance(v, list) and (t is tuple or typing.get_origin(t) is tuple):
            v = tuple(v)
        kwargs[k] = v
    return kind(**kwargs)
