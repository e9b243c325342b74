"""The range checks of numeric settings, below every layer that takes them: the app's option
checks (:mod:`kgprobe.app.options`), a probe's configuration (:class:`kgprobe.probing.config.
ProbeConfig`) and the stored-score readers (:func:`kgprobe.probing.scores.resolve_scores`) all
call these, so one bad value reads the same wherever it is caught first (issue 39 #3). Messages
name the CLI's option (``--threshold``), which is also the keyword of the API."""

from __future__ import annotations

import math

from kgprobe.errors import ConfigError

#: A fact is known when its score is at least this (``--threshold``'s default: probe, export).
DEFAULT_THRESHOLD = 0.5


def check_number(option: str, value: float | None, low: float | None = None,
                 high: float | None = None) -> None:
    """One line (exit 2) for a numeric option that is not finite or outside its documented
    range (NaN compares false with every bound, so it is caught explicitly: ``--threshold nan``
    once listed no fact and exited 0)."""
    if value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{option} must be a finite number, got {value}")
    if low is not None and value < low:
        raise ConfigError(f"{option} must be at least {low:g}, got {value:g}")
    if high is not None and value > high:
        raise ConfigError(f"{option} must be at most {high:g}, got {value:g}")


def check_threshold(value: float | None, option: str = "--threshold") -> None:
    """A known threshold: finite and >= 0 (every measure's score is >= 0)."""
    check_number(option, value, 0)
