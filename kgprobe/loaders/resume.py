"""Checkpoints of a long load, so that a killed ingest resumes where it stopped (issue 37 #5).

A checkpoint is a :class:`~kgprobe.records.Position` of a source file whose every record
before it is committed to the graph: the ingest saves one after each committed batch that
passed one (kgprobe/graph/ingest.py), and ``kgprobe ingest --resume`` starts there, never from
the start. Resuming re-reads at most the lines after the last committed batch; the ingest is
an idempotent MERGE, so a line written twice is still one node or edge.

One small JSON file per source under ``KGPROBE_HOME/checkpoints``, named by a digest of the
source's absolute path, written atomically (a temporary file renamed into place, so a kill
leaves the old checkpoint or the new, never half of one). It records the file's size and
modification time: a file that changed since is refused, one line, rather than resumed at an
offset that no longer means the same line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any, TypedDict

from kgprobe.config import write_private_text
from kgprobe.errors import InputError
from kgprobe.records import Position

DIRECTORY = "checkpoints"


def checkpoint_file(home: Path, source: str | Path) -> Path:
    """Where the checkpoint of ``source`` is kept."""
    key = hashlib.sha256(str(Path(source).resolve()).encode("utf-8", "surrogatepass")).hexdigest()
    return home / DIRECTORY / f"{key[:24]}.json"


class FileIdentity(TypedDict):
    """Which file a checkpoint is of: its resolved path, size and modification time."""

    path: str
    size: int
    mtime_ns: int


def _identity(source: str | Path) -> FileIdentity:
    st = Path(source).stat()
    return {"path": str(Path(source).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def position_record(position: Position) -> dict[str, Any]:
    """``position`` as a checkpoint keeps it: where in the file, and which file it is (path,
    size, modification time), so that a changed file is refused (`position_of`)."""
    return {**_identity(position.source), "offset": position.offset, "line": position.line,
            "entities": position.entities, "stream": position.stream}


def save_checkpoint(home: Path, position: Position) -> None:
    """Record that every line of ``position.source`` before ``position.offset`` is committed."""
    target = checkpoint_file(home, position.source)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_private_text(target, json.dumps(position_record(position)))


def load_checkpoint(home: Path, source: str | Path) -> Position | None:
    """The checkpoint of ``source``, None when there is none; InputError (one line) when the
    file changed since it was taken or the checkpoint cannot be read."""
    path = checkpoint_file(home, source)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InputError(f"{source}: the checkpoint {path} cannot be read ({exc}); delete it to "
                         "start from the beginning") from None
    return position_of(data, source, path)


def position_of(data: Any, source: str | Path, path: Path, remedy: str | None = None) -> Position:
    """The position a checkpoint (`position_record`, read back from ``path``) names in
    ``source``; InputError (one line) when it cannot be read or the file changed since.
    ``remedy``: what the line tells the user to do instead (by default: delete ``path``)."""
    remedy = remedy or f"delete {path} to start from the beginning"
    try:
        offset, line, entities = int(data["offset"]), int(data["line"]), int(data["entities"])
        size, mtime_ns = int(data["size"]), int(data["mtime_ns"])
        stream = int(data.get("stream", -1))  # (a checkpoint of an older kgprobe has none)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{source}: the checkpoint {path} cannot be read ({exc}); {remedy}") from None
    now = _identity(source)
    if (now["size"], now["mtime_ns"]) != (size, mtime_ns):
        raise InputError(f"{source}: changed since its checkpoint was taken (size or modification "
                         f"time differ), so it cannot be resumed; {remedy}")
    return Position(source=str(source), offset=offset, line=line, entities=entities,
                    read=0, size=size, stream=stream)


def clear_checkpoint(home: Path, source: str | Path) -> None:
    """Forget the checkpoint of ``source`` (its load is complete)."""
    with contextlib.suppress(FileNotFoundError):
        checkpoint_file(home, source).unlink()
