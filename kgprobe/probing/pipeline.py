"""Overlap a probe's graph I/O with its scoring: a reader that works ahead, a writer behind.

The probe loop reads what the next batches need (:class:`Ahead`) and writes the scores of the
previous ones (:class:`Behind`) while the engine scores the current batch. The reader runs on
threads of its own (one by default: the loop's ``GATHER_THREADS``), the writer on ONE thread, so their graph calls go through sessions of their own
(``Graph`` opens a session per call; the driver is thread-safe, a session is not). Both are
bounded: the reader is at most ``depth`` batches ahead, the writer at most ``depth`` write jobs
behind, so memory does not grow with the run. An error on any of these threads is raised again
on the thread that consumes it, as the same exception object (a ``GraphUnavailable`` stays one).

A write job is one transaction (scores and the run's counters together), done in order, so a
run killed at any point has written a prefix of its batches, each whole: the same command
scores the rest (docs/probing.md, "Resuming").
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_POLL = 0.1  # seconds between checks of the other side while a queue is full or empty


class Ahead(Generic[T, R]):
    """``fn(item)`` for each item, computed on background threads at most ``depth`` results
    ahead of the consumer, yielded in order. Up to ``threads`` items are computed at once
    (never more than ``depth``): a gather spends much of its time waiting for the server, and
    a second thread's Python runs meanwhile. ``depth`` 0 computes each on the consumer's
    thread when it is asked for (no thread: for work that must not run beside the scoring,
    e.g. ApprOpt's beam search, which uses the engine itself)."""

    def __init__(self, fn: Callable[[T], R], items: Iterable[T], depth: int = 2,
                 threads: int = 1) -> None:
        self._fn, self._items, self.depth = fn, items, depth
        self.threads = max(1, min(threads, depth))
        self._pool: ThreadPoolExecutor | None = None
        self._running: deque[Future[R]] = deque()

    def __iter__(self) -> Iterator[R]:
        if self.depth <= 0:
            for item in self._items:
                yield self._fn(item)
            return
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kgprobe-gather")
        items = iter(self._items)
        try:
            for item in itertools.islice(items, self.depth):
                self._running.append(self._pool.submit(self._fn, item))
            while self._running:
                value = self._running.popleft().result()  # its error, raised here as itself
                for item in itertools.islice(items, 1):
                    self._running.append(self._pool.submit(self._fn, item))
                yield value
        finally:
            self.close()

    def close(self, timeout: float = 5.0) -> None:
        """Stop working ahead (what was read ahead is dropped) and wait up to ``timeout``
        seconds for the items under way."""
        if self._pool is None:
            return
        for f in self._running:
            f.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        wait(self._running, timeout)
        self._running.clear()


class Behind:
    """Jobs run in order on one background thread, at most ``depth`` waiting (``submit``
    blocks beyond that). ``depth`` 0 runs each job on the caller's thread. The first error
    stops the jobs after it and is raised by the next ``submit`` or by ``finish``."""

    def __init__(self, depth: int = 2) -> None:
        self.depth = depth
        self.error: BaseException | None = None
        self._abort = threading.Event()
        self._q: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=max(depth, 1))
        self._thread: threading.Thread | None = None
        if depth > 0:
            self._thread = threading.Thread(target=self._work, name="kgprobe-write", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._q.get()
            if job is None:
                return
            if self.error is not None or self._abort.is_set():
                continue  # after an error or an abort, later jobs are dropped in order
            try:
                job()
            except BaseException as exc:  # raised on the submitting thread
                self.error = exc

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def submit(self, job: Callable[[], None]) -> None:
        self._check()
        if self._thread is None:
            job()
            return
        while True:
            try:
                self._q.put(job, timeout=_POLL)
                return
            except queue.Full:
                self._check()
                if not self._thread.is_alive():
                    raise RuntimeError("the write thread ended without a word") from None

    def finish(self) -> None:
        """Wait until every job submitted is done; raise the first error."""
        if self._thread is not None:
            while self._thread.is_alive():
                try:
                    self._q.put(None, timeout=_POLL)
                    break
                except queue.Full:
                    continue
            self._thread.join()
        self._check()

    def abort(self, timeout: float = 10.0) -> None:
        """Drop the jobs still waiting; the one running ends (its transaction commits or not,
        whole) within ``timeout`` seconds or is left to the daemon thread."""
        self._abort.set()
        if self._thread is None:
            return
        with contextlib.suppress(queue.Empty):
            while True:
                self._q.get_nowait()
        with contextlib.suppress(queue.Full):
            self._q.put_nowait(None)
        self._thread.join(timeout)
