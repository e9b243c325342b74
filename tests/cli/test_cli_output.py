"""Issue 20 item 5: output off a terminal. Progress is plain periodic lines when stderr is not a
terminal (never a frozen spinner), tables do not wrap when stdout is not a terminal, `-h` is
`--help`, shell completion works, `--quiet`/`--verbose` are global, and the README's exit-code
and environment-variable tables list what the code has."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_support import clean_env, kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe import progress as P

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def _no_terminal_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich's switches that make any stream a terminal (or set a width) are the test's to set."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_plain_lines_for_a_known_total() -> None:
    """Off a terminal: a line at each 5% step (at most one a second), at least every 10 s,
    and one at the end; elapsed and ETA as H:MM:SS."""
    out, clock = io.StringIO(), Clock()
    with P.Progress("probing", 600, "facts", stream=out, clock=clock) as bar:
        assert bar.mode == "plain"
        clock.t += 0.5
        bar.advance(30)  # 5%, but within a second of the start: no line yet
        assert out.getvalue() == ""
        clock.t += 2.0
        bar.advance(1)  # 2.5 s after the start, past the 5% step
        clock.t += 20.0
        bar.advance(1)  # nothing new to a 5% step, but 20 s since the last line
        clock.t += 5.0
        bar.advance(88)  # 120/600 = 20%: a new step
        clock.t += 3.0
        bar.advance(1)  # same step, 3 s: no line
        clock.t += 60.0
        bar.advance(479)
    # elapsed, then ETA = elapsed / done * left: 2.5/31*569 = 45.9 s, 22.5/32*568 = 399.4 s,
    # 27.5/120*480 = 110 s; the 5% step passed 0.5 s after the start waits for the next update
    assert out.getvalue().splitlines() == ["probing 31/600 facts, 0:00:02, ETA 0:00:45",
                                           "probing 32/600 facts, 0:00:22, ETA 0:06:39",
                                           "probing 120/600 facts, 0:00:27, ETA 0:01:50",
                                           "probing 600/600 facts, 0:01:30"]


def test_plain_lines_for_an_open_count_and_quiet() -> None:
    out, clock = io.StringIO(), Clock()
    with P.Progress("ingesting", stream=out, clock=clock) as bar:
        bar.describe("10 entities")
        clock.t += 11
        bar.describe("20 entities")
        clock.t += 3
        bar.describe("30 entities")
    assert out.getvalue().splitlines() == ["ingesting: 20 entities, 0:00:11", "ingesting: 30 entities, 0:00:14"]
    with pytest.raises(RuntimeError), P.Progress("probing", 3, "facts", stream=out, clock=clock) as bar:
        bar.advance(1)
        raise RuntimeError  # a failed run prints no final line (the error is the last word)
    assert len(out.getvalue().splitlines()) == 2
    P.set_quiet(True)
    try:
        with P.Progress("probing", 3, "facts", stream=out, clock=clock) as bar:
            bar.advance(3)
        assert bar.mode == "off" and len(out.getvalue().splitlines()) == 2
    finally:
        P.set_quiet(False)


def test_a_terminal_gets_the_live_bar_and_a_file_a_wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console
    from rich.table import Table

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")  # Rich's own switch: treat the stream as a terminal
    monkeypatch.delenv("TERM", raising=False)
    out = io.StringIO()
    with P.Progress("probing", 4, "facts", stream=out) as bar:
        assert bar.mode == "live"
        bar.advance(4)
    assert "probing" in out.getvalue() and "4/4" in out.getvalue()
    assert P.output_width(out) is None  # a terminal: Rich's width
    monkeypatch.delenv("FORCE_COLOR")
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    assert P.output_width(io.StringIO()) == P.WIDE
    table = Table("relation", "mean [95% CI]", "label")
    for i in range(3):
        table.add_row(f"P{i}", "0.875 [0.700, 1.000]", "a rather long relation label " * 4)
    file = io.StringIO()
    Console(file=file, width=P.output_width(file), markup=False).print(table)
    rows = [line for line in file.getvalue().splitlines() if "0.875" in line]
    assert len(rows) == 3 and all("[0.700, 1.000]" in r and r.count("label") == 4 for r in rows)
    monkeypatch.setenv("COLUMNS", "80")
    assert P.output_width(io.StringIO()) is None  # COLUMNS asks for a width: Rich honours it


def test_help_completion_quiet_verbose(tmp_path: Path) -> None:
    env = clean_env(KGPROBE_CONFIG=str(tmp_path / "none.json"), KGPROBE_HOME=str(tmp_path / "home"))
    for args in (["-h"], ["probe", "-h"], ["db", "start", "-h"], ["--help"]):
        r = kgprobe(*args, env=env)
        assert r.returncode == 0 and "Usage: kgprobe" in r.stdout, (args, r.stderr)
    # the bash completion script, the shell named (`--show-completion` asks shellingham for the
    # parent shell, which a test runner or CI job does not have)
    shown = kgprobe(env={**env, "_KGPROBE_COMPLETE": "source_bash"})
    assert shown.returncode == 0 and "_KGPROBE_COMPLETE=complete_bash" in shown.stdout, shown.stdout + shown.stderr
    named = kgprobe(env={**env, "_KGPROBE_COMPLETE": "source_zsh"})  # a shell named, not detected
    assert named.returncode == 0 and named.stdout.lstrip().startswith("#compdef kgprobe")
    done = kgprobe(env={**env, "_KGPROBE_COMPLETE": "complete_bash", "COMP_WORDS": "kgprobe pro", "COMP_CWORD": "1"})
    assert done.stdout.split() == ["probe"]
    done = kgprobe(env={**env, "_KGPROBE_COMPLETE": "complete_bash", "COMP_WORDS": "kgprobe probe --meas",
                        "COMP_CWORD": "2"})
    assert done.stdout.split() == ["--measure"]
    both = kgprobe("-q", "-v", "version", env=env)
    assert both.returncode == 2 and both.stderr == "error: --quiet and --verbose exclude each other\n"
    assert not (tmp_path / "home").exists()


def test_measures_is_readable_at_80_columns_and_unbroken_in_a_log(tmp_path: Path) -> None:
    env = clean_env(KGPROBE_CONFIG=str(tmp_path / "none.json"))  # after the fixture: no COLUMNS
    names = [m["name"] for m in json.loads(kgprobe("measures", "--json", env=env).stdout)["measures"]]
    narrow = kgprobe("measures", env={**env, "COLUMNS": "80"}).stdout.splitlines()
    assert max(map(len, narrow)) <= 80
    heads = [line.split(" - ", 1)[0] for line in narrow if not line.startswith(" ") and " - " in line]
    assert heads == names  # one block per measure, its name first
    assert "  property   score__<model>__kmin_<strategy>_n<n>[_<non-default parameters>]" in narrow
    wide = kgprobe("measures", env=env).stdout.splitlines()  # a pipe, no COLUMNS: nothing wraps
    assert len(wide) == 5 * len(names) + 1 and max(map(len, wide)) > 80


def test_probe_and_ingest_progress_in_a_log(graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel) -> None:
    """Run with stderr a pipe: plain lines, no carriage return or escape sequence; --quiet:
    none; --verbose logs the plug-ins it loads."""
    env = {k: v for k, v in kgprobe_env.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    load(graph)
    gpt2 = str(tiny_model("gpt2"))
    common = ["probe", "--model", gpt2, "-r", "P36", "--sample", "0", "-s", "random", "-n", "2", "--at", REF,
              "--no-cache"]
    r = kgprobe(*common, env=env)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"probing 3/3 facts, 0:00:\d\d\n", r.stderr), r.stderr
    assert "scored" in r.stdout and "\x1b" not in r.stdout + r.stderr and "\r" not in r.stdout + r.stderr
    quiet = kgprobe("--quiet", *common, "--force", env=env)
    assert quiet.returncode == 0 and quiet.stderr == "" and "scored" in quiet.stdout
    verbose = kgprobe("--verbose", "--plugin", "kgprobe_top1", *common, "--force",
                      env={**env, "PYTHONPATH": f"{REPO / 'examples' / 'kgprobe-top1'}:{REPO}"})
    assert verbose.returncode == 0, verbose.stderr
    assert "kgprobe.plugins: plug-in loaded: module kgprobe_top1 (kgprobe.measures)" in verbose.stderr

    q = str(FIXTURES / "wikidata" / "entity-json" / "Q182397.json")
    ing = kgprobe("ingest", q, env=env)
    assert ing.returncode == 0, ing.stderr
    assert re.fullmatch(r"ingesting: 1 entities, \d+ facts, \d+ skipped, 0 errors \(\d[\d,]* records/s\), 0:00:\d\d\n",
                        ing.stderr), ing.stderr


def test_readme_tables_list_what_the_code_reads() -> None:
    """Every KGPROBE_* / NEO4J_* / HF_* variable the package reads is in README's environment
    table, and every exit code of kgprobe.errors in its exit-code table."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    env_table = readme.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([A-Z0-9_]+)`", env_table, re.M))
    source = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "kgprobe").rglob("*.py"))
    read = set(re.findall(r"[\"']((?:KGPROBE|NEO4J|HF)_[A-Z0-9_]+)[\"']", source))
    assert read and read <= listed, sorted(read - listed)
    codes = {int(c) for c in re.findall(r"^    exit_code = (\d+)$", source, re.M)}
    exit_table = readme.split("| Exit code | Meaning |", 1)[1].split("\n\n", 1)[0]
    assert codes | {0} == {int(c) for c in re.findall(r"^\| (\d+) \|", exit_table, re.M)}
