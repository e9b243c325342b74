"""Plug-ins: one generic :class:`Registry` per extension kind, and how modules from outside
the package come in (entry points and ``--plugin MODULE``; docs/design.md §8).

Every extension kind is one contract (a base class) and one :class:`Registry` of it: measures
(:data:`kgprobe.probing.measures.registry.REGISTRY`), scoring backends
(:data:`kgprobe.probing.backends.base.BACKENDS`), loader formats
(:data:`kgprobe.loaders.formats.LOADERS`), distractor strategies
(:data:`kgprobe.probing.strategies.STRATEGIES`), report sections
(:data:`kgprobe.reports.sections.SECTIONS`), managed graph servers
(:data:`kgprobe.graph.servers.GRAPH_SERVERS`) and template formats
(:data:`kgprobe.loaders.templates.TEMPLATE_FORMATS`). A registry takes entries by decorator, finds
them by name, loads its entry-point group once, knows where each entry came from (for one-line
errors) and lists them (``kgprobe plugins``, ``kgprobe models``).

A plug-in is a module that registers entries of any kind when it is imported. Two ways in:

- an installed distribution declares an entry point in the group of its kind: :data:`MEASURES`
  (``kgprobe.measures``), :data:`BACKENDS` (``kgprobe.backends``), :data:`LOADERS`
  (``kgprobe.loaders``), :data:`STRATEGIES` (``kgprobe.strategies``), :data:`REPORT_SECTIONS`
  (``kgprobe.report_sections``), :data:`GRAPH_SERVERS` (``kgprobe.graph_servers``) or
  :data:`TEMPLATE_FORMATS` (``kgprobe.template_formats``); its value
  names a module
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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, TypeVar, cast, overload

from kgprobe.errors import ConfigError, PluginError

MEASURES = "kgprobe.measures"
BACKENDS = "kgprobe.backends"
LOADERS = "kgprobe.loaders"
STRATEGIES = "kgprobe.strategies"
REPORT_SECTIONS = "kgprobe.report_sections"
GRAPH_SERVERS = "kgprobe.graph_servers"
TEMPLATE_FORMATS = "kgprobe.template_formats"
GROUPS = (MEASURES, BACKENDS, LOADERS, STRATEGIES, REPORT_SECTIONS, GRAPH_SERVERS, TEMPLATE_FORMATS)
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


# --- the generic registry -----------------------------------------------------------------------

T = TypeVar("T")
_F = TypeVar("_F")

#: every registry made, by kind (what ``kgprobe plugins`` lists)
KINDS: dict[str, Registry[Any]] = {}


@dataclass(frozen=True)
class Entry:
    """One entry of a registry as a listing shows it: its name, where it came from
    (``built-in``, or the plug-in that registered it) and one line of description."""

    kind: str
    name: str
    origin: str
    description: str
    #: ``module:attr`` for an entry not imported yet (lazy), else the object's own path
    target: str


class Registry(Mapping[str, T], Generic[T]):
    """Named entries of one extension kind: classes that subclass ``base`` (as
    lm-evaluation-harness's ``Registry`` and rdflib's ``plugin.register``).

    - ``@registry.register`` (the name read from the class's ``name_attr``) or
      ``@registry.register("name")``; :meth:`add_lazy` for a ``"module:attr"`` imported on
      first use;
    - ``registry.lookup(name)`` loads the plug-ins first (:meth:`load`: the entry-point
      ``group``, ``--plugin`` and ``KGPROBE_PLUGINS``, each once) and names the choices when
      the name is unknown;
    - the contract of the kind: ``requires`` (class attributes that must be set),
      ``overrides`` (methods a class must write itself) and ``check`` (any further rule);
    - a name that is taken, an object that is not a ``base`` subclass, or a broken contract
      is a ``TypeError`` that names both entries (one line through :func:`load_plugins`);
    - :meth:`entries` lists every entry with its origin and description.

    It reads as a ``Mapping`` of the entries registered so far (``name in registry``,
    ``registry.get(name)``, iteration in registration order: built-ins first)."""

    def __init__(self, kind: str, group: str, base: type, *, name_attr: str | None = "name",
                 requires: Sequence[str] = (), overrides: Sequence[str] = (),
                 check: Callable[[Any], None] | None = None,
                 describe: Callable[[Any], str] | None = None,
                 on_add: Callable[[str, Any], None] | None = None) -> None:
        if group not in GROUPS:
            raise ValueError(f"unknown plug-in group {group!r}")
        self.kind, self.group, self.base = kind, group, base
        self._name_attr = name_attr
        self._requires, self._overrides = tuple(requires), tuple(overrides)
        self._check = check
        self._describe = describe or _first_doc_line
        self._on_add = on_add
        self._entries: dict[str, T] = {}
        self._lazy: dict[str, tuple[str, str]] = {}  # name -> ("module:attr", description)
        self._origins: dict[str, str] = {}
        #: every name in registration order, lazy or not (a lazy built-in stays before the
        #: plug-ins registered while it is still unimported)
        self._order: dict[str, None] = {}
        KINDS[kind] = self

    # --- Mapping -----------------------------------------------------------------------------

    def __getitem__(self, name: str) -> T:
        if name in self._lazy:
            self._resolve(name)
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(set(self._entries) | set(self._lazy))

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    # --- registering ---------------------------------------------------------------------------

    @overload
    def register(self, obj: str | None = None, /, *, origin: str | None = None) -> Callable[[_F], _F]: ...
    @overload
    def register(self, obj: _F, /, *, origin: str | None = None) -> _F: ...

    def register(self, obj: Any = None, /, *, origin: str | None = None) -> Any:
        """Class decorator: ``@registry.register`` (name from the class) or
        ``@registry.register("name")``."""
        if obj is not None and not isinstance(obj, str):
            self.add(None, obj, origin=origin)
            return obj

        def deco(cls: _F) -> _F:
            self.add(obj, cls, origin=origin)
            return cls

        return deco

    def _check_contract(self, cls: type) -> None:
        """The kind's contract, before anything is registered: every ``requires`` attribute
        set (a name, a summary for the help text), every ``overrides`` method written by the
        class (not the base's), then the kind's own ``check``."""
        for attr in self._requires:
            if not getattr(cls, attr, None):
                raise TypeError(f"{self.kind} {cls.__name__} has no {attr}")
        for method in self._overrides:
            if getattr(cls, method, None) is getattr(self.base, method):
                raise TypeError(f"{self.kind} {cls.__name__} has no {method}()")
        if self._check is not None:
            self._check(cls)

    def add(self, name: str | None, obj: Any, *, origin: str | None = None) -> Any:
        """Register ``obj`` under ``name`` (None: its ``name_attr``). ``origin``: the plug-in it
        comes from (by default the one :func:`load_plugins` is importing); a built-in (a
        ``kgprobe.`` module) records none."""
        if not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise TypeError(f"{self.kind} {_path(obj)} is not a subclass of {_path(self.base)}")
        self._check_contract(obj)
        if name is None:
            name = getattr(obj, self._name_attr or "", None)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.kind} {_path(obj)} has no name")
        old = self._entries.get(name)
        if name in self._lazy and old is None:
            raise TypeError(f"{self.kind} name {name!r} of {_path(obj)} is taken by "
                            f"{self._lazy[name][0]}")
        if old is not None and old is not obj:
            raise TypeError(f"{self.kind} name {name!r} of {_path(obj)} is taken by "
                            f"{'the built-in ' + self.kind if _builtin(old) else 'the ' + self.kind} "
                            f"{_path(old)}")
        if self._on_add is not None:
            self._on_add(name, obj)
        self._entries[name] = cast(T, obj)  # a subclass of ``base``, checked above
        self._order.setdefault(name)
        origin = origin or loading()
        if origin is not None and not _builtin(obj):
            self._origins.setdefault(name, origin)
        return obj

    def add_lazy(self, name: str, target: str, description: str = "") -> None:
        """Register ``"module:attr"`` under ``name``, imported on first use (a heavy module is
        listed without being imported)."""
        if name in self:
            raise TypeError(f"{self.kind} name {name!r} of {target} is taken")
        self._lazy[name] = (target, description)
        self._order.setdefault(name)

    def pop(self, name: str, default: Any = None) -> Any:
        """Remove an entry (tests register throw-away entries)."""
        self._lazy.pop(name, None)
        self._origins.pop(name, None)
        self._order.pop(name, None)
        return self._entries.pop(name, default)

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self.pop(name)

    # --- looking up ----------------------------------------------------------------------------

    def load(self) -> Registry[T]:
        """The registry with its plug-ins loaded (each once): modules register what they hold
        when imported; an entry point that names a class is registered under its own name, else
        the entry point's. Whatever fails is one :class:`PluginError` line naming the plug-in."""
        for plugin in load_plugins(self.group):
            obj = plugin.obj
            if isinstance(obj, ModuleType) or obj in self._entries.values():
                continue
            if not (isinstance(obj, type) and issubclass(obj, self.base)):
                raise PluginError(f"plugin {plugin.origin}: names {obj!r}, not a module or a "
                                  f"{self.base.__name__} subclass")
            own = getattr(obj, self._name_attr, None) if self._name_attr else None
            try:
                self.add(own if isinstance(own, str) and own else plugin.name, obj,
                         origin=plugin.origin)
            except (TypeError, ConfigError) as exc:
                raise PluginError(f"plugin {plugin.origin}: {exc}") from exc
        return self

    def lookup(self, name: str, hint: str = "") -> T:
        """The entry called ``name``, plug-ins loaded; an unknown name is one line that lists
        the known ones (and ``hint``)."""
        self.load()
        if name not in self:
            raise ConfigError(f"unknown {self.kind} {name!r}; choose from: {', '.join(self)}"
                              + (f" ({hint})" if hint else ""))
        return self[name]

    def origin(self, name: str) -> str | None:
        """Where the entry called ``name`` came from (the plug-in), None for a built-in."""
        return self._origins.get(name)

    def origin_of(self, obj: Any) -> str | None:
        """Where ``obj`` came from, as :meth:`origin`."""
        return next((self._origins.get(n) for n, o in self._entries.items() if o is obj), None)

    def entries(self) -> list[Entry]:
        """Every entry, plug-ins loaded, in registration order (built-ins first)."""
        self.load()
        out = []
        for name in self:
            if name in self._entries:
                obj = self._entries[name]
                out.append(Entry(self.kind, name, self._origins.get(name) or
                                 ("built-in" if _builtin(obj) else _path(obj)),
                                 self._describe(obj), _path(obj)))
            else:
                target, text = self._lazy[name]
                out.append(Entry(self.kind, name, "built-in" if target.startswith("kgprobe.")
                                 else target, text, target))
        return out

    def _resolve(self, name: str) -> None:
        target, _ = self._lazy.pop(name)
        module, _, attr = target.partition(":")
        obj = _import(target, f"{self.kind} {name} ({target})",
                      lambda: getattr(importlib.import_module(module), attr))
        try:
            self.add(name, obj)
        except TypeError as exc:
            raise PluginError(f"{self.kind} {name} ({target}): {exc}") from exc


def _path(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def _builtin(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "")).startswith("kgprobe.")


def _first_doc_line(obj: Any) -> str:
    """The first sentence of an object's docstring: its one line in a listing."""
    doc = " ".join((getattr(obj, "__doc__", None) or "").split())
    head, dot, _ = doc.partition(". ")
    return head + dot.strip()
