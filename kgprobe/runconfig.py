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
from kgprobe.types import JSONObject

#: ``model_args`` (a mapping, as the harness writes it) is accepted for ``--model-arg``.
ALIASES = {"model_args": "model_arg"}


#: a run's options fit in far less; a larger file is refused before it is parsed
MAX_CONFIG_BYTES = 1 << 20
#: YAML aliases (``*name``) in one file: a handful is plenty for a run's options, and a cap stops
#: a "billion laughs" document (aliases of aliases) from expanding into gigabytes
MAX_ALIASES = 100
#: values (list items, mapping entries, scalars) in the whole file, counting every alias's copy
MAX_VALUES = 10_000
#: characters in one string value
MAX_STRING_CHARS = 100_000


def read_config(path: str | Path) -> JSONObject:
    """The file's mapping: ``.toml`` as TOML, anything else as YAML (JSON is YAML too). The file
    is bounded (:data:`MAX_CONFIG_BYTES`, UTF-8, :data:`MAX_ALIASES`, :data:`MAX_VALUES`,
    :data:`MAX_STRING_CHARS`): a config is read before any check of its values, so it must not
    be able to take the machine's memory or time (docs/guarantees.md)."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise InputError(f"--config {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"--config {path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; "
                          "a run's options fit in a few lines")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config {path}: not UTF-8 text (byte {exc.start}); save the file "
                          "as UTF-8") from None
    try:
        if p.suffix.lower() == ".toml":
            data: Any = tomllib.loads(text)
        else:
            data = _load_yaml(text)
        _check_size(data)
    except ConfigError as exc:
        raise ConfigError(f"--config {path}: {exc}") from None
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise ConfigError(f"--config {path}: not valid TOML: {exc}") from None
    except Exception as exc:  # yaml.YAMLError, without importing yaml for a TOML file
        raise ConfigError(f"--config {path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: the file must hold a mapping of option names to values")
    return data


def _load_yaml(text: str) -> Any:
    """``yaml.safe_load`` with at most :data:`MAX_ALIASES` aliases (counted as they are composed,
    before anything is expanded)."""
    import yaml

    class Bounded(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise ConfigError(f"more than {MAX_ALIASES} YAML aliases (*name); a run's "
                                      "options need none")
            return super().compose_node(parent, index)

    loader = Bounded(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _check_size(data: Any) -> None:
    """At most :data:`MAX_VALUES` values in all (an alias's value counted at each use) and no
    string over :data:`MAX_STRING_CHARS`; stops counting at the first value over the limit."""
    count = 0
    stack = [data]
    while stack:
        value = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConfigError(f"more than {MAX_VALUES:,} values; a run's options fit in far fewer")
        if isinstance(value, str) and len(value) > MAX_STRING_CHARS:
            raise ConfigError(f"a value of {len(value):,} characters (limit {MAX_STRING_CHARS:,})")
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)


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


def config_defaults(path: str | Path, params: Iterable[Any], skip: Iterable[str] = ("config",)) -> dict[str, object]:
    """``{parameter name: value}`` for a click command's ``default_map`` from the file at
    ``path``: every key must name one of ``params`` (click parameters); unknown keys are
    refused together, each with the closest option name."""
    data = read_config(path)
    by_spelling: dict[str, Any] = {}  # spelling -> the click parameter (typer's own click: untyped here)
    for prm in params:
        if prm.name in skip or not getattr(prm, "opts", None):
            continue
        for sp in _spellings(prm.name, [*prm.opts, *getattr(prm, "secondary_opts", [])]):
            by_spelling.setdefault(sp, prm)
    out: dict[str, object] = {}
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
