"""kgprobe-kgtsv: a loader format from outside kgprobe (docs/plugins.md).

A ``.kgtsv`` file holds one statement a line, tab-separated: ``subject  what  value  [rank]``.
``what`` is ``label`` or ``alias`` (of an item Q… or a property P…), or a property id, whose
``value`` is then the object item (``P31``: the subject's types). ``#`` starts a comment line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kgprobe.errors import InputError
from kgprobe.loaders.common import Filters, open_text
from kgprobe.loaders.formats import LOADERS, Loader, first_line
from kgprobe.records import EntityRecord, FactRecord, Record, RelationRecord, is_pid, is_qid


@LOADERS.register  # so that `kgprobe --plugin kgprobe_kgtsv` finds it too
class KgTsv(Loader):
    """Statements as tab-separated lines: subject, label/alias/property, value, rank."""

    name = "kgtsv"
    title = "kgprobe TSV (.kgtsv)"
    suffixes = (".kgtsv",)

    @classmethod
    def sniff(cls, head: str) -> bool:
        cells = first_line(head).split("\t")
        return len(cells) in (3, 4) and (is_qid(cells[0]) or is_pid(cells[0]))

    def read(self, source: str | Path, filters: Filters, **options: Any) -> Iterator[Record]:
        """Every record of the file, read now (a bad line fails the call, not the ingest)."""
        path = Path(source)
        entities: dict[str, EntityRecord] = {}
        relations: dict[str, RelationRecord] = {}
        facts: list[FactRecord] = []
        with open_text(path) as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip() or line.startswith("#"):
                    continue
                cells = line.rstrip("\r\n").split("\t")
                if len(cells) not in (3, 4) or not (is_qid(cells[0]) or is_pid(cells[0])):
                    raise InputError(f"{path}:{n}: not subject<TAB>what<TAB>value[<TAB>rank]")
                subject, what, value = cells[:3]
                where = f"{path}:{n}"
                if is_pid(subject):
                    rel = relations.setdefault(subject, RelationRecord(subject, location=where))
                    if what == "label":
                        rel.label = value
                    else:
                        rel.aliases.append(value)
                    continue
                ent = entities.setdefault(subject, EntityRecord(subject, location=where))
                if what == "label":
                    ent.label = value
                elif what == "alias":
                    ent.aliases.append(value)
                elif what == "P31":
                    ent.types.append(value)
                else:
                    rank = cells[3] if len(cells) == 4 else "normal"
                    facts.append(FactRecord(subject, what, value, rank=rank, source="kgtsv",
                                            location=where))
        items = list(entities)[: filters.limit]
        out: list[Record] = [*relations.values(), *(entities[q] for q in items)]
        out += [f for f in facts if f.subject in items and f.rank in filters.ranks
                and (filters.relations is None or f.pid in filters.relations)]
        return iter(out)
