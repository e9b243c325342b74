"""A dump parsed on every core: whole-line chunks of the file, parsed in worker processes, their
records handed on in the file's order (issue 37 #3).

Why chunks of lines and not lines: a process boundary costs a pickle each way, so the unit
sent to a worker must be large (:data:`CHUNK_MB`); whole lines, so that a worker parses exactly
the lines one reader would, with the same code (`wikidata_json.entity_group`). The main process
reads (and decompresses) the file and keeps at most two chunks per worker in flight, so memory
stays bounded whatever the file's size. Results come back in submission order, so the records
are the same, in the same order, whatever the number of workers.
"""

from __future__ import annotations

import io
import os
import queue
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO, NamedTuple, TypeVar, cast

from kgprobe.loaders.common import env_bytes
from kgprobe.processes import AHEAD, ordered_map

__all__ = ["AHEAD", "CHUNK_MB", "Chunk", "chunk_bytes", "default_workers", "newlines", "ordered_map",
           "plain_chunks", "read_ahead", "read_chunks"]

#: Bytes of text per chunk sent to a worker, in MiB (``KGPROBE_INGEST_CHUNK_MB`` overrides): a
#: few MB make the per-chunk cost (a pickle each way, a task hand-over) negligible, and a
#: checkpoint is taken after each chunk (kgprobe/loaders/resume.py).
CHUNK_MB = 4
ENV_CHUNK_MB = "KGPROBE_INGEST_CHUNK_MB"
#: chunks of a compressed file that its reading thread keeps ready (`read_ahead`): memory, at
#: most this many chunks more
READ_AHEAD = 2


def chunk_bytes() -> int:
    """The chunk size in bytes (``KGPROBE_INGEST_CHUNK_MB`` or :data:`CHUNK_MB`)."""
    return max(1, env_bytes(ENV_CHUNK_MB, CHUNK_MB))


def default_workers(server_here: bool = False) -> int:
    """The default of ``kgprobe ingest --workers``: the machine's cores (``os.cpu_count()``),
    less one when the graph server runs on this machine and takes the writes as they are
    parsed (an online ingest into the managed server or a local ``NEO4J_URI``).

    Why one less: during an online ingest the server uses more than a core of its own (the
    managed ArcadeDB: 14–17 CPU-s in 11–12 s of a 214k-statement ingest on 2 cores), so a
    parsing process for every core only competes with it: on 2 cores, 2 workers took 12.2–13.4 s
    where 1 took 11.3–11.8 s, and 35.3 s against 31.6–34.0 s for 1M statements
    (docs/benchmarks.md, "All of Wikidata on a quiet 2-core machine"). A bulk load parses while
    the server has nothing to do, and there 2 workers were faster (28.2 against 34.1 s)."""
    cores = os.cpu_count() or 1
    return max(1, cores - 1) if server_here else cores


class Chunk(NamedTuple):
    """Whole lines of a file: their text (empty where `plain_chunks` left it in the file), the
    number of the first line, its byte offset, the number of the line after the chunk, and its
    size in bytes."""

    data: bytes
    lineno: int
    offset: int
    next_lineno: int
    size: int


def newlines(text: bytes | bytearray | memoryview) -> int:
    """The newlines in ``text``: numpy compares every byte at once, 5 times faster than
    ``bytes.count`` for one byte (0.03 against 0.14 CPU-s for 208 MB), and the reading process
    counts every byte of the dump to number its lines. (numpy is imported here, not at the
    top: the worker processes import this module and never count.)"""
    import numpy as np

    return int(np.count_nonzero(np.frombuffer(text, np.uint8) == 10))


def plain_chunks(fh: BinaryIO, lineno: int, offset: int, size: int) -> Iterator[Chunk]:
    """The chunks `read_chunks` gives for an uncompressed file, where each worker reads its
    chunk's text itself: the same boundaries and line numbers, but the text is only counted
    here, read into one buffer used again for every chunk and never made into ``bytes`` (the
    copies cost this process 0.36 CPU-s per 208 MB, most of its share of a parse with 2
    workers: docs/benchmarks.md)."""
    buf = bytearray(size)
    view = memoryview(buf)
    readinto = cast(io.BufferedReader, fh).readinto
    while True:
        got = 0
        while got < size and (n := readinto(view[got:])):  # short only at the file's end
            got += n
        if not got:
            return
        lines = newlines(view[:got])
        if got == size and buf[-1] != 10:  # the chunk's last line, to its end
            rest = fh.readline()
            lines += rest.count(b"\n")
            got += len(rest)
        yield Chunk(b"", lineno, offset, lineno + lines, got)
        lineno += lines
        offset += got


def read_chunks(fh: BinaryIO, lineno: int, offset: int, size: int) -> Iterator[Chunk]:
    """``fh`` from line ``lineno`` (at byte ``offset``) in chunks of about ``size`` bytes,
    each ending at the end of a line (a line longer than ``size`` is one chunk).

    A read that fails (a truncated or corrupt compressed file) ends the chunks with what a
    line-by-line reader would have handed on: the complete lines read before it are a last
    chunk, then the failure is raised. (``read1`` reads once from the file per call, so no
    bytes decompressed before the failure are lost inside a buffered read.)"""
    read1 = getattr(fh, "read1", fh.read)
    while True:
        parts: list[bytes] = []
        got = 0
        try:
            while got < size:
                piece = read1(size - got)
                if not piece:
                    break
                parts.append(piece)
                got += len(piece)
            if not parts:
                return
            if not parts[-1].endswith(b"\n"):
                parts.append(fh.readline())
        except Exception:
            data = b"".join(parts)
            whole = data[:data.rfind(b"\n") + 1]
            if whole:
                yield Chunk(whole, lineno, offset, lineno + newlines(whole), len(whole))
            raise
        data = b"".join(parts)
        after = lineno + newlines(data)
        yield Chunk(data, lineno, offset, after, len(data))
        lineno = after
        offset += len(data)


T = TypeVar("T")


def read_ahead(items: Iterator[T], depth: int = READ_AHEAD, name: str = "kgprobe-read") -> Iterator[T]:
    """``items``, produced in a thread of their own up to ``depth`` ahead, handed on in order.

    Why: a compressed dump is decompressed by the one process that hands its chunks to the
    workers, and there the decompression (ISA-L's, zlib's, bz2's: each releases the GIL) ran in
    the same thread as everything else the process does (submitting chunks, taking the workers'
    results in, writing the import files). In a thread of its own it runs beside that work: in
    the bulk load of a 554 MB realistic .gz with 2 workers the busiest thread took 0.73-0.78
    CPU-s instead of 1.57-1.72, for the same CPU in all (docs/benchmarks.md, "The .gz chunks
    read in a thread of their own"). What stays serial on many cores is the longer of the two.

    An exception of ``items`` is raised here after the items before it, as by ``items``
    itself. Closing this generator (an entity limit, an error downstream) stops the thread and
    waits for it, so that the file is never read after its owner closed it. A compressed
    file's progress (`common.stored_tell`, read in the consuming thread) then runs ahead by at
    most ``depth`` chunks."""
    box: queue.Queue[tuple[int, Any]] = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()

    def put(item: tuple[int, Any]) -> bool:
        while not stop.is_set():
            try:
                box.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in items:
                if not put((0, item)):
                    return
            put((1, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put((2, exc))

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        while True:
            kind, item = box.get()
            if kind == 0:
                yield item
            elif kind == 1:
                return
            else:
                raise item
    finally:
        stop.set()
        thread.join()
