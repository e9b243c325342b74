"""The built-in loader formats (:class:`~kgprobe.loaders.formats.Loader`): Wikidata JSON,
N-Triples, Turtle and a SPARQL endpoint. Each names its suffixes and how to sniff its files here;
its reader module (orjson, oxigraph/rdflib, SPARQLWrapper) is imported only when a source of it
is read. Registered in this order, which is the order content sniffing tries them in."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kgprobe.loaders.common import Filters
from kgprobe.loaders.formats import LOADERS, Loader, first_line
from kgprobe.records import Record


@LOADERS.register
class WikidataJson(Loader):
    """Wikidata JSON: a dump (an array, one entity a line), JSON lines, or Special:EntityData."""

    name = "json"
    title = "Wikidata JSON (.json)"
    suffixes = (".json", ".jsonl", ".ndjson")
    resumable = True

    @classmethod
    def sniff(cls, head: str) -> bool:
        return first_line(head)[:1] in ("[", "{")

    def read(self, source: str | Path, filters: Filters, **options: Any) -> Iterator[Record]:
        from kgprobe.loaders.wikidata_json import load_json

        return load_json(source, filters, **options)


_NT_LINE = re.compile(r"^(<[^>]*>|_:\S+)\s+<[^>]*>\s+.*\.\s*$")
_TURTLE_LINE = re.compile(r"^(@prefix|@base|prefix\s|base\s)", re.IGNORECASE)


class _Rdf(Loader):
    """Wikidata's RDF (the WDQS dump's shape), streamed entity by entity."""

    def read(self, source: str | Path, filters: Filters, **options: Any) -> Iterator[Record]:
        from kgprobe.loaders.rdf import load_rdf

        return load_rdf(source, filters, fmt=self.name, **options)


@LOADERS.register
class NTriples(_Rdf):
    """Wikidata N-Triples (the WDQS dump's .nt)."""

    name = "nt"
    title = "N-Triples (.nt)"
    suffixes = (".nt", ".ntriples")

    @classmethod
    def sniff(cls, head: str) -> bool:
        return bool(_NT_LINE.match(first_line(head)))


@LOADERS.register
class Turtle(_Rdf):
    """Wikidata Turtle (the WDQS dump's .ttl, Special:EntityData's .ttl)."""

    name = "turtle"
    title = "Turtle (.ttl)"
    suffixes = (".ttl", ".turtle")

    @classmethod
    def sniff(cls, head: str) -> bool:
        return bool(_TURTLE_LINE.match(first_line(head)))


@LOADERS.register
class Sparql(Loader):
    """A SPARQL endpoint speaking Wikidata's vocabulary (WDQS, QLever, a local mirror)."""

    name = "sparql"
    title = "an http(s) SPARQL endpoint"
    reads_urls = True

    def read(self, source: str | Path, filters: Filters, **options: Any) -> Iterator[Record]:
        from kgprobe.loaders.sparql import load_sparql

        return load_sparql(str(source), filters, **options)
