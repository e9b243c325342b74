"""Interpreter settings that kgprobe's bulk work runs under, held for its length and restored
after it: a rarer cyclic collection (ingest, parsing workers, the probe loop) and a prompt GIL
switch (ingest). Work that overlaps in threads shares them: the first in sets a setting, the
last out restores what it was before.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: Python's cyclic collector runs when tracked allocations outnumber frees by this many (its
#: default is 700). Work that makes objects in bulk allocates tens of thousands of them (a
#: batch of records, a batch's requests and results) before it frees any, so at 700 the
#: collector runs thousands of times, its full passes re-walking every live object:
#: - an ingest: 3.5–3.9 s of the 17.5–17.9 s that reading and building 1M statements cost;
#: - the probe loop: 0.57–0.66 of 1.37–1.55 CPU-ms per fact of its own Python (3,000 demo
#:   facts, model-free) (docs/benchmarks.md).
#: Records, requests and results hold no reference cycles, so they are freed by reference
#: counting alone; garbage in cycles still counts towards this threshold and is collected once
#: it is reached.
GC_THRESHOLD = 100_000

_lock = threading.Lock()
_depth: dict[str, int] = {}
_saved: dict[str, Any] = {}


@contextlib.contextmanager
def _held(name: str, read: Callable[[], Any], write: Callable[[Any], object],
          tuned: Callable[[Any], Any]) -> Iterator[None]:
    """``write(tuned(read()))`` for the first holder of ``name``; the last restores ``read()``."""
    with _lock:
        if _depth.get(name, 0) == 0:
            _saved[name] = read()
            write(tuned(_saved[name]))
        _depth[name] = _depth.get(name, 0) + 1
    try:
        yield
    finally:
        with _lock:
            _depth[name] -= 1
            if _depth[name] == 0:
                write(_saved.pop(name))


def rare_collections(threshold: int = GC_THRESHOLD) -> contextlib.AbstractContextManager[None]:
    """The cyclic collector's first threshold at least ``threshold`` (see :data:`GC_THRESHOLD`)."""
    return _held("gc", gc.get_threshold, lambda t: gc.set_threshold(*t),
                 lambda t: (max(t[0], threshold), *t[1:]))


def collect_rarely_here() -> None:
    """This whole process's collector at least as rare as :func:`rare_collections` makes it,
    for good: a worker process that only makes objects in bulk (a spawned one does not inherit
    the setting of the process that started it)."""
    gc.set_threshold(max(GC_THRESHOLD, gc.get_threshold()[0]), *gc.get_threshold()[1:])


def prompt_gil_switch(seconds: float) -> contextlib.AbstractContextManager[None]:
    """The GIL switch interval at most ``seconds``: a thread woken by a socket (the ingest's
    writer) gets the GIL from a busy one without waiting Python's default 5 ms."""
    return _held("switch", sys.getswitchinterval, sys.setswitchinterval,
                 lambda s: min(s, seconds))
