"""kgprobe-pidcsv: a template format from outside kgprobe (docs/templates.md).

A ``pid,template`` CSV file: a header line ``pid,template``, then one template a row, its
subject slot ``[X]`` and its object slot ``[Y]`` (a question has none).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from kgprobe.errors import InputError
from kgprobe.loaders.common import read_text_file
from kgprobe.loaders.templates import TEMPLATE_FORMATS, TemplateFormat, make_record
from kgprobe.records import TemplateRecord


@TEMPLATE_FORMATS.register  # so that `kgprobe --plugin kgprobe_pidcsv` finds it too
class PidCsv(TemplateFormat):
    """Templates as CSV rows: pid, template."""

    name = "pidcsv"
    description = "CSV with a header pid,template ([X] / [Y])"

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        rows = csv.reader(io.StringIO(read_text_file(path)))
        if next(rows, None) != ["pid", "template"]:
            raise InputError(f"{path}:1: expected the header 'pid,template'")
        for n, row in enumerate(rows, start=2):
            if not row:
                continue
            if len(row) != 2:
                raise InputError(f"{path}:{n}: expected 'pid,template'")
            yield make_record(row[0], row[1], "pidcsv", location=f"{path}:{n}")
