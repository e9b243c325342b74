"""Every file kgprobe writes for a user goes through here (docs/guarantees.md, "Report files and
output paths"):

* :func:`check_output_dir` — an output directory is checked before the graph or a model is
  touched: the wrong kind of path is a :class:`~kgprobe.errors.ConfigError` (exit 2), a place
  that cannot be written an :class:`~kgprobe.errors.OutputError` (exit 6).
* :func:`csv_text` — CSV with the spreadsheet-formula rule: a text cell from data that starts
  with ``=``, ``+``, ``-``, ``@``, tab or carriage return gets a leading ``'``, so that no
  spreadsheet runs a label from the graph as a formula. Numbers kgprobe computes stay numbers.
* :func:`json_text` — JSON that is JSON: a NaN or an infinity (which ``json.dumps`` writes as
  ``NaN``/``Infinity``, which no strict reader accepts) is an error naming the file and where
  in it the value sits, never a file that only Python reads back.
* :func:`write_files` — one output (a report, a results set) is put in place as a whole: every
  file is written to a temporary file in the directory first and only then renamed over its
  final name, so a full disk leaves the previous output whole. A manifest records what kgprobe
  wrote, so the files of a previous output that the new one does not write are removed (and
  nothing else is ever removed).
* :func:`check_owner` — the manifest also records whose output it is (the models of a report):
  an output of other models is never replaced silently, only with ``overwrite``
  (``--overwrite``); checked before any work where the models are known, and again on writing.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from kgprobe.errors import ConfigError, KgprobeError, OutputError
from kgprobe.types import JSONObject, ModelKey

#: OWASP's list: a cell starting with one of these is read as a formula by Excel, LibreOffice
#: or Google Sheets (tab and CR because some of them strip those first).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

#: The manifest of the files kgprobe wrote into an output directory (name -> sha256).
MANIFEST = ".kgprobe-files.json"


# --- CSV ----------------------------------------------------------------------------------------


def json_text(obj: Any, name: str, **kw: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False, **kw)`` refusing NaN and infinities: a
    :class:`KgprobeError` naming ``name`` (the file) and the value's place, e.g.
    ``models[0].overall.mean``. The values of a measure are checked when they are computed
    (kgprobe.probing.measures.registry.checked_values), so this is the last guard."""
    try:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False, **kw)
    except ValueError as exc:
        found = _non_finite_at(obj, "")
        if found is None:
            raise
        where, value = found
        raise KgprobeError(f"{name}: the value at {where or 'the top'} is {value!r}, not a finite "
                           "number; JSON has no such number, so nothing was written") from exc


def _non_finite_at(obj: Any, path: str) -> tuple[str, float] | None:
    """The place (``a.b[2]``) and value of the first NaN or infinity in ``obj``; None."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (path, obj)
    if isinstance(obj, Mapping):
        items: Iterable[tuple[str, Any]] = ((f"{path}.{k}" if path else str(k), v) for k, v in obj.items())
    elif isinstance(obj, list | tuple):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    for p, v in items:
        found = _non_finite_at(v, p)
        if found is not None:
            return found
    return None


def csv_cell(value: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula gets a leading ``'``. Only ``str``
    is text: ints and floats kgprobe computed (``-0.5``) are written as numbers, unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """The CSV document (RFC 4180 quoting by the csv module; every text cell through
    :func:`csv_cell`)."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow([csv_cell(h) for h in header])
    for row in rows:
        w.writerow([csv_cell(v) for v in row])
    return buf.getvalue()


# --- checking an output directory before any work --------------------------------------------------


def _why(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)


def check_output_dir(out: str | os.PathLike[str], option: str = "--out") -> Path:
    """The directory ``out`` as a Path, or a one-line error before any graph or model work.

    Wrong kind of path (ConfigError, exit 2): empty, an existing file or device (``/dev/null``),
    a dangling symbolic link, a path through a file. Cannot be written there (OutputError,
    exit 6): no permission, a read-only or pseudo filesystem (``/proc``). Checked for real: a
    temporary file (or, for a directory still to be made, a temporary directory in its nearest
    existing parent) is created and removed again.
    """
    text = os.fspath(out)
    if not text.strip():
        raise ConfigError(f"{option} is empty: give a directory for the report files")
    try:
        return _check_dir(Path(text), text, option)
    except OSError as exc:  # e.g. a parent directory that may not be searched
        raise OutputError(f"cannot use {option} {text}: {_why(exc)}") from None


def _check_dir(path: Path, text: str, option: str) -> Path:
    """The checks of :func:`check_output_dir`, in the order that names the real problem."""
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{option} {text} is a dangling symbolic link")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{option} {text} exists and is not a directory")
    probe_in = path
    while not probe_in.exists():  # the nearest existing parent, where the directory will be made
        if probe_in.is_symlink():
            raise ConfigError(f"{option} {text}: {probe_in} is a dangling symbolic link")
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise ConfigError(f"{option} {text}: {probe_in} is not a directory")
    try:
        if probe_in == path:
            fd, name = tempfile.mkstemp(dir=path, prefix=".kgprobe-check-")
            os.close(fd)
            os.unlink(name)
        else:
            os.rmdir(tempfile.mkdtemp(dir=probe_in, prefix=".kgprobe-check-"))
    except OSError as exc:
        raise OutputError(f"cannot write in {probe_in} ({option} {text}): {_why(exc)}") from None
    return path


# --- writing one output as a whole ------------------------------------------------------------------


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _make_dirs(d: Path) -> list[Path]:
    """``mkdir -p``, returning the directories it made (deepest last) so a failure can undo it."""
    missing = []
    p = d
    while not p.exists():
        missing.append(p)
        p = p.parent
    made = []
    for m in reversed(missing):
        m.mkdir()
        made.append(m)
    return made


def _previous(d: Path) -> dict[str, str]:
    """The manifest of the previous output here: {name: sha256}; {} when absent or unreadable.
    Only plain names in ``d`` count (never a path elsewhere)."""
    try:
        data = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
        files = data["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(files, dict):
        return {}
    return {n: h for n, h in files.items()
            if isinstance(n, str) and isinstance(h, str) and n == Path(n).name and n not in ("", ".", "..")}


class Owner(TypedDict):
    """Whose output a directory holds (the manifest's ``owner``): the model keys, primary first,
    and the kind of output (absent: ``"report"``; ``"ladder"``)."""

    models: list[ModelKey]
    kind: NotRequired[str]


def _previous_owner(d: Path) -> JSONObject | None:
    """The owner an earlier write recorded, as parsed (an older kgprobe's, or a hand-edited
    manifest: :func:`check_owner` reads its keys with defaults)."""
    try:
        owner = json.loads((d / MANIFEST).read_text(encoding="utf-8")).get("owner")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, dict) else None


def _label(owner: Mapping[str, Any]) -> str:
    """"report of a vs b" or "ladder of a, b, c"."""
    models = [str(m) for m in owner.get("models") or []]
    kind = str(owner.get("kind", "report"))
    if not models:
        return f"{kind} of another output"
    return f"{kind} of " + (" vs ".join(models) if kind == "report" else ", ".join(models))


def check_owner(out: str | os.PathLike[str], owner: Mapping[str, Any] | None, overwrite: bool = False,
                option: str = "--out") -> None:
    """Refuse (ConfigError, exit 2) to write the output of ``owner`` (``{"models": [model keys,
    primary first]}``) into a directory that holds kgprobe's output of other models, unless
    ``overwrite``. ``owner["kind"]`` (default "report"; "ladder" for a model ladder) must match
    too, so a ladder never replaces a report's files. A directory without a manifest, or with one
    that names no owner (written by an older kgprobe), or with the same kind and models, is
    fine: the same output is brought up to date."""
    if owner is None or overwrite:
        return
    before = _previous_owner(Path(out))
    if before is None or (list(before.get("models") or []) == list(owner.get("models") or [])
                          and before.get("kind", "report") == owner.get("kind", "report")):
        return
    raise ConfigError(
        f"{option} {os.fspath(out)} holds the {_label(before)}; this is the {_label(owner)}: "
        "choose another directory, or pass --overwrite to replace it"
    )


def _sha256_of(path: Path) -> str | None:
    """The sha256 of a regular file (never through a symbolic link); None for anything else."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return None
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def write_files(
    out: str | os.PathLike[str], files: Mapping[str, str | bytes], *,
    owner: Mapping[str, Any] | None = None, overwrite: bool = False,
) -> dict[str, Path]:
    """Write ``files`` ({name: content}; text as UTF-8) into the directory ``out`` as one output.

    0. With ``owner``: :func:`check_owner` first (another report's directory is refused unless
       ``overwrite``); the manifest records the owner.

    1. Every file is written and fsynced to a fresh temporary file (``O_EXCL``, so never through
       a planted link) in ``out``. A failure here (a full disk) removes the temporary files and
       any directory this call made: the previous output stays whole.
    2. Each temporary file is renamed over its final name (``os.replace``): a symbolic link
       there is replaced by the file, its target is never written.
    3. Files of the previous output (named in the manifest) that this output does not write
       are removed, but only while they still hold what kgprobe wrote (same sha256).
    4. The manifest is replaced by this output's.

    Any OSError becomes an :class:`OutputError` (exit 6) naming the file and the reason.
    """
    d = Path(out)
    check_owner(d, owner, overwrite)
    for name in files:
        if name != Path(name).name or name in ("", ".", "..", MANIFEST):
            raise ValueError(f"not a plain file name: {name!r}")
    made: list[Path] = []
    staged: dict[str, str] = {}  # final name -> temporary path
    digests: dict[str, str] = {}
    current = ""
    renaming = False
    try:
        made = _make_dirs(d)
        for name in files:
            if (d / name).is_dir() and not (d / name).is_symlink():
                raise OutputError(f"cannot write {d / name}: a directory has that name")
        mode = 0o666 & ~_umask()
        entries = {n: (c.encode("utf-8") if isinstance(c, str) else c) for n, c in files.items()}
        for name, data in entries.items():
            digests[name] = hashlib.sha256(data).hexdigest()
        manifest = json.dumps({"written_by": "kgprobe", **({"owner": dict(owner)} if owner else {}),
                               "files": digests}, indent=1).encode("utf-8")
        for name, data in [*entries.items(), (MANIFEST, manifest)]:
            current = name
            fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{name}.", suffix=".tmp")
            staged[name] = tmp
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), mode)
                os.fsync(fh.fileno())
        previous = _previous(d)
        renaming = True
        for name in entries:
            current = name
            os.replace(staged.pop(name), d / name)
        for name, digest in previous.items():
            if name not in entries and _sha256_of(d / name) == digest:
                current = name
                (d / name).unlink()
        current = MANIFEST
        os.replace(staged.pop(MANIFEST), d / MANIFEST)
    except OSError as exc:
        for tmp in staged.values():
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for m in reversed(made):
            with contextlib.suppress(OSError):
                m.rmdir()
        what = d / current if current else d
        kept = ("some files were already replaced" if renaming
                else "the files there before are left as they were")
        raise OutputError(f"cannot write {what}: {_why(exc)}; {kept}") from None
    return {name: d / name for name in entries}
