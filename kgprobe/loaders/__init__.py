"""Loaders: Wikidata JSON, RDF (N-Triples/Turtle) and SPARQL → plain records.

``open_source`` is the one entry the ingest needs: it picks the loader by extension (or, for
unknown extensions, by content), applies the same filters to every format, and fails at call
time — not on the first record — with one clear :class:`~kgprobe.errors.InputError` line for
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
from kgprobe.loaders.common import Filters, base_suffix, open_text
from kgprobe.records import Record

FORMATS = ("json", "nt", "turtle", "sparql")
_BY_SUFFIX = {
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".nt": "nt",
    ".ntriples": "nt",
    ".ttl": "turtle",
    ".turtle": "turtle",
}
_URL = re.compile(r"^https?://", re.IGNORECASE)
SUPPORTED = "Wikidata JSON (.json), N-Triples (.nt) or Turtle (.ttl), optionally .gz/.bz2, or an http(s) SPARQL endpoint"


def _sniff(path: Path) -> str | None:
    try:
        with open_text(path) as fh:
            head = fh.read(65536)
    except (UnicodeDecodeError, EOFError, OSError, zlib.error) as exc:
        raise InputError(
            f"{path}: unsupported file, not readable text ({exc}); expected {SUPPORTED}"
        ) from exc
    for line in head.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s[0] in "[{":
            return "json"
        if re.match(r"^(@prefix|@base|prefix\s|base\s)", s, re.IGNORECASE):
            return "turtle"
        if re.match(r"^(<[^>]*>|_:\S+)\s+<[^>]*>\s+.*\.\s*$", s):
            return "nt"
        return None
    return None


def detect_format(path_or_url: str | Path) -> str:
    """``json`` | ``nt`` | ``turtle`` | ``sparql``; InputError (one line) when unsupported."""
    text = str(path_or_url)
    if _URL.match(text):
        return "sparql"
    p = Path(text)
    if not p.exists():
        raise InputError(f"{p}: no such file")
    if p.is_dir():
        raise InputError(f"{p}: is a directory; give the files inside it")
    fmt = _BY_SUFFIX.get(base_suffix(p))
    if fmt is None:
        fmt = _sniff(p)
    if fmt is None:
        raise InputError(f"{p}: unsupported file; expected {SUPPORTED}")
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

    ``filters`` overrides relations/language/ranks/limit. Extra ``options`` go to the loader:
    ``namespaces`` (RDF/SPARQL), ``subjects``, ``page_size``, ``batch_size`` (SPARQL),
    ``source`` (the provenance tag written on facts).
    """
    f = filters or Filters.make(relations=relations, language=language, ranks=ranks, limit=limit)
    kind = fmt or detect_format(path_or_url)
    if kind not in FORMATS:
        raise InputError(f"unknown format {kind!r}; one of {', '.join(FORMATS)}")
    if kind == "json":
        from kgprobe.loaders.wikidata_json import load_json

        return load_json(path_or_url, f, **options)
    if kind in ("nt", "turtle"):
        from kgprobe.loaders.rdf import load_rdf

        return load_rdf(path_or_url, f, fmt=kind, **options)
    from kgprobe.loaders.sparql import load_sparql

    return load_sparql(str(path_or_url), f, **options)


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


__all__ = ["FORMATS", "Filters", "detect_format", "open_source", "sparql_records"]
