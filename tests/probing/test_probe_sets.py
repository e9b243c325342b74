"""Probe sets (issue 42): ``kgprobe export`` -> ``kgprobe probe --set`` with no graph server ->
``kgprobe import-scores`` gives the FACT properties a direct ``kgprobe probe`` of the same facts
writes; shards of a set merge to the unsharded result; a changed or foreign file is refused in
one line.

Every step is a real CLI process with a tiny GPT-2 on the CPU. The scoring process runs with an
empty KGPROBE_HOME, no graph settings, no Java on its PATH, the managed server's package made
unimportable, and an audit hook that fails it on any socket connection or any start of a java
program: it cannot have reached a graph server or started a JVM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _kgprobe_process import run_kgprobe
from probe_world import REF, load, same_props, score_props
from tiny_models import TinyModel

from kgprobe.graph import probe_runs as pr

SAMPLE = ["--sample", "0", "-n", "2", "--strategy", "random", "--at", REF]
MODEL_OPTS = ["--no-cache", "--device", "cpu", "--batch-tokens", "64"]

#: Run kgprobe's CLI with no way to a graph server or a JVM (see the module doc). A violation
#: is printed as VIOLATION and ends the process with exit code 99.
OFFLINE = r"""
import os, sys
sys.modules["arcadedb_embedded"] = None  # the managed server's package (and its Java)
def hook(event, args):
    bad = None
    if event == "socket.connect":
        bad = f"socket.connect {args[1]!r}"
    elif event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        prog = os.path.basename(str(args[0]))
        argv0 = os.path.basename(str(args[1][0])) if args[1] else ""
        if "java" in (prog, argv0):
            bad = f"{event} {prog}"
    if bad:
        print("VIOLATION " + bad, file=sys.stderr, flush=True)
        os._exit(99)
sys.addaudithook(hook)
from kgprobe.cli import main
sys.argv = ["kgprobe", *sys.argv[1:]]
main()
"""

#: every FACT property of the world's facts (a test-side read; names are data)
def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``kgprobe ARGS`` as a process of its own (forked from the suite's fork server:
    tests/_kgprobe_process.py)."""
    return run_kgprobe(args, env, timeout=600)


def _offline_env(tmp: Path) -> dict[str, str]:
    """No graph settings, an empty KGPROBE_HOME, no java on the PATH, no network for models."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEO4J_", "KGPROBE_", "JAVA")) and k != "JDK_HOME"}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and not (Path(d) / "java").exists())
    env["KGPROBE_HOME"] = str(tmp / "empty-home")
    env["KGPROBE_CONFIG"] = str(tmp / "no-config.json")
    env["HF_HUB_OFFLINE"] = env["TRANSFORMERS_OFFLINE"] = "1"
    return env


def _score_offline(tmp: Path, pset: Path, model: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = _offline_env(tmp)
    done = subprocess.run([sys.executable, "-c", OFFLINE, "probe", "--set", str(pset), "--model", str(model),
                           "--output-path", str(out), *MODEL_OPTS, "--json", *extra],
                          capture_output=True, text=True, env=env, timeout=600)
    assert "VIOLATION" not in done.stderr, done.stderr
    assert not Path(env["KGPROBE_HOME"]).exists()  # no managed server home was made
    return done


@pytest.fixture()
def gpt2(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2")


def test_export_score_offline_import_equals_direct_probe(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, gpt2: Path
) -> None:
    # the direct probe: gather, score and write with the graph server beside the model
    load(graph)
    direct = _cli(["probe", "--model", str(gpt2), *SAMPLE, *MODEL_OPTS, "--json"], kgprobe_env)
    assert direct.returncode == 0, direct.stderr
    want = score_props(graph)
    scored = [k for k, p in want.items() if any(n.startswith("score__") and v is not None
                                                 for n, v in p.items())]
    assert len(scored) >= 5  # the world's facts were really scored

    # the same facts through a probe set, on a fresh copy of the graph
    graph.write("MATCH (n) DETACH DELETE n")
    load(graph)
    pset = tmp_path / "set.parquet"
    ex = _cli(["export", "-o", str(pset), *SAMPLE, "--json"], kgprobe_env)
    assert ex.returncode == 0, ex.stderr
    assert json.loads(ex.stdout)["facts"] == len(want)

    done = _score_offline(tmp_path, pset, gpt2, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    scores = tmp_path / "out" / "scores.parquet"
    assert score_props(graph) == {}  # scoring wrote nothing to the graph

    imp = _cli(["import-scores", str(scores), "--json"], kgprobe_env)
    assert imp.returncode == 0, imp.stderr
    assert json.loads(imp.stdout)[0]["status"] == "imported"
    got = score_props(graph)
    same_props(got, want)
    runs = pr.list_runs(graph)
    assert len(runs) == 1 and runs[0]["status"] == "finished"
    assert runs[0]["facts_scored"] == len(scored)
    assert runs[0]["probe_set"] == json.loads(ex.stdout)["content_hash"]

    # idempotent: a second import writes nothing and records no second run
    again = _cli(["import-scores", str(scores), "--json"], kgprobe_env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0]["status"] == "already imported"
    assert len(pr.list_runs(graph)) == 1
    assert score_props(graph) == got


def _rows(path: Path) -> dict[tuple[str, str], float | None]:
    return {(r["key"], r["measure"]): r["score"] for r in pq.read_table(path).to_pylist()}


def test_shards_of_a_set_merge_to_the_unsharded_result(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, gpt2: Path
) -> None:
    load(graph)
    pset = tmp_path / "set.parquet"
    assert _cli(["export", "-o", str(pset), *SAMPLE, "--json"], kgprobe_env).returncode == 0
    for name, extra in (("whole", []), ("s1", ["--shard", "1/2"]), ("s2", ["--shard", "2/2"])):
        done = _score_offline(tmp_path, pset, gpt2, tmp_path / name, *extra)
        assert done.returncode == 0, done.stderr
    whole = _rows(tmp_path / "whole" / "scores.parquet")
    s1, s2 = (_rows(tmp_path / s / "scores.parquet") for s in ("s1", "s2"))
    assert s1 and s2 and not set(s1) & set(s2)  # disjoint, both non-empty
    merged = {**s1, **s2}
    assert set(merged) == set(whole)
    for k, v in whole.items():
        assert (v is None) == (merged[k] is None) and (v is None or abs(v - merged[k]) <= 1e-6), k

    # imported, the two shards write what the unsharded file writes (run ids aside)
    imp = _cli(["import-scores", str(tmp_path / "s1" / "scores.parquet"),
                str(tmp_path / "s2" / "scores.parquet"), "--json"], kgprobe_env)
    assert imp.returncode == 0, imp.stderr
    from_shards = score_props(graph)
    graph.write("MATCH (n) DETACH DELETE n")
    load(graph)
    assert _cli(["import-scores", str(tmp_path / "whole" / "scores.parquet")],
                kgprobe_env).returncode == 0
    same_props(from_shards, score_props(graph))


def _rewrite(path: Path, meta_key: bytes, change: Any) -> None:
    """Rewrite a kgprobe Parquet file with ``change(header, rows)`` applied, metadata kept."""
    table = pq.read_table(path)
    header = json.loads(table.schema.metadata[meta_key])
    rows = table.to_pylist()
    change(header, rows)
    cols = {name: [r[name] for r in rows] for name in table.column_names}
    pq.write_table(pa.table(cols).replace_schema_metadata({meta_key: json.dumps(header).encode()}), path)


def _one_line_error(done: subprocess.CompletedProcess[str], code: int, words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert words in lines[0], lines[0]


def test_tampered_or_foreign_files_are_refused_in_one_line(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, gpt2: Path
) -> None:
    import shutil

    from kgprobe.probing.probe_set import content_hash

    load(graph)
    pset = tmp_path / "set.parquet"
    assert _cli(["export", "-o", str(pset), *SAMPLE], kgprobe_env).returncode == 0
    assert _score_offline(tmp_path, pset, gpt2, tmp_path / "out").returncode == 0
    scores = tmp_path / "out" / "scores.parquet"

    # one score changed after scoring: its rows no longer match the content hash
    bad = tmp_path / "tampered.parquet"
    shutil.copy(scores, bad)

    def bump(header: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        row = next(r for r in rows if r["score"] is not None)
        row["score"] += 0.25
    _rewrite(bad, b"kgprobe.scores", bump)
    _one_line_error(_cli(["import-scores", str(bad)], kgprobe_env), 4, "content hash")

    # a probe set changed after export: refused before any model work
    bad_set = tmp_path / "tampered-set.parquet"
    shutil.copy(pset, bad_set)
    _rewrite(bad_set, b"kgprobe.probe_set", lambda h, rows: rows.pop())
    _one_line_error(_score_offline(tmp_path, bad_set, gpt2, tmp_path / "o2"), 4, "content hash")

    # what to sample comes from the set: a sampling option beside --set is refused
    _one_line_error(_score_offline(tmp_path, pset, gpt2, tmp_path / "o4", "--relation", "P36"), 2,
                    "drop --relation")

    # a set exported for other scoring code (a measure's version): refused, even with a valid hash
    old = tmp_path / "old-set.parquet"
    shutil.copy(pset, old)

    def older(header: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        header["scoring"]["measures"]["kmin"] = -1
        header["content_hash"] = content_hash(header, rows)
    _rewrite(old, b"kgprobe.probe_set", older)
    _one_line_error(_score_offline(tmp_path, old, gpt2, tmp_path / "o3"), 2, "export the set again")

    # a graph that changed since the export: the scores file is refused, nothing written
    from kgprobe.graph.ingest import ingest
    from kgprobe.records import EntityRecord

    ingest(graph, [EntityRecord("Q999999", "Somewhere else")])
    _one_line_error(_cli(["import-scores", str(scores)], kgprobe_env), 2, "another graph")
    assert pr.list_runs(graph) == []
    assert score_props(graph) == {}
    # and a file that is not Parquet at all
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    _one_line_error(_cli(["import-scores", str(junk)], kgprobe_env), 4, "not a Parquet file")


def test_without_pyarrow_a_probe_set_is_one_line(tmp_path: Path) -> None:
    """pyarrow is in the dev extra: where it is missing, the feature says so in one line."""
    code = ("import sys; sys.modules['pyarrow'] = None; sys.modules['pyarrow.parquet'] = None\n"
            "from kgprobe.cli import main; sys.argv = ['kgprobe', *sys.argv[1:]]; main()")
    pset = tmp_path / "set.parquet"
    pset.write_bytes(b"PAR1")
    done = subprocess.run([sys.executable, "-c", code, "probe", "--set", str(pset), "--model", "gpt2",
                           "--output-path", str(tmp_path / "out")],
                          capture_output=True, text=True, env=_offline_env(tmp_path), timeout=120)
    _one_line_error(done, 2, "need pyarrow")


def test_python_api_scores_a_set_with_a_model_object(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, gpt2: Path
) -> None:
    """kgprobe.export_set / probe_set / import_scores, the model a transformers object in
    memory: the same scores as the CLI's scoring of the same set."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import kgprobe

    load(graph)
    pset = tmp_path / "set.parquet"
    header = kgprobe.export_set(pset, sample=None, n=2, strategy="random", at=REF, progress=False)
    assert header["facts"] > 0
    assert _score_offline(tmp_path, pset, gpt2, tmp_path / "cli").returncode == 0
    lm = AutoModelForCausalLM.from_pretrained(gpt2)
    summary = kgprobe.probe_set(pset, lm, tmp_path / "api", tokenizer=AutoTokenizer.from_pretrained(gpt2),
                                model_name="gpt2", cache=False, progress=False).summary
    assert summary.status == "finished" and summary.scored > 0
    cli, api = _rows(tmp_path / "cli" / "scores.parquet"), _rows(tmp_path / "api" / "scores.parquet")
    assert set(cli) == set(api)
    for k, v in cli.items():  # engines of other batch sizes: float32 sums in another order
        assert (v is None) == (api[k] is None) and (v is None or abs(v - api[k]) <= 1e-5), k
    done = kgprobe.import_scores(tmp_path / "api" / "scores.parquet")
    assert [d["status"] for d in done] == ["imported"]
    assert len(score_props(graph)) == summary.scored + summary.unscorable


def _results(out: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    doc = json.loads((out / "results.json").read_text())
    samples = {r["key"]: r for r in map(json.loads, (out / "samples.jsonl").read_text().splitlines())}
    return doc, samples


def _close(a: Any, b: Any, where: str) -> None:
    """Equal, numbers within 1e-6 (floats summed in another order), recursively."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), where
        for k in a:
            _close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None and abs(float(a) - float(b)) <= 1e-6, (where, a, b)
    else:
        assert a == b, (where, a, b)


#: what results.json says of the figures: per relation, overall, popularity, chance
_FIGURES = ("results", "overall")


def test_set_output_path_writes_the_direct_probes_report_files(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, gpt2: Path
) -> None:
    """``probe --set ... --output-path DIR`` writes scores.parquet beside the usual report
    files, whose figures and per-fact records are those of a direct ``probe --output-path`` of
    the same facts and model (the direct one built from the graph)."""
    load(graph)
    direct = _cli(["probe", "--model", str(gpt2), *SAMPLE, *MODEL_OPTS, "--json",
                   "--output-path", str(tmp_path / "direct")], kgprobe_env)
    assert direct.returncode == 0, direct.stderr
    graph.write("MATCH (n) DETACH DELETE n")
    load(graph)
    pset = tmp_path / "set.parquet"
    assert _cli(["export", "-o", str(pset), *SAMPLE], kgprobe_env).returncode == 0
    done = _score_offline(tmp_path, pset, gpt2, tmp_path / "set")
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)["output_files"]
    for name in ("scores", "results", "harness", "samples", "html", "json", "csv"):
        assert Path(files[name]).is_file(), name
    assert Path(files["scores"]).name == "scores.parquet"

    want, want_samples = _results(tmp_path / "direct")
    got, got_samples = _results(tmp_path / "set")
    wm, gm = want["models"][0], got["models"][0]
    assert wm["overall"]["n"] >= 5
    for part in _FIGURES:
        _close(gm[part], wm[part], part)
    for part in ("popularity", "chance", "report_settings", "probe_settings"):
        _close(got[part], want[part], part)
    assert (gm["model_key"], gm["measure_key"], gm["threshold"]) == (wm["model_key"], wm["measure_key"], wm["threshold"])
    assert got["scope"]["facts"] == "run" and len(got["scope"]["runs"]) == 1
    set_hash = json.loads(pq.read_schema(pset).metadata[b"kgprobe.probe_set"])["content_hash"]
    assert gm["runs"][0]["probe_set"] == set_hash
    assert wm["runs"][0]["probe_set"] is None
    assert set(got_samples) == set(want_samples)
    for key, w in want_samples.items():
        g = got_samples[key]
        for name in ("relation", "relation_label", "subject", "subject_label", "object", "object_label",
                     "subject_popularity", "known", "template_ids", "templates", "clozes"):
            assert g[name] == w[name], (key, name)
        _close(g["score"], w["score"], key)
        _close(g["stale"], w["stale"], key)
        _close(g["distractors"], w["distractors"], key)
    rep_w = json.loads((tmp_path / "direct" / "report.json").read_text())
    rep_g = json.loads((tmp_path / "set" / "report.json").read_text())
    _close(rep_g["measures"], rep_w["measures"], "measures")


def test_probe_with_a_set_returns_the_scores_as_data(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, gpt2: Path
) -> None:
    """``kgprobe.probe(model, tokenizer=..., set=...)`` with a model object in memory: per-fact
    and per-relation DataFrames and the report's figures, equal to what a direct probe's
    results files say; nothing is written."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import kgprobe

    load(graph)
    assert _cli(["probe", "--model", str(gpt2), *SAMPLE, *MODEL_OPTS, "--output-path",
                 str(tmp_path / "direct")], kgprobe_env).returncode == 0
    want = kgprobe.load_results(tmp_path / "direct")
    graph.write("MATCH (n) DETACH DELETE n")
    load(graph)
    pset = tmp_path / "set.parquet"
    assert _cli(["export", "-o", str(pset), *SAMPLE], kgprobe_env).returncode == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    got = kgprobe.probe(AutoModelForCausalLM.from_pretrained(gpt2), tokenizer=AutoTokenizer.from_pretrained(gpt2),
                        model_name=str(gpt2), set=pset, cache=False, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == before and got.output_files == {}

    rel_w = want.relations.set_index("relation")
    rel_g = got.relations.set_index("relation")
    assert set(rel_g.index) == set(rel_w.index) and "all" in rel_g.index
    for pid in rel_w.index:
        for col in ("n", "known", "history_n"):
            assert rel_g.loc[pid, col] == rel_w.loc[pid, col], (pid, col)
        for col in ("mean", "known_share", "staleness"):
            w, g = rel_w.loc[pid, col], rel_g.loc[pid, col]
            assert (w != w and g != g) or abs(float(w) - float(g)) <= 1e-6, (pid, col, w, g)
    facts_w = want.samples.set_index("key")
    facts_g = got.facts.set_index("key")
    assert set(facts_g.index) == set(facts_w.index)
    for key in facts_w.index:
        assert abs(facts_g.loc[key, "score"] - facts_w.loc[key, "score"]) <= 1e-6, key
        assert facts_g.loc[key, "subject_label"] == facts_w.loc[key, "subject_label"]
    figures = got.figures()
    assert set(figures) == set(rel_w.index)
    for pid, fig in figures.items():
        assert abs(fig["mean"] - float(rel_w.loc[pid, "mean"])) <= 1e-6, pid
    assert got.summary.status == "finished" and got.summary.scored == len(facts_w)
