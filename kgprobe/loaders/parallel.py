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
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, BinaryIO, NamedTuple, TypeVar, cast

from kgprobe.loaders.common import env_bytes
from kgprobe.runtime import collect_rarely_here, rare_collections

#: Bytes of text per chunk sent to a worker, in MiB (``KGPROBE_INGEST_CHUNK_MB`` overrides): a
#: few MB make the per-chunk cost (a pickle each way, a task hand-over) negligible, and a
#: checkpoint is taken after each chunk (kgprobe/loaders/resume.py).
CHUNK_MB = 4
ENV_CHUNK_MB = "KGPROBE_INGEST_CHUNK_MB"
#: chunks in flight per worker: one being parsed, one waiting, so that no worker idles
AHEAD = 2
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


def _exit_with_parent(parent: int) -> None:
    """In a worker: its settings, and exit once the process that started it is gone. A killed ingest (SIGKILL:
    no clean-up runs) would otherwise leave its workers waiting for work forever, holding its
    pipes open; a killed load is what checkpoints are for (kgprobe/loaders/resume.py).

    Ctrl-C reaches every process of the terminal's group: a worker ignores it, so that only
    the ingest answers it (one line, never a traceback per worker); the pool is then shut
    down by the ingest.

    A worker makes records in bulk, so its cyclic collector runs as rarely as the ingest's
    (`kgprobe.runtime.GC_THRESHOLD`): 4 % less worker CPU on realistic lines."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    collect_rarely_here()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="kgprobe-parent-watch").start()


J = TypeVar("J")
R = TypeVar("R")


def ordered_map(fn: Callable[[J], R], jobs: Iterator[J], workers: int) -> Iterator[tuple[J, R]]:
    """``(job, fn(job))`` for every job, in the jobs' order.

    With ``workers`` > 1 and more than one job, ``fn`` runs in that many processes (started by
    *spawn*: safe beside the ingest's writer thread and the driver's sockets, which *fork*
    would copy), with at most :data:`AHEAD` jobs per worker in flight; else here, one job after
    the other (a small file pays no process start-up). ``fn`` must be a module-level function.
    A failure while taking the next job (a truncated file) is raised after the results of
    every job taken before it. Closing the iterator early (an entity limit reached) cancels
    the jobs not started. While the processes run, this process's cyclic collector runs
    rarely (:func:`kgprobe.runtime.rare_collections`), restored when the iterator ends."""
    failure: Exception | None = None

    def pull() -> Any:
        nonlocal failure
        if failure is not None:
            return _END
        try:
            return next(jobs)
        except StopIteration:
            return _END
        except Exception as exc:  # raised once the jobs before it are done
            failure = exc
            return _END

    first: Any = pull()
    second: Any = pull() if workers > 1 and first is not _END else _END
    if second is _END:
        job = first
        while job is not _END:
            yield job, fn(job)
            job = pull()
    else:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_exit_with_parent, initargs=(os.getpid(),))
        try:
            # the workers' results are unpickled here, tens of thousands of objects a chunk:
            # the cyclic collector runs rarely until the iterator ends or is closed, as in the
            # workers (22-30 % less of this process's CPU with 2 workers: docs/benchmarks.md)
            with rare_collections():
                pending: deque[tuple[J, Future[R]]] = deque(
                    (j, pool.submit(fn, j)) for j in (first, second))
                while pending:
                    while len(pending) < AHEAD * workers and (job := pull()) is not _END:
                        pending.append((job, pool.submit(fn, job)))
                    done, future = pending.popleft()
                    yield done, future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    if failure is not None:
        raise failure


#: no job left
_END = object()
