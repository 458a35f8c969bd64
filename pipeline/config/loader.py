"""Load a run config: YAML file + dotted ``key=value`` overrides -> typed dataclasses.

Why not ``HfArgumentParser``: it handles one flat dataclass per argument group and does no
type checking in ``parse_dict``; our config is nested by stage (``train.lr``, ``rollout.engine``)
and must reject unknown keys and wrong types with a one-line error naming the key. This file
is the small, strict piece that does exactly that; the schema itself lives in ``schema.py`` and
the rules about values in ``checks.py``. The YAML file and the overrides are read and typed
first, then each section is built once from both, so its checks see the final values.

Field help text is the string literal written under each field (an attribute docstring);
``field_docs`` reads it back with ``ast`` so ``mathrl config --help`` and this loader's errors
can show it without writing the text twice.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from pipeline.config.checks import ConfigError


def field_docs(cls: type) -> dict[str, str]:
    """Map field name -> the docstring written under it in the class body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for prev, node in zip(body, body[1:]):
        if (isinstance(prev, ast.AnnAssign) and isinstance(prev.target, ast.Name)
                and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            docs[prev.target.id] = " ".join(node.value.value.split())
    return docs


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if get_origin(tp) is list and get_origin(get_args(tp)[0]) is Literal:
        return f"list of {_type_name(get_args(tp)[0])}"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Return ``value`` converted to ``tp`` or raise ConfigError naming ``key``."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(key, value, arg)
            except ConfigError:
                pass
        raise ConfigError(f"{key}: expected {' or '.join(_type_name(a) for a in args)}, got {value!r}")
    if origin is Literal:
        for allowed in args:
            if value == allowed or (isinstance(value, str) and str(allowed) == value):
                return allowed
        raise ConfigError(f"{key}: {value!r} is not allowed; choose one of {', '.join(map(repr, args))}")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = yaml.safe_load(value) if value.strip().startswith("[") else [
                v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        item = args[0] if args else Any
        return [_coerce(f"{key}[{i}]", v, item) for i, v in enumerate(value)]
    if origin is dict:
        if isinstance(value, str):
            value = yaml.safe_load(value)
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping like {{a: 1.0}}, got {value!r}")
        kt, vt = args if args else (Any, Any)
        return {_coerce(key, k, kt): _coerce(f"{key}.{k}", v, vt) for k, v in value.items()}
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    raise ConfigError(f"{key}: unsupported field type {tp!r}")


class _Section(dict):
    """Changes to one nested section (as opposed to a dict-valued field such as reward.weights)."""


def _changes(cls: type, updates: dict[str, Any], prefix: str) -> _Section:
    """``updates`` (a nested dict of raw values) checked against dataclass ``cls`` and coerced to
    the field types; nothing is built yet."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    out = _Section()
    for key, value in updates.items():
        path = f"{prefix}{key}"
        if key not in names:
            raise ConfigError(f"unknown config key '{path}'; valid keys here: {', '.join(sorted(names))}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: expected a section (mapping), got {value!r}")
            out[key] = _changes(tp, value, f"{path}.")
        else:
            out[key] = _coerce(path, value, tp)
    return out


def _combine(first: _Section, then: _Section) -> _Section:
    """``then`` applied over ``first``: sections merge key by key, a field's value is replaced."""
    out = _Section(first)
    for key, value in then.items():
        out[key] = _combine(out[key], value) if isinstance(value, _Section) and key in out else value
    return out


def _build(current: Any, changes: _Section, prefix: str = "") -> Any:
    """A copy of dataclass ``current`` with ``changes`` applied; each changed section is built
    once, so its ``__post_init__`` checks (checks.py) see the final values."""
    kwargs = {key: _build(getattr(current, key), value, f"{prefix}{key}.") if isinstance(value, _Section) else value
              for key, value in changes.items()}
    try:
        return dataclasses.replace(current, **kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:  # a check that raised something else: still one line
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: {e}") from None


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """Turn ``["train.lr=1e-5", "name=x"]`` into a nested dict of raw string values."""
    nested: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value (e.g. train.lr=1e-5)")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {key!r} conflicts with another override")
        node[parts[-1]] = value
    return nested


def load_config(cls: type, path: str | Path | None = None, overrides: list[str] | None = None):
    """Build ``cls`` from defaults, then the YAML file at ``path``, then ``overrides`` (later wins)."""
    changes = _Section()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        raw = yaml.safe_load(path.read_text()) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: top level must be a mapping of sections")
        changes = _changes(cls, raw, "")
    if overrides:
        changes = _combine(changes, _changes(cls, parse_overrides(overrides), ""))
    return _build(cls(), changes)


def with_overrides(cfg: Any, overrides: list[str]):
    """A copy of the built config ``cfg`` with dotted ``key=value`` overrides applied and checked,
    as if they had followed the ones it was loaded with."""
    return _build(cfg, _changes(type(cfg), parse_overrides(overrides), ""))


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def save_config(cfg: Any, path: str | Path) -> None:
    """Write the resolved config as YAML (what the run actually used)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def describe(cls: type, prefix: str = "") -> list[str]:
    """One line per leaf field: ``key (type, default): doc`` — the CLI's config help."""
    lines = []
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    default = cls()
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            lines.append(f"[{prefix}{f.name}] {' '.join((tp.__doc__ or '').split())}")
            lines.extend(describe(tp, f"{prefix}{f.name}."))
        else:
            lines.append(f"  {prefix}{f.name} ({_type_name(tp)}, default {getattr(default, f.name)!r}): "
                         f"{docs.get(f.name, '')}")
    return lines
