"""Progress for terminals, logs and notebooks: one helper for every long-running command.

On a terminal (stderr is a TTY) a Rich bar or spinner is drawn in place. Anywhere else (stderr
sent to a file, a pipe, a notebook cell, CI) a live display would leave one frozen line for
minutes, so the same progress is written as plain lines, e.g.
``probing 120/600 facts, 0:01:12, ETA 0:04:48``, at most every :data:`INTERVAL` seconds and at
every :data:`STEP` of a known total, then once at the end. Progress goes to stderr so that
stdout holds only results. ``kgprobe --quiet`` (:func:`set_quiet`) turns every display off.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

#: seconds between two plain lines while nothing else calls for one
INTERVAL = 10.0
#: a plain line at every 1/STEPS (5%) of a known total (but not more often than :data:`MIN_GAP`)
STEPS = 20
MIN_GAP = 1.0

_quiet = False


def set_quiet(quiet: bool) -> None:
    """``--quiet``: no progress display at all, whatever a caller asks for."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    return _quiet


#: the width of a console that is not a terminal: wide enough that no table row wraps
WIDE = 10_000


def output_width(stream: TextIO | None = None) -> int | None:
    """The width for a results console on ``stream`` (stdout): None (Rich's own: the terminal's,
    or ``COLUMNS``) on a terminal or when ``COLUMNS`` is set, else :data:`WIDE`, so that a table
    sent to a file or a notebook keeps each row on one line (``0.875 [0.700, 1.000]`` unbroken)."""
    import os

    stream = stream if stream is not None else sys.stdout
    if os.environ.get("COLUMNS") or _is_terminal(stream):
        return None
    return WIDE


#: what a terminal would act on rather than show: C0 controls but tab and newline, DEL, C1
#: controls (ESC starts ANSI sequences that clear, recolour or hide text), and the bidirectional
#: embeddings, overrides and isolates that reorder what follows (Trojan Source, CVE-2021-42574)
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_OR_NEWLINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str, *, newlines: bool = True) -> str:
    """``text`` (a label, a path, a message) with every character a terminal would act on
    written as a visible escape (``\\x1b``, ``\\u202e``), so that data printed to a terminal
    cannot clear it, recolour or hide text, or reverse what follows. Newlines stay unless
    ``newlines`` is false (a table cell or one-line field). JSON, CSV and HTML keep the text
    intact: only terminal output goes through here."""
    pattern = _UNSAFE if newlines else _UNSAFE_OR_NEWLINE
    return pattern.sub(_escape, text) if pattern.search(text) else text


def safe_text(text: str, style: str | None = None) -> Any:
    """A Rich ``Text`` of data, made :func:`visible` (newlines escaped too: a cell is one line)."""
    from rich.text import Text

    return Text(visible(text, newlines=False), style=style or "")


def console(**kwargs: Any) -> Any:
    """A Rich console for kgprobe's terminal output: markup off (text from data is never
    markup) and every character a terminal would act on shown by :func:`visible`, in strings
    before layout (so widths are right) and, as a net, in whatever else reaches the terminal
    (Rich's own cursor and colour codes pass)."""
    from rich.console import Console
    from rich.segment import Segment

    class _Safe(Console):
        def render_str(self, text: str, **kw: Any) -> Any:
            return super().render_str(visible(text), **kw)

        def _render_buffer(self, buffer: Any) -> str:
            return super()._render_buffer(
                seg if seg.control else Segment(visible(seg.text), seg.style, seg.control)
                for seg in buffer)

    kwargs.setdefault("markup", False)
    return _Safe(**kwargs)


def clock_text(seconds: float) -> str:
    """``H:MM:SS``, as Rich's elapsed and remaining columns print it."""
    s = max(int(seconds), 0)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    """Progress of ``label`` over ``total`` ``unit`` (None: an open count, e.g. records read).

    Use as a context manager; :meth:`advance` counts done units, :meth:`describe` replaces the
    text after the label (an open count's own figures). ``stream`` and ``clock`` are for tests:
    a stream that is not a terminal gets plain lines."""

    def __init__(self, label: str, total: int | None = None, unit: str = "", *, enabled: bool = True,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.enabled = enabled and not _quiet and (total is None or total > 0)
        self.stream = stream
        self.clock = clock
        self.completed = 0
        self.text = ""
        self.mode = "off"
        self._bar: Any = None
        self._task: Any = None
        self._start = self._last = 0.0
        self._step = 0
        self._lines = 0
        self._dirty = False  # changed since the last plain line

    # --- the context ---------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        if not self.enabled:
            return self
        stream = self.stream if self.stream is not None else sys.stderr
        self._start = self._last = self.clock()
        if _is_terminal(stream):
            self.mode = "live"
            self._start_live(stream)
        else:
            self.mode = "plain"
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if self.mode == "live":
            self._bar.__exit__(exc_type, *rest)
        elif self.mode == "plain" and exc_type is None and (self._dirty or not self._lines):
            self._line()
        self.mode = "off"

    # --- updates -------------------------------------------------------------------------------

    def advance(self, n: int = 1) -> None:
        self.completed += n
        self._update()

    def describe(self, text: str) -> None:
        self.text = text
        self._update()

    def _update(self) -> None:
        if self.mode == "live":
            self._bar.update(self._task, completed=self.completed, description=self._live_text())
        elif self.mode == "plain":
            self._dirty = True
            now = self.clock()
            step = self.completed * STEPS // self.total if self.total else 0
            if now - self._last >= INTERVAL or (step > self._step and now - self._last >= MIN_GAP):
                self._line()
                self._step = step

    # --- rendering -----------------------------------------------------------------------------

    def line(self) -> str:
        """The plain line for the current state (what a log gets)."""
        elapsed = self.clock() - self._start
        if self.total is None:
            head = f"{self.label}: {self.text}" if self.text else self.label
            return f"{head}, {clock_text(elapsed)}"
        head = f"{self.label} {self.completed}/{self.total} {self.unit}".rstrip()
        if self.text:
            head += f" ({self.text})"
        tail = f", {clock_text(elapsed)}"
        if 0 < self.completed < self.total:
            tail += f", ETA {clock_text(elapsed / self.completed * (self.total - self.completed))}"
        return head + tail

    def _line(self) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        print(visible(self.line()), file=stream, flush=True)
        self._last = self.clock()
        self._lines += 1
        self._dirty = False

    def _live_text(self) -> str:
        return f"{self.label}: {self.text}" if self.total is None and self.text else self.label

    def _start_live(self, stream: TextIO) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar

        live = console(file=stream)
        columns: list[Any]
        if self.total is None:
            columns = [SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn()]
        else:
            columns = [TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                       TextColumn(self.unit, markup=False), TimeElapsedColumn(), TextColumn("ETA"),
                       TimeRemainingColumn()]
        self._bar = Bar(*columns, console=live)
        self._bar.__enter__()
        self._task = self._bar.add_task(self._live_text(), total=self.total)


def _is_terminal(stream: TextIO) -> bool:
    """Whether a live display can redraw itself on ``stream`` (Rich's own test, which also
    honours FORCE_COLOR / TTY_COMPATIBLE and knows notebooks)."""
    from rich.console import Console

    console = Console(file=stream)
    return console.is_terminal and not console.is_dumb_terminal
