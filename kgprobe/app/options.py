"""The checks of a workflow's options, in one place (issue 39 #3): the workflows of
:mod:`kgprobe.app` call them, so ``kgprobe.api`` and the CLI refuse a bad value with the same
one line (exit 2 for a setting, 4 for a missing input), before any graph or model is touched.
Messages name the CLI's option (``--threshold``), which is also the keyword of the API.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from kgprobe.checks import check_number as check_number
from kgprobe.checks import check_threshold as check_threshold
from kgprobe.errors import ConfigError, InputError
from kgprobe.records import is_pid

#: Seeds are 0 <= seed < 2**32 (what every random generator kgprobe seeds accepts).
MAX_SEED = 2**32 - 1
#: CPU threads for torch: at least 1, at most this.
MAX_THREADS = 1024


def check_seed(value: int | None, option: str = "--seed") -> None:
    check_number(option, value, 0, MAX_SEED)


def check_threads(value: int | None) -> None:
    check_number("--threads", value, 1, MAX_THREADS)


def check_model_options(batch_tokens: int | None, threads: int | None = None) -> None:
    check_number("--batch-tokens", batch_tokens, 1)
    check_threads(threads)


def check_pids(values: Iterable[str], option: str = "--relation") -> None:
    """Every ``--relation`` a Wikidata property id (``P36``; case and spaces forgiven as the
    probe does)."""
    for v in values:
        if not is_pid(v.strip().upper()):
            raise ConfigError(f"{option} {v!r} is not a Wikidata property id (P1, P2, ...)")


def check_date(value: str | None, option: str = "--at") -> None:
    """A reference date YYYY-MM-DD (the probe's own parser)."""
    from kgprobe.graph.distractors import date_sort_key

    if value is None:
        return
    try:
        date_sort_key(value)
    except ConfigError:
        raise ConfigError(f"{option} {value!r} is not a date YYYY-MM-DD") from None


def check_choice(option: str, value: str, choices: Sequence[str]) -> None:
    """A value of a fixed set (``--format``)."""
    if value not in choices:
        raise ConfigError(f"unknown {option} {value!r}; choose from: {', '.join(choices)}")


#: ``kgprobe report --format``: what the command prints.
REPORT_FORMATS = ("text", "json", "md", "tex", "harness")


def check_verbosity(quiet: bool, verbose: bool) -> None:
    """``-q`` and ``-v`` of the whole program: one or the other."""
    if quiet and verbose:
        raise ConfigError("--quiet and --verbose exclude each other")


def check_set_output(probe_set: str | None, output_path: str | None) -> None:
    """``probe --set`` from the command line writes its scores to a file: it prints none (the
    API's ``probe(set=...)`` returns them, so it needs no ``output_path``)."""
    if probe_set is not None and output_path is None:
        raise ConfigError("--set needs --output-path DIR: its scores go to DIR/scores.parquet")


def require_file(path: str | Path, what: str = "file") -> None:
    """One line (exit 4) when an input file or folder is missing."""
    if not Path(path).exists():
        raise InputError(f"no such {what}: {path}")


def relations(*options: str | Iterable[str] | None) -> list[str]:
    """The union of repeatable ``--relation`` options (and their old aliases), order kept; one
    PID as a string is one relation."""
    seen: dict[str, None] = {}
    for values in options:
        for v in ([values] if isinstance(values, str) else values or ()):
            seen.setdefault(v, None)
    return list(seen)


def shard_of(value: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """``--shard K/N`` as (K, N), 1 <= K <= N; a pair or None passes through."""
    from kgprobe.graph.probe_runs import parse_shard

    return parse_shard(value) if isinstance(value, str) else value


def load_models_with(*, device: str | None = None, batch_tokens: int | None = None,
                     model_arg: Sequence[str] | None = None, backend: str | None = None,
                     model: object = None, threads: int | None = None) -> None:
    """Check ``--device``/``--batch-tokens``/``--threads`` and apply them and ``--model-arg`` to
    every model this process loads, and ``--backend`` (or a URL as ``model``) to the model it
    scores (:func:`kgprobe.probing.engine.select_model` reads it)."""
    from kgprobe.probing.engine import URL_BACKEND, is_url
    from kgprobe.probing.models import configure_loading, parse_model_args

    check_model_options(batch_tokens, threads)
    if backend is None and is_url(model):
        backend = URL_BACKEND
    configure_loading(device, parse_model_args(list(model_arg) if model_arg else None), batch_tokens, backend)
