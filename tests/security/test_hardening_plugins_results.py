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
from cli_support import kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

REPO = Path(__file__).resolve().parents[2]

PLUGIN = '''"""A measure of a plug-in that breaks the contract (tests/security/test_hardening_plugins_results.py)."""
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
def gpt2(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2")


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


# --- results files -------------------------------------------------------------------------------


def _v1_document() -> dict[str, Any]:
    """A results.json as kgprobe wrote it under schema 1 (docs/results.md, "Schema versions"):
    lm-evaluation-harness's top-level names, no ``models``."""
    return {"schema": "kgprobe-results/1", "date": "2025-01-01T00:00:00+00:00", "model_name": "gpt2",
            "git_hash": None, "versions": {"torch": "2.5"}, "config": {"measure": "kmin"},
            "results": {"P36": {"n": 3, "mean": 0.5}}}


def test_load_results_refuses_what_it_cannot_read(graph: Any, gpt2: Path, tmp_path: Path) -> None:
    """A real results directory (probe --output-path), then copies of it broken one way each:
    every one is one line of the documented type naming the file, never a traceback and never
    a document read as if it had no relations."""
    import shutil

    import kgprobe
    from kgprobe.api import probe
    from kgprobe.errors import ConfigError, InputError

    load(graph)
    good = tmp_path / "good"
    probe(str(gpt2), graph=graph, strategy="random", n=2, sample=None, at=REF, no_cache=True,
          progress=False, output_path=good)
    res = kgprobe.load_results(good)
    assert len(res.relations) > 1 and len(res.samples) > 1  # what the broken copies are made of
    doc = json.loads((good / "results.json").read_text(encoding="utf-8"))

    def copy(name: str, *, drop_jsonl: bool = False) -> Path:
        d = tmp_path / name
        shutil.copytree(good, d)
        if drop_jsonl:
            (d / "samples.jsonl").unlink()
        return d

    cases: list[tuple[str, Path, type[Exception], str]] = []
    d = copy("v999")
    (d / "results.json").write_text(json.dumps({**doc, "schema": "kgprobe-results/999"}), encoding="utf-8")
    cases.append(("unknown version", d, ConfigError,
                  f"{d / 'results.json'} has schema 'kgprobe-results/999', perhaps a newer kgprobe's; "
                  "read it with that kgprobe; this kgprobe reads kgprobe-results/2"))
    d = copy("v1")
    (d / "results.json").write_text(json.dumps(_v1_document()), encoding="utf-8")
    cases.append(("older version", d, ConfigError,
                  f"{d / 'results.json'} has schema 'kgprobe-results/1', an older kgprobe's; write the "
                  "results again with this kgprobe (kgprobe report --out); this kgprobe reads kgprobe-results/2"))
    d = copy("truncated")
    text = (good / "results.json").read_text(encoding="utf-8")
    (d / "results.json").write_text(text[: len(text) // 2], encoding="utf-8")
    cases.append(("truncated", d, InputError, f"{d / 'results.json'} is not valid JSON (damaged or cut short?): "))
    d = copy("empty")
    (d / "results.json").write_bytes(b"")
    cases.append(("empty", d, InputError, f"{d / 'results.json'} is empty"))
    d = copy("list")
    (d / "results.json").write_text(json.dumps([doc]), encoding="utf-8")
    cases.append(("a list", d, InputError, f"{d / 'results.json'} holds a JSON a list, not a kgprobe "
                  "results document"))
    d = copy("models-shape")
    (d / "results.json").write_text(json.dumps({**doc, "models": [{**doc["models"][0], "results": []}]}),
                                    encoding="utf-8")
    cases.append(("models[0].results a list", d, InputError,
                  f"{d / 'results.json'}: models[0].results is a list, not an object"))
    d = copy("latin1")
    (d / "results.json").write_bytes(json.dumps({**doc, "primary_model": "Café"}, ensure_ascii=False)
                                     .encode("latin-1"))
    cases.append(("Latin-1", d, InputError, f"{d / 'results.json'} is not UTF-8 text (byte 0xe9 at offset "))
    d = copy("jsonl-cut")
    lines = (good / "samples.jsonl").read_text(encoding="utf-8")
    (d / "samples.jsonl").write_text(lines[: len(lines) - 40], encoding="utf-8")
    n = lines.count("\n")
    cases.append(("truncated samples.jsonl", d, InputError,
                  f"{d / 'samples.jsonl'} line {n} is not valid JSON (damaged or cut short?): "))
    d = copy("parquet", drop_jsonl=True)
    data = (good / "samples.parquet").read_bytes()
    (d / "samples.parquet").write_bytes(data[: len(data) // 2])
    cases.append(("corrupt Parquet", d, InputError,
                  f"{d / 'samples.parquet'} is not a readable Parquet file (damaged or cut short?): "))
    cases.append(("missing directory", tmp_path / "nowhere", InputError,
                  f"{tmp_path / 'nowhere'}: no such results directory"))
    d = copy("no-results")
    (d / "results.json").unlink()
    cases.append(("missing results.json", d / "results.json", InputError, f"{d} has no results.json"))
    for what, where, kind, text in cases:
        with pytest.raises(kind) as got:
            kgprobe.load_results(where)
        msg = str(got.value)
        assert type(got.value) is kind, (what, type(got.value), msg)
        assert msg.startswith(text), (what, msg)
        assert "\n" not in msg, (what, msg)
    # the file itself may be named too
    assert len(kgprobe.load_results(good / "results.json").samples) == len(res.samples)


def test_a_nan_in_the_graph_never_reaches_a_json_file(
    graph: Any, kgprobe_env: dict[str, str], gpt2: Path, tmp_path: Path,
) -> None:
    """A NaN stored by an older kgprobe: `kgprobe report --out` stops with one line naming the
    file and the value's place (exit 1) and writes no report.json, results.json or harness.json
    holding NaN (json.dumps would write the bare token NaN, which strict JSON readers refuse)."""
    from kgprobe.api import probe

    load(graph)
    probe(str(gpt2), graph=graph, strategy="random", n=2, sample=None, at=REF, no_cache=True,
          progress=False)
    prop = "score__gpt2__kmin_random_n2"
    hit = graph.write(f"MATCH ()-[f:FACT]->() WHERE f.{prop} IS NOT NULL WITH f LIMIT 1 "
                      f"SET f.{prop} = $nan RETURN f.key AS key", nan=float("nan"))
    assert len(hit) == 1
    out = tmp_path / "report"
    r = kgprobe("report", "-m", "gpt2", "--measure", "kmin_random_n2", "--out", str(out), env=kgprobe_env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    # the last line (scipy may warn first about the bootstrap of a degenerate sample)
    line = r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr and line.startswith("error: report.json: the value at "), r.stderr
    assert line.endswith("is nan, not a finite number; JSON has no such number, so nothing was written")
    for name in ("report.json", "results.json", "harness.json"):
        assert not (out / name).exists()
