"""Loaders: Wikidata JSON, RDF (N-Triples/Turtle), SPARQL and plug-in formats → plain records.

``open_source`` is the one entry the ingest needs: it picks the loader format of the registry
(:data:`~kgprobe.loaders.formats.LOADERS`) by extension (or, for unknown extensions, by
content), applies the same filters to every format, and fails at call time — not on the first record — with one clear :class:`~kgprobe.errors.InputError` line for
a file it cannot read. Heavy imports (rdflib, SPARQLWrapper) happen only when a source needs
them, so ``import kgprobe.loaders`` stays cheap.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kgprobe.errors import InputError
from kgprobe.loaders import builtin  # noqa: F401  (registers the built-in formats)
from kgprobe.loaders.common import Filters, base_suffix, open_text
from kgprobe.loaders.formats import LOADERS, Loader, suffix_table, supported
from kgprobe.records import Record

#: the built-in formats' names; every registered one (plug-ins too): ``list(LOADERS.load())``
FORMATS = tuple(LOADERS)
_URL = re.compile(r"^https?://", re.IGNORECASE)
#: the inputs the built-in formats read; :func:`~kgprobe.loaders.formats.supported` adds plug-ins'
SUPPORTED = supported(plugins=False)


def _sniff(path: Path) -> str | None:
    """The first format whose ``sniff`` claims the file's first 64 KiB of text."""
    try:
        with open_text(path) as fh:
            head = fh.read(65536)
    except (UnicodeDecodeError, EOFError, OSError, zlib.error) as exc:
        raise InputError(
            f"{path}: unsupported file, not readable text ({exc}); expected {supported()}"
        ) from exc
    return next((name for name, cls in LOADERS.load().items() if not cls.reads_urls and cls.sniff(head)),
                None)


def detect_format(path_or_url: str | Path) -> str:
    """The name of the format that reads ``path_or_url`` (``json``, ``nt``, ``turtle``,
    ``sparql`` or a plug-in's): an http(s) URL goes to the first format that reads URLs, a
    file by its suffix, else by its content; InputError (one line) when none reads it."""
    text = str(path_or_url)
    if _URL.match(text):
        urls = [name for name, cls in LOADERS.load().items() if cls.reads_urls]
        return urls[0]  # the built-in SPARQL loader is always there
    p = Path(text)
    if not p.exists():
        raise InputError(f"{p}: no such file")
    if p.is_dir():
        raise InputError(f"{p}: is a directory; give the files inside it")
    fmt = suffix_table().get(base_suffix(p))
    if fmt is None:
        fmt = _sniff(p)
    if fmt is None:
        raise InputError(f"{p}: unsupported file; expected {supported()}")
    return fmt


def open_source(
    path_or_url: str | Path,
    filters: Filters | None = None,
    *,
    relations: Iterable[str] | None = None,
    language: str = "en",
    ranks: Iterable[str] | None = None,
    limit: int | None = None,
    fmt: str | None = None,
    **options: Any,
) -> Iterator[Record]:
    """Records from a file or SPARQL endpoint, format detected; filters apply to every format.

    ``filters`` overrides relations/language/ranks/limit. Extra ``options`` go to the loader
    (:meth:`~kgprobe.loaders.formats.Loader.read`): ``namespaces`` (RDF/SPARQL), ``subjects``,
    ``page_size``, ``batch_size`` (SPARQL), ``source`` (the provenance tag written on facts).
    """
    f = filters or Filters.make(relations=relations, language=language, ranks=ranks, limit=limit)
    kind = fmt or detect_format(path_or_url)
    if kind not in LOADERS.load():
        raise InputError(f"unknown format {kind!r}; one of {', '.join(LOADERS)}")
    return LOADERS[kind]().read(path_or_url, f, **options)


def sparql_records(
    endpoint: str,
    filters: Filters | None = None,
    *,
    subjects: Iterable[str] | None = None,
    **options: Any,
) -> Iterator[Record]:
    """Records from a SPARQL endpoint; ``subjects`` empty or None means every matching item."""
    from kgprobe.loaders.sparql import SparqlClient, load_sparql

    client = SparqlClient(endpoint)  # validates the URL now, not on the first record
    return load_sparql(
        client, filters or Filters(), subjects=list(subjects) if subjects else None, **options
    )


__all__ = ["FORMATS", "LOADERS", "Filters", "Loader", "detect_format", "open_source", "sparql_records"]
