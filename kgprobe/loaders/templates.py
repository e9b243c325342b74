"""Readers for the relation-template formats people already have (format knowledge only).

Every reader yields :class:`kgprobe.records.TemplateRecord` with the slots normalized to
``[X]`` (subject) and ``[Y]`` (object) and the style derived from the text, so that the graph
store and the verbalizer see one template model whatever the source was (docs/templates.md).

Formats: LAMA ``relations.jsonl`` (also the LPAQA/AutoPrompt ``*_relations.jsonl`` of the same
shape), ParaRel ``patterns/P*.jsonl``, LPAQA prompt files (``P*.txt`` one per line or ``P*.jsonl``
with ``template``), WikiFactDiff ``best_templates.json`` (``XXXX`` / ``____``), BEAR
``metadata_relations.json``, KAMEL ``question-templates.csv`` (``[S]``), TempLAMA
``templates.csv`` (``<subject>`` / ``<object>``) and kgprobe's own JSONL.

Each format is one :class:`TemplateFormat` (name, description, whether it takes a folder,
``read``) in the registry :data:`TEMPLATE_FORMATS` (entry-point group
``kgprobe.template_formats``, docs/design.md §8): the list of names, the reader chosen by
``--format`` and the CLI's help are read from it, so a new format is one class in one module
(or one installed package).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from kgprobe.errors import InputError
from kgprobe.loaders.common import (
    check_json_file_size,
    json_too_large,
    max_json_chars,
    read_text_file,
)
from kgprobe.plugins import TEMPLATE_FORMATS as TEMPLATE_FORMAT_GROUP
from kgprobe.plugins import Registry
from kgprobe.records import (
    STYLE_OBJECT_INSIDE,
    STYLE_OBJECT_LAST,
    STYLE_QUESTION,
    TEMPLATE_STYLES,
    TemplateRecord,
    derive_style,
    is_pid,
    template_too_long,
)
from kgprobe.types import JSONObject

SUBJECT = "[X]"
OBJECT = "[Y]"

_SPACES_RE = re.compile(r"[ \t]+")
_PID_IN_NAME_RE = re.compile(r"(P[1-9][0-9]*)")


def normalize_text(text: str, subject: str = SUBJECT, obj: str | None = OBJECT) -> str:
    """Rewrite a source's slot markers to ``[X]``/``[Y]`` and tidy whitespace (not punctuation:
    LAMA's ``" ."`` is kept because full-sentence scores depend on it)."""
    out = text.replace(subject, SUBJECT)
    if obj is not None and obj != OBJECT:
        out = out.replace(obj, OBJECT)
    return _SPACES_RE.sub(" ", out.replace("\n", " ")).strip()


def make_record(
    pid: str, raw: str, source: str, *, subject: str = SUBJECT, obj: str | None = OBJECT,
    language: str = "en", location: str = "",
) -> TemplateRecord:
    """Validate one template and build its record; the error names the file and line."""
    pid = pid.strip()
    where = f" ({location})" if location else ""
    if not is_pid(pid):
        raise InputError(f"not a Wikidata property id: {pid!r}{where}")
    text = normalize_text(raw, subject, obj)
    too_long = template_too_long(text)
    if too_long:
        raise InputError(f"{too_long}{where}")
    if text.count(SUBJECT) != 1:
        raise InputError(f"template needs exactly one subject slot {SUBJECT}: {raw!r}{where}")
    if text.count(OBJECT) > 1:
        raise InputError(f"template has more than one object slot {OBJECT}: {raw!r}{where}")
    style = derive_style(text)
    if OBJECT not in text and style != STYLE_QUESTION:
        raise InputError(f"statement template without object slot {OBJECT}: {raw!r}{where}")
    return TemplateRecord(pid=pid, text=text, style=style, source=source, language=language)


def _pid_from_name(path: Path) -> str | None:
    m = _PID_IN_NAME_RE.search(path.stem)
    return m.group(1) if m else None


def _files(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """A directory means every ``P*`` file in it with one of the suffixes, in a stable order."""
    if path.is_dir():
        found = [p for p in path.iterdir() if p.suffix in suffixes and _pid_from_name(p)]
        return sorted(found, key=lambda p: (int(_pid_from_name(p)[1:]), p.name))  # type: ignore[index]
    return [path]


def _read_text(path: Path) -> str:
    """UTF-8 (BOM or not) or UTF-16/32 with a BOM; else one line naming the byte offset."""
    return read_text_file(path)


def _jsonl(path: Path) -> Iterator[tuple[int, JSONObject]]:
    for n, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{n}: not JSON: {exc.msg}") from exc
        if not isinstance(row, dict):
            raise InputError(f"{path}:{n}: expected a JSON object")
        yield n, row


def _json(path: Path) -> Any:
    """One JSON document, parsed whole: refused beyond ``MAX_JSON_MB`` (exit 4)."""
    check_json_file_size(path)
    text = _read_text(path)
    if len(text) > max_json_chars():
        raise json_too_large(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON: {exc.msg} (line {exc.lineno})") from exc


def _file_pid(path: Path, relation: str | None) -> str:
    """The PID in the file name; ``relation`` only names a file whose name carries none."""
    pid = _pid_from_name(path) or relation
    if pid is None:
        raise InputError(f"{path}: cannot tell the relation from the file name; pass --relation")
    return pid


def read_lama(path: Path, source: str = "lama") -> Iterator[TemplateRecord]:
    """LAMA ``relations.jsonl``: ``{"relation": PID, "template": "[X] ... [Y] ."}`` per line."""
    for n, row in _jsonl(path):
        if "relation" not in row or "template" not in row:
            raise InputError(f"{path}:{n}: LAMA rows need 'relation' and 'template'")
        yield make_record(str(row["relation"]), str(row["template"]), source, location=f"{path}:{n}")


def read_pararel(path: Path, relation: str | None = None) -> Iterator[TemplateRecord]:
    """ParaRel ``patterns/P*.jsonl``: ``{"pattern": ...}`` per line, relation from the file name."""
    for f in _files(path, (".jsonl",)):
        pid = _file_pid(f, relation)
        for n, row in _jsonl(f):
            if "pattern" not in row:
                raise InputError(f"{f}:{n}: ParaRel rows need 'pattern'")
            yield make_record(pid, str(row["pattern"]), "pararel", location=f"{f}:{n}")


def read_lpaqa(path: Path, relation: str | None = None) -> Iterator[TemplateRecord]:
    """LPAQA prompts: ``P*.txt`` (one template a line) or ``P*.jsonl`` (``template``, ``weight``).

    The source names the LPAQA folder (``lpaqa-mine``, ``lpaqa-paraphrase``,
    ``lpaqa-manual_paraphrase``) when the file sits in one, since their quality differs.
    """
    for f in _files(path, (".txt", ".jsonl")):
        pid = _file_pid(f, relation)
        folder = f.parent.name
        source = f"lpaqa-{folder}" if folder in ("mine", "paraphrase", "manual_paraphrase") else "lpaqa"
        if f.suffix == ".jsonl":
            for n, row in _jsonl(f):
                if "template" not in row:
                    raise InputError(f"{f}:{n}: LPAQA JSONL rows need 'template'")
                yield make_record(pid, str(row["template"]), source, location=f"{f}:{n}")
        else:
            for n, line in enumerate(_read_text(f).splitlines(), start=1):
                if line.strip():
                    yield make_record(pid, line, source, location=f"{f}:{n}")


def read_wikifactdiff(path: Path) -> Iterator[TemplateRecord]:
    """WikiFactDiff ``best_templates.json``: ``{PID: [[template, count], ...]}``, XXXX/____ slots.

    Only the forward file fits (``best_templates_reverse.json`` puts the object in XXXX).
    """
    data = _json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected {{PID: [[template, count], ...]}}")
    for pid, items in data.items():
        if not isinstance(items, list):
            raise InputError(f"{path}: {pid}: expected a list of [template, count]")
        for item in items:
            raw = item[0] if isinstance(item, list) and item else item
            if not isinstance(raw, str):
                raise InputError(f"{path}: {pid}: bad template entry {item!r}")
            yield make_record(pid, raw, "wikifactdiff", subject="XXXX", obj="____",
                              location=f"{path}:{pid}")


def read_bear(path: Path) -> Iterator[TemplateRecord]:
    """BEAR ``metadata_relations.json``: ``{PID: {"templates": [...], "answer_space_ids": ...}}``."""
    data = _json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected {{PID: {{templates: [...]}}}}")
    for pid, meta in data.items():
        if not isinstance(meta, dict) or not isinstance(meta.get("templates"), list):
            raise InputError(f"{path}: {pid}: expected an object with a 'templates' list")
        for raw in meta["templates"]:
            yield make_record(pid, str(raw), "bear", location=f"{path}:{pid}")


def read_kamel(path: Path) -> Iterator[TemplateRecord]:
    """KAMEL ``question-templates.csv``: ``PID, question with [S]`` per line, no header."""
    for n, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        pid, sep, raw = line.partition(",")
        if not sep:
            raise InputError(f"{path}:{n}: expected 'PID, question template'")
        yield make_record(pid, raw, "kamel", subject="[S]", obj=None, location=f"{path}:{n}")


def read_templama(path: Path) -> Iterator[TemplateRecord]:
    """TempLAMA ``templates.csv``: header ``Wikidata ID,Relation,Template``, ``<subject>``/``<object>``."""
    reader = csv.DictReader(io.StringIO(_read_text(path)))
    if not reader.fieldnames or "Template" not in reader.fieldnames:
        raise InputError(f"{path}: expected the columns 'Wikidata ID,Relation,Template'")
    for n, row in enumerate(reader, start=2):
        yield make_record(row.get("Wikidata ID") or "", row["Template"], "templama",
                          subject="<subject>", obj="<object>", location=f"{path}:{n}")


def read_kgprobe(path: Path) -> Iterator[TemplateRecord]:
    """kgprobe's own JSONL: ``{"pid", "text", "source"?, "language"?, "style"?}`` per line.

    A given ``style`` must agree with the one derived from the text: a mislabelled object-last
    template would otherwise be scored as a continuation it is not.
    """
    for n, row in _jsonl(path):
        where = f"{path}:{n}"
        if "pid" not in row or "text" not in row:
            raise InputError(f"{where}: kgprobe template rows need 'pid' and 'text'")
        rec = make_record(str(row["pid"]), str(row["text"]), str(row.get("source", "kgprobe")),
                          language=str(row.get("language", "en")), location=where)
        given = row.get("style")
        if given is not None and given not in TEMPLATE_STYLES:
            raise InputError(f"{where}: unknown style {given!r} (one of {', '.join(TEMPLATE_STYLES)})")
        if given is not None and given != rec.style:
            raise InputError(f"{where}: style {given!r} does not match the text ({rec.style})")
        yield rec


class TemplateFormat:
    """One relation-template format of ``kgprobe templates import --format NAME``.

    A plug-in subclasses it, sets ``name`` and ``description`` (and ``folder`` when it reads a
    folder of ``P*`` files) and writes :meth:`read`; ``@TEMPLATE_FORMATS.register`` (or an entry
    point of the group ``kgprobe.template_formats``) makes ``--format NAME`` read its files."""

    #: the format's name (``--format NAME``, ``kgprobe plugins``)
    name: ClassVar[str] = ""
    #: one line for the help text and ``kgprobe plugins``
    description: ClassVar[str] = ""
    #: ``path`` may be a folder of ``P*`` files (one relation each)
    folder: ClassVar[bool] = False

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        """The templates of ``path`` (an existing file, or a folder when :attr:`folder`), built
        with :func:`make_record`; ``relation`` names the relation of a file whose name carries
        none (records of other relations are dropped by the caller). A bad file is one
        :class:`~kgprobe.errors.InputError` line."""
        raise NotImplementedError


#: every template format by name: the built-ins below, then the plug-ins of
#: ``kgprobe.template_formats``
TEMPLATE_FORMATS: Registry[type[TemplateFormat]] = Registry(
    "template format", TEMPLATE_FORMAT_GROUP, TemplateFormat,
    requires=("description",), overrides=("read",),
    describe=lambda cls: cls.description)


@TEMPLATE_FORMATS.register
class Lama(TemplateFormat):
    name, description = "lama", "LAMA relations.jsonl (relation, template)"

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        return read_lama(path)


@TEMPLATE_FORMATS.register
class Pararel(TemplateFormat):
    name, description, folder = "pararel", "ParaRel patterns/P*.jsonl (pattern)", True

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        return read_pararel(path, relation)


@TEMPLATE_FORMATS.register
class Lpaqa(TemplateFormat):
    name, description, folder = "lpaqa", "LPAQA prompts P*.txt or P*.jsonl (template)", True

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        return read_lpaqa(path, relation)


@TEMPLATE_FORMATS.register
class WikiFactDiff(TemplateFormat):
    name, description = "wikifactdiff", "WikiFactDiff best_templates.json (XXXX / ____)"

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        return read_wikifactdiff(path)


@TEMPLATE_FORMATS.register
class Bear(TemplateFormat):
    name, description = "bear", "BEAR metadata_relations.json (templates)"

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        return read_bear(path)


@TEMPLATE_FORMATS.register
class Kamel(TemplateFormat):
    name, description = "kamel", "KAMEL question-templates.csv (PID, question with [S])"

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        return read_kamel(path)


@TEMPLATE_FORMATS.register
class TempLama(TemplateFormat):
    name, description = "templama", "TempLAMA templates.csv (<subject> / <object>)"

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        return read_templama(path)


@TEMPLATE_FORMATS.register
class KgprobeJsonl(TemplateFormat):
    name, description = "kgprobe", "kgprobe's own JSONL (pid, text, source, language, style)"

    def read(self, path: Path, relation: str | None) -> Iterator[TemplateRecord]:
        return read_kgprobe(path)


#: the built-in formats' names (:func:`format_names` adds the plug-ins')
FORMATS = tuple(TEMPLATE_FORMATS)


def format_names(*, plugins: bool = True) -> tuple[str, ...]:
    """Every template format's name, built-ins first (``plugins``: load them first)."""
    return tuple(TEMPLATE_FORMATS.load() if plugins else TEMPLATE_FORMATS)


def folder_formats(*, plugins: bool = True) -> tuple[str, ...]:
    """The formats that read a folder of ``P*`` files (``plugins``: load them first)."""
    formats = TEMPLATE_FORMATS.load() if plugins else TEMPLATE_FORMATS
    return tuple(name for name, cls in formats.items() if cls.folder)


def formats_help(*, plugins: bool = True) -> str:
    """The names as a help text reads them: ``lama, pararel, ... or kgprobe``."""
    names = format_names(plugins=plugins)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def read_templates(
    path: str | Path, fmt: str, relation: str | None = None
) -> Iterator[TemplateRecord]:
    """Read any supported file (or a folder of ``P*`` files for ParaRel/LPAQA).

    ``relation`` keeps only that PID, and names the relation of a single ParaRel/LPAQA file
    whose name carries none.
    """
    p = Path(path)
    if relation is not None and not is_pid(relation):
        raise InputError(f"not a Wikidata property id: {relation!r}")
    if not p.exists():
        raise InputError(f"no such file: {p}")
    names = format_names()
    if fmt not in names:
        raise InputError(f"unknown template format {fmt!r} (one of {', '.join(names)})")
    records: Iterable[TemplateRecord] = TEMPLATE_FORMATS[fmt]().read(p, relation)
    for rec in records:
        if relation is None or rec.pid == relation:
            yield rec


__all__ = [
    "FORMATS",
    "OBJECT",
    "STYLE_OBJECT_INSIDE",
    "STYLE_OBJECT_LAST",
    "STYLE_QUESTION",
    "SUBJECT",
    "TEMPLATE_FORMATS",
    "TemplateFormat",
    "derive_style",
    "folder_formats",
    "format_names",
    "formats_help",
    "make_record",
    "normalize_text",
    "read_templates",
]
