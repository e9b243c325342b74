"""Loader formats: the contract of one input format of ``kgprobe ingest`` (:class:`Loader`: a
name, file suffixes, content sniffing, a reader) and the registry of them (:data:`LOADERS`,
entry-point group ``kgprobe.loaders``).

Detection (:func:`kgprobe.loaders.detect_format`), the suffix table, the list of supported
inputs in error lines and ``kgprobe plugins`` are all read from the registry, so a new format
is one class in one module (or one installed package). The built-ins (:mod:`kgprobe.loaders.builtin`,
registered whenever any of ``kgprobe.loaders`` is imported) import their heavy modules (orjson, oxigraph, rdflib, SPARQLWrapper) only when a source of theirs
is read, so ``import kgprobe.loaders`` stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from kgprobe.loaders.common import Filters
from kgprobe.plugins import LOADERS as LOADER_GROUP
from kgprobe.plugins import Registry
from kgprobe.records import Record


class Loader:
    """One input format: records from a file (or an endpoint), the filters applied.

    A plug-in subclasses it, sets ``name``, ``title`` and ``suffixes`` (and ``sniff`` for
    files whose suffix says nothing) and writes :meth:`read`; ``@LOADERS.register`` (or an entry
    point of the group ``kgprobe.loaders``) makes ``kgprobe ingest`` read its files."""

    #: the format's name (``open_source(..., fmt=NAME)``, ``kgprobe plugins``)
    name: ClassVar[str] = ""
    #: what the line listing the supported inputs shows: ``Turtle (.ttl)``
    title: ClassVar[str] = ""
    #: file suffixes of the format, lower case with the dot; ``.gz``/``.bz2``/``.zst`` after them are
    #: looked through (:func:`kgprobe.loaders.common.base_suffix`)
    suffixes: ClassVar[tuple[str, ...]] = ()
    #: reads http(s) URLs (an endpoint) instead of files
    reads_urls: ClassVar[bool] = False
    #: parsed in worker processes with checkpoints: :meth:`read` takes the options
    #: ``workers``, ``positions``, ``start`` and ``post`` (``kgprobe ingest --workers/--resume``)
    resumable: ClassVar[bool] = False

    @classmethod
    def sniff(cls, head: str) -> bool:
        """Whether a file of unknown suffix whose first 64 KiB of text are ``head`` is of this
        format (the first format that says yes reads it)."""
        return False

    def read(self, source: str | Path, filters: Filters, **options: Any) -> Iterator[Record]:
        """The records of ``source`` that pass ``filters``; ``options``: the format's own
        keywords (``kgprobe.loaders.open_source`` passes on what it does not know). A file it
        cannot read is one :class:`~kgprobe.errors.InputError` line."""
        raise NotImplementedError


def _check_loader(cls: type[Loader]) -> None:
    """A loader's suffixes are well formed, and something can pick it."""
    bad = [s for s in cls.suffixes if not re.fullmatch(r"\.[a-z0-9_+-]+", s)]
    if bad:
        raise TypeError(f"loader {cls.__name__}: suffixes are lower case with the dot, not {bad}")
    if not cls.suffixes and not cls.reads_urls and cls.sniff.__func__ is Loader.sniff.__func__:  # type: ignore[attr-defined]
        raise TypeError(f"loader {cls.__name__} has no suffixes, no sniff() and reads no URLs: "
                        "nothing would ever pick it")


def _check_suffixes(name: str, cls: type[Loader]) -> None:
    """A suffix belongs to one format: a second claim is an error naming both."""
    for other, known in LOADERS.items():
        taken = sorted(set(known.suffixes) & set(cls.suffixes))
        if taken and other != name:
            raise TypeError(f"loader {name!r} ({cls.__module__}.{cls.__qualname__}): suffix "
                            f"{', '.join(taken)} is taken by the loader {other!r}")


#: every loader format by name: the built-ins below, then the plug-ins of ``kgprobe.loaders``
LOADERS: Registry[type[Loader]] = Registry(
    "loader", LOADER_GROUP, Loader, requires=("title",), overrides=("read",),
    check=_check_loader, describe=lambda cls: cls.title,
    on_add=_check_suffixes)


def first_line(head: str) -> str:
    """The first line of ``head`` that is neither blank nor a ``#`` comment ('' if none)."""
    for line in head.splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            return s
    return ""


def suffix_table(*, plugins: bool = True) -> dict[str, str]:
    """Suffix -> format name over every registered format (``plugins``: load them first)."""
    formats = LOADERS.load() if plugins else LOADERS
    return {s: name for name, cls in formats.items() for s in cls.suffixes}


def supported(*, plugins: bool = True) -> str:
    """The inputs ``kgprobe ingest`` reads, as error lines list them (``plugins``: load them
    first): ``Wikidata JSON (.json), N-Triples (.nt) or Turtle (.ttl), optionally .gz/.bz2/.zst, or
    an http(s) SPARQL endpoint``."""
    formats = LOADERS.load() if plugins else LOADERS
    files = [cls.title for cls in formats.values() if not cls.reads_urls]
    urls = [cls.title for cls in formats.values() if cls.reads_urls]
    text = (", ".join(files[:-1]) + " or " + files[-1]) if len(files) > 1 else "".join(files)
    text += ", optionally .gz/.bz2/.zst" if files else ""
    return text + "".join(f", or {u}" for u in urls)
