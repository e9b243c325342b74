"""Issue 38 (hardening, third round): plug-in measures and results files, driven through the
real ``kgprobe`` CLI and ``kgprobe.load_results``.

A plug-in that ends the program while it is imported, or whose measure returns what the
contract (docs/measures.md, "The contract") does not allow — NaN, infinity, a string, a dict,
too few rows, None — or raises while scoring, stops ``probe`` with one line naming the measure
and the plug-in, exit code 2, and nothing of the batch stored. A results directory that
``load_results`` cannot read is one line of the documented type, naming the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from _scoring_models import build
from probe_world import REF, load
from test_cli_graph import kgprobe

REPO = Path(__file__).resolve().parent.parent

PLUGIN = '''"""A measure of a plug-in that breaks the contract (tests/test_hardening_plugins_results.py)."""
import math
import sys

from kgprobe.probing.measures.registry import Measure, register


@register
class Bad(Measure):
    name = "bad"
    section = "test"
    summary = "a measure that breaks the contract"
    has_known = False

    def score(self, runner, facts, ctx):
        good = [{{"score": 0.5}} for _ in facts]
{body}
'''

#: case -> (the body of ``score``, what the error line says after the plug-in's name)
CASES: dict[str, tuple[str, str]] = {
    # the last fact's score only: the good values before it are not stored either
    "nan": ("        return good[:-1] + [{'score': float('nan')}]", "returned score nan for fact "),
    "inf": ("        return good[:-1] + [{'score': math.inf}]", "returned score inf for fact "),
    "str": ("        return '0.5'", "returned a str '0.5' for fact"),
    "dict": ("        return {f.key: v for f, v in zip(facts, good)}",
             "returned a dict {"),
    "few": ("        return good[:-1]", "returned 2 values for 3 facts (facts "),
    "none": ("        return None", "returned None for facts "),
    "raise": ("        raise ZeroDivisionError('the plug-in divided by zero')",
              "failed while scoring facts "),
}


def _facts(graph: Any) -> list[str]:
    return [r["key"] for r in graph.read(
        "MATCH (:Entity)-[f:FACT {pid: 'P36'}]->(:Entity) RETURN f.key AS key")]


def _stored(graph: Any) -> list[dict[str, Any]]:
    """Every FACT property a probe wrote for the measure ``bad`` of the model gpt2."""
    rows = graph.read("MATCH ()-[f:FACT]->() RETURN properties(f) AS p")
    return [{k: v for k, v in r["p"].items() if "bad" in k} for r in rows
            if any("bad" in k for k in r["p"])]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("gpt2", tmp_path_factory.mktemp("model") / "gpt2")


def _env(base: dict[str, str], mods: Path, **extra: str) -> dict[str, str]:
    return {**base, "PYTHONPATH": os.pathsep.join([str(mods), str(REPO)]), **extra}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_measure_that_breaks_the_contract_is_one_line(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, gpt2: Path, case: str,
) -> None:
    """NaN and infinity (the contract's "no score" is None with a '_reason', never NaN), a
    string, a dict, too few rows, None, an exception: exit 2, one line naming the measure, the
    plug-in module and how it was loaded, and no value of the batch on any fact."""
    load(graph)
    keys = _facts(graph)
    assert len(keys) == 3  # one batch: P36's three facts
    mods = tmp_path / "mods"
    mods.mkdir()
    body, says = CASES[case]
    (mods / f"bad_{case}.py").write_text(PLUGIN.format(body=body))
    # the raising plug-in comes by KGPROBE_PLUGINS, the others by --plugin
    root = [] if case == "raise" else ["--plugin", f"bad_{case}"]
    extra = {"KGPROBE_PLUGINS": f"bad_{case}"} if case == "raise" else {}
    r = kgprobe(*root, "probe", "--model", str(gpt2), "--measure", "bad", "-r", "P36", "--sample", "0",
                "--at", REF, "--no-cache", "--json", env=_env(kgprobe_env, mods, **extra))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    how = "KGPROBE_PLUGINS" if case == "raise" else "--plugin"
    assert lines[0].startswith(f"error: measure bad of plug-in bad_{case} (module bad_{case} ({how})) "), lines[0]
    assert says in lines[0], lines[0]
    if case in ("nan", "inf"):
        assert lines[0].split(" for fact ")[1].split(",")[0] in keys  # the fact at fault
    if case == "raise":
        assert lines[0].endswith("ZeroDivisionError: the plug-in divided by zero")
    else:
        assert lines[0].endswith("; nothing of this batch was stored")
    assert _stored(graph) == []
    run = graph.read("MATCH (r:ProbeRun) RETURN r.facts_scored AS scored, r.status AS status")
    assert run == [{"scored": 0, "status": "interrupted"}]


def test_a_plugin_that_exits_while_imported_is_one_line(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, gpt2: Path,
) -> None:
    """``sys.exit(0)`` at import once ended ``probe`` with exit 0, no output and nothing probed:
    now exit 2, one line naming the module and that it came by --plugin; no run is started."""
    load(graph)
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "exits_plugin.py").write_text("import sys\n\nsys.exit(0)\n")
    for root, extra, how in ((["--plugin", "exits_plugin"], {}, "--plugin"),
                             ([], {"KGPROBE_PLUGINS": "exits_plugin"}, "KGPROBE_PLUGINS")):
        r = kgprobe(*root, "probe", "--model", str(gpt2), "--measure", "kmin", "-r", "P36", "--sample", "0",
                    "--at", REF, "--no-cache", "--json", env=_env(kgprobe_env, mods, **extra))
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert r.stderr.strip() == (f"error: plugin module exits_plugin ({how}): called sys.exit(0) while "
                                    "being imported; a plug-in must not end the program"), r.stderr
        assert r.stdout == ""
    assert graph.read("MATCH (r:ProbeRun) RETURN count(r) AS n") == [{"n": 0}]
