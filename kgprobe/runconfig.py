"""``--config FILE``: a command's options from a YAML or TOML file, so that a run can be kept,
shared and repeated (lm-evaluation-harness has the same option). Keys are the command's option
names (``batch-facts`` or ``batch_facts``, ``relation``, ``model-arg``); options given on the
command line win over the file. An unknown key is an error naming it; values are checked by
the option's own type, exactly as on the command line (docs/results.md, "Run configuration").

Example ``run.yaml``::

    model: smollm2-135m
    relation: [P17, P36]
    sample: 100
    seed: 1
    dtype: bfloat16
    model_args: {revision: main}
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kgprobe.errors import ConfigError, InputError

#: ``model_args`` (a mapping, as the harness writes it) is accepted for ``--model-arg``.
ALIASES = {"model_args": "model_arg"}


def read_config(path: str | Path) -> dict[str, Any]:
    """The file's mapping: ``.toml`` as TOML, anything else as YAML (JSON is YAML too)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--config {path}: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".toml":
            data: Any = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise ConfigError(f"--config {path}: not valid TOML: {exc}") from None
    except Exception as exc:  # yaml.YAMLError, without importing yaml for a TOML file
        raise ConfigError(f"--config {path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the file must hold a mapping of option names to values")
    return data


def _spellings(name: str, opts: Iterable[str]) -> set[str]:
    out = {name, name.replace("_", "-")}
    for o in opts:
        if o.startswith("--"):
            out |= {o[2:], o[2:].replace("-", "_")}
        elif o.startswith("-") and len(o) == 2:
            out.add(o[1:])
    return out


def _value(key: str, value: Any, multiple: bool) -> Any:
    if key in ("model_arg", "model-arg", "model_args") and isinstance(value, Mapping):
        return [f"{k}={'true' if v is True else 'false' if v is False else v}" for k, v in value.items()]
    if multiple and not isinstance(value, list | tuple):
        return [value]
    if isinstance(value, Mapping):
        raise ConfigError(f"--config: {key} takes a value, not a mapping")
    return value


def config_defaults(path: str | Path, params: Iterable[Any], skip: Iterable[str] = ("config",)) -> dict[str, Any]:
    """``{parameter name: value}`` for a click command's ``default_map`` from the file at
    ``path``: every key must name one of ``params`` (click parameters); unknown keys are
    refused together, each with the closest option name."""
    data = read_config(path)
    by_spelling: dict[str, Any] = {}
    for prm in params:
        if prm.name in skip or not getattr(prm, "opts", None):
            continue
        for sp in _spellings(prm.name, [*prm.opts, *getattr(prm, "secondary_opts", [])]):
            by_spelling.setdefault(sp, prm)
    out: dict[str, Any] = {}
    unknown = []
    for raw, value in data.items():
        key = ALIASES.get(str(raw), str(raw))
        prm = by_spelling.get(key)
        if prm is None:
            unknown.append(str(raw))
            continue
        if prm.name in out:
            raise ConfigError(f"--config {path}: {raw} is given twice (as another spelling)")
        out[prm.name] = _value(key, value, bool(getattr(prm, "multiple", False)))
    if unknown:
        names = sorted({s for s in by_spelling if "-" not in s})
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, names, n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(f"--config {path}: unknown key{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(hints)}; known: {', '.join(names)}")
    return out
