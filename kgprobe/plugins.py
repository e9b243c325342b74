"""Plug-ins from outside the package: entry points and ``--plugin MODULE`` (docs/design.md §8).

A plug-in is a module that registers measures (``@register`` of
:mod:`kgprobe.probing.measures.registry`) or backends when it is imported. Two ways in:

- an installed distribution declares an entry point in the group :data:`MEASURES`
  (``kgprobe.measures``) or :data:`BACKENDS` (``kgprobe.backends``); its value names a module
  (imported) or an object in one (``pkg.mod:Top1``, loaded and handed to the caller);
- a module named on the command line (``kgprobe --plugin MODULE``, repeatable) or in
  ``KGPROBE_PLUGINS`` (comma-separated), imported for every group.

The registry and the backend table call :func:`load_plugins` once they hold their built-ins, so a
plug-in that takes a built-in name fails with one line instead of replacing it. This module sits
at the bottom of the house: it imports nothing of kgprobe but :mod:`kgprobe.errors`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kgprobe.errors import PluginError

MEASURES = "kgprobe.measures"
BACKENDS = "kgprobe.backends"
GROUPS = (MEASURES, BACKENDS)
ENV_PLUGINS = "KGPROBE_PLUGINS"

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
log = logging.getLogger(__name__)

#: modules named by ``--plugin`` (the CLI's root option); see :func:`use`
_cli_modules: list[str] = []
#: what a (group, modules) pair loaded, so the registry may call :func:`load_plugins` often
_loaded: dict[tuple[str, tuple[str, ...]], list[Plugin]] = {}
#: the origin of the plug-in being imported now (innermost last), so that what it registers
#: can say where it came from in a later error line (:func:`loading`)
_importing: list[str] = []


@dataclass(frozen=True)
class Plugin:
    """One loaded plug-in: its name (the entry point's or the module's), where it came from
    (for error lines) and the loaded object (a module, or what the entry point names)."""

    name: str
    origin: str
    obj: Any


def _check_name(name: str, where: str) -> str:
    name = name.strip()
    if not _MODULE.fullmatch(name):
        raise PluginError(f"{where}: {name!r} is not a Python module name (e.g. kgprobe_top1)")
    return name


def use(modules: Sequence[str]) -> None:
    """Remember the modules of ``--plugin`` (imported by :func:`load_plugins`, after the
    built-ins). Each must be importable: a missing one is one line now, whatever the command."""
    import importlib.util

    for raw in modules:
        name = _check_name(raw, "--plugin")
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError) as exc:  # a parent package that is missing or broken
            raise PluginError(f"--plugin {name}: cannot be imported: {_one_line(exc)}") from None
        if not found:
            raise PluginError(f"--plugin {name}: no such module (is it installed, or on PYTHONPATH?)")
        if name not in _cli_modules:
            _cli_modules.append(name)


def plugin_modules(extra_modules: Sequence[str] = ()) -> tuple[str, ...]:
    """The modules to import besides entry points: ``extra_modules``, ``--plugin``, then
    ``KGPROBE_PLUGINS`` (comma- or space-separated), each once."""
    env = [m for m in re.split(r"[,\s]+", os.environ.get(ENV_PLUGINS, "")) if m]
    names = [_check_name(m, "plugin") for m in extra_modules]
    names += _cli_modules
    names += [_check_name(m, ENV_PLUGINS) for m in env]
    return tuple(dict.fromkeys(names))


def load_plugins(group: str, extra_modules: Sequence[str] = ()) -> list[Plugin]:
    """Import every entry point of ``group`` and every plug-in module (:func:`plugin_modules`);
    the loaded objects, entry points first. Any failure (an import error, an exception while
    registering, e.g. a measure name that is taken) is a :class:`PluginError`: one line that
    names the plug-in, exit code 2. A successful load is remembered per group and modules."""
    if group not in GROUPS:
        raise ValueError(f"unknown plug-in group {group!r}")
    modules = plugin_modules(extra_modules)
    key = (group, modules)
    if key in _loaded:
        return _loaded[key]
    out: list[Plugin] = []
    for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        origin = (f"entry point {ep.name} = {ep.value} of "
                  f"{dist.metadata['Name'] + ' ' + dist.version if dist is not None else 'an installed package'}"
                  f" ({group})")
        obj = _import(origin, f"plugin {origin}", ep.load)
        log.info("plug-in loaded: %s", origin)
        out.append(Plugin(ep.name, origin, obj))
    for name in modules:
        origin = f"module {name} ({_module_origin(name)})"
        obj = _import(origin, f"plugin module {name}", functools.partial(importlib.import_module, name))
        log.info("plug-in loaded: module %s (%s)", name, group)
        out.append(Plugin(name, origin, obj))
    _loaded[key] = out
    return out


def _import(origin: str, where: str, load: Callable[[], Any]) -> Any:
    """``load()`` with ``origin`` as :func:`loading`. Whatever the plug-in does wrong while it
    is imported is one line naming it: an exception, and ``sys.exit()`` too (a SystemExit would
    otherwise end the command, with exit status 0 for ``sys.exit(0)``, having done nothing)."""
    _importing.append(origin)
    try:
        return load()
    except SystemExit as exc:
        raise PluginError(f"plugin {origin}: called sys.exit({exc.code!r}) while being imported; "
                          "a plug-in must not end the program") from exc
    except Exception as exc:  # a plug-in's own failure, whatever it is, is one line
        raise PluginError(f"{where}: {_one_line(exc)}") from exc
    finally:
        _importing.pop()


def loading() -> str | None:
    """Where the plug-in being imported now comes from (entry point, ``--plugin`` or
    ``KGPROBE_PLUGINS``), for the registry to record beside what it registers; None outside
    :func:`load_plugins`."""
    return _importing[-1] if _importing else None


def _module_origin(name: str) -> str:
    """How a plug-in module was named: ``--plugin`` or ``KGPROBE_PLUGINS`` (both, or the
    caller's ``extra_modules``)."""
    env = re.split(r"[,\s]+", os.environ.get(ENV_PLUGINS, ""))
    ways = [w for w, hit in (("--plugin", name in _cli_modules), (ENV_PLUGINS, name in env)) if hit]
    return " and ".join(ways) or "load_plugins"


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (a SyntaxError's or a chained message may span several)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
