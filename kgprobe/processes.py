"""Worker processes that kgprobe's bulk work spreads over: a dump's chunks parsed
(kgprobe/loaders/parallel.py), a bulk load's import files converted for ArcadeDB's importer
(kgprobe/graph/bulk_arcadedb.py). One function, `ordered_map`, for both: results in the jobs'
order, whatever the number of processes, so that what is written does not depend on it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

from kgprobe.runtime import collect_rarely_here, rare_collections

#: jobs in flight per worker: one being worked on, one waiting, so that no worker idles
AHEAD = 2


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
