"""Issue 22, second round: inputs and arguments. Every test runs the real `kgprobe` command (or
the real library) against the real test server and tiny real models; each fails on the code
before the change (docs/guarantees.md, "Inputs and arguments (second round)")."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_support import clean_env, fresh_home_env, kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

torch.set_num_threads(1)

#: The documented limits (docs/templates.md, docs/loaders.md), written out, not imported.
TEMPLATE_LIMIT = 1000
JSON_LIMIT_MB = 32


def one_line_error(r: Any, code: int, *texts: str) -> None:
    """Exit ``code``, exactly one line on stderr that contains every text, no traceback."""
    assert r.returncode == code, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    for text in texts:
        assert text in lines[0], (text, lines[0])


def facts_scores(graph: Any, prop: str) -> list[float]:
    rows = graph.read(f"MATCH ()-[f:FACT]->() WHERE f.`{prop}` IS NOT NULL RETURN f.`{prop}` AS s")
    return [float(r["s"]) for r in rows]


@pytest.fixture()
def gpt2(tmp_path: Path, tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2")


# --- 1. thresholds and other numbers ---------------------------------------------------------
def test_nan_and_out_of_range_thresholds_are_refused(graph: Any, kgprobe_env: dict[str, str],
                                                     gpt2: Path) -> None:
    load(graph)
    env = kgprobe_env
    probe = kgprobe("probe", "--model", str(gpt2), "-r", "P35", "-r", "P36", "-s", "random", "-n", "2",
                    "--at", REF, "--sample", "0", "--no-cache", "--json", env=env, timeout=600)
    assert probe.returncode == 0, probe.stderr
    prop = json.loads(probe.stdout)["score_properties"][0]
    scores = facts_scores(graph, prop)
    assert len(scores) == 4  # USA -> Biden and three capitals
    below_default = sum(s < 0.5 for s in scores)  # the documented default threshold, 0.5

    listed = kgprobe("unknown", "--model", "gpt2", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == below_default

    for args in (["unknown", "--model", "gpt2", "--threshold", "nan"],
                 ["unknown", "--model", "gpt2", "--threshold", "inf"],
                 ["unknown", "--model", "gpt2", "--threshold", "-1"],
                 ["unknown", "--model", "gpt2", "--below", "nan"],
                 ["compare", "gpt2", "gpt2", "--threshold", "nan"]):
        one_line_error(kgprobe(*args, env=env), 2, f"{args[-2]} must be")  # names the option

    runs_before = graph.read("MATCH (r:ProbeRun) RETURN count(r) AS n")[0]["n"]
    r = kgprobe("probe", "--model", str(gpt2), "-r", "P36", "-s", "random", "-n", "2", "--at", REF,
                "--threshold", "nan", "--no-cache", "--json", "--force", env=env, timeout=600)
    one_line_error(r, 2, "--threshold", "finite")
    assert graph.read("MATCH (r:ProbeRun) RETURN count(r) AS n")[0]["n"] == runs_before


@pytest.mark.parametrize(("args", "text"), [
    (["unknown", "--model", "m", "--threshold", "nan"], "--threshold must be a finite number"),
    (["probe", "--threshold", "nan"], "--threshold must be a finite number"),
    (["probe", "--threshold", "-1"], "--threshold must be at least 0"),
    (["compare", "a", "b", "--threshold", "inf"], "--threshold must be a finite number"),
    (["ladder", "-m", "a", "-m", "b", "-m", "c", "--threshold", "-0.5"], "--threshold must be at least 0, got -0.5"),
    (["probe", "-r", "P0"], "'P0' is not a Wikidata property id"),
    (["probe", "--at", "2024-13-45"], "--at '2024-13-45' is not a date"),
    (["probe", "--at", "2023-02-30"], "--at '2023-02-30' is not a date"),
    (["probe", "--threads", "0"], "--threads must be at least 1"),
    (["probe", "-n", "0"], "-n must be at least 1"),
    (["probe", "--seed", "-1"], "--seed must be at least 0"),
    (["probe", "--sample", "-5"], "--sample must be at least 0"),
    (["probe", "--batch-tokens", "0"], "--batch-tokens must be at least 1"),
    (["probe", "--batch-facts", "0"], "--batch-facts must be at least 1"),
    (["probe", "--write-batch", "0"], "--write-batch must be at least 1"),
    (["probe", "--max-labels", "0"], "--max-labels must be at least 1"),
    (["unknown", "--model", "m", "-r", "P0"], "'P0' is not a Wikidata property id"),
    (["templates", "list", "-r", "Q5"], "'Q5' is not a Wikidata property id"),
    (["distractors", "Q30", "P35", "--at", "yesterday"], "--at 'yesterday' is not a date"),
    (["distractors", "Q30", "P35", "-n", "0"], "-n must be at least 1"),
    (["distractors", "Q30", "P35", "--seed", str(2**32)], "--seed must be at most"),
    (["factor", "--from-graph", "-r", "P0"], "'P0' is not a Wikidata property id"),
    (["factor", "--from-graph", "--threads", "0"], "--threads must be at least 1"),
    (["evaluate", "--model", "m", "--vs-model", "n", "--folds", "1"], "--folds must be at least 2"),
    (["report", "--model", "m", "--seed", "-3"], "--seed must be at least 0"),
    (["ingest", "--sparql", "http://127.0.0.1:9/sparql", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["ingest", "--sparql", "http://127.0.0.1:9/sparql", "-r", "P0"], "'P0' is not a Wikidata property id"),
])
def test_arguments_are_checked_before_the_graph_is_contacted(args: list[str], text: str,
                                                             tmp_path: Path) -> None:
    env = fresh_home_env(tmp_path)  # a stopped home: any graph access would start a server
    r = kgprobe(*args, env=env)
    try:
        one_line_error(r, 2, text)
        assert not (tmp_path / "home" / "server.json").exists()
        assert not (tmp_path / "home" / "arcadedb").exists()
    finally:
        if (tmp_path / "home" / "server.json").exists():  # the old code started one: stop it
            kgprobe("db", "stop", env=env)


@pytest.mark.parametrize(("value", "line"), [(float("nan"), "--threshold must be a finite number, got nan"),
                                             (-1.0, "--threshold must be at least 0, got -1")])
def test_a_bad_threshold_reads_the_same_in_every_layer(value: float, line: str) -> None:
    """One threshold check (issue 39, kgprobe/checks.py): a probe's configuration, the reader of
    stored scores and the API refuse a bad value with the CLI's line (the probing layer once said
    "the threshold must be a finite number >= 0, not nan"); all before a graph is touched."""
    from kgprobe import api
    from kgprobe.errors import ConfigError
    from kgprobe.probing.config import ProbeConfig
    from kgprobe.probing.scores import resolve_scores

    calls = [lambda: ProbeConfig(threshold=value).validate(),
             lambda: resolve_scores(None, "m", threshold=value),  # type: ignore[arg-type]
             lambda: api.ladder(["a", "b", "c"], threshold=value),
             lambda: api.report("m", threshold=value)]
    for call in calls:
        with pytest.raises(ConfigError) as caught:
            call()
        assert str(caught.value) == line


# --- 2. templates and contexts ---------------------------------------------------------------
def test_a_template_over_the_limit_is_refused_at_import(graph: Any, kgprobe_env: dict[str, str],
                                                        tmp_path: Path) -> None:
    def template(chars: int) -> str:
        text = "[X] is " + "a" * (chars - len("[X] is ") - len(" [Y] .")) + " [Y] ."
        assert len(text) == chars
        return text

    at_limit, over = template(TEMPLATE_LIMIT), template(TEMPLATE_LIMIT + 1)
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps({"relation": "P36", "template": at_limit}) + "\n")
    r = kgprobe("templates", "import", str(ok), "-f", "lama", "--json", env=kgprobe_env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"imported": 1}

    graph.write("MATCH (n) DETACH DELETE n")
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"relation": "P36", "template": over}) + "\n"
                   + json.dumps({"relation": "P36", "template": "[X] " + "x" * 2_000_000 + " [Y]"}) + "\n")
    r = kgprobe("templates", "import", str(big), "-f", "lama", env=kgprobe_env)
    one_line_error(r, 4, f"{TEMPLATE_LIMIT + 1:,} characters", f"limit of {TEMPLATE_LIMIT:,}")
    assert len(r.stderr) < 500  # the text is not echoed whole
    assert graph.read("MATCH (t:Template) RETURN count(t) AS n")[0]["n"] == 0


def test_a_too_long_template_in_the_graph_is_refused_by_probe(graph: Any, kgprobe_env: dict[str, str],
                                                              gpt2: Path) -> None:
    load(graph)
    from kgprobe.graph.templates import _MERGE_EDGES, _MERGE_RELATIONS, _MERGE_TEMPLATES
    from kgprobe.records import TemplateRecord, derive_style

    text = "In a long story, " + "and then more " * 110 + "the capital of [X] is [Y]."
    assert len(text) > TEMPLATE_LIMIT
    rec = TemplateRecord("P36", text, derive_style(text), "older-kgprobe")
    row = {"pid": rec.pid, "text": rec.text, "style": rec.style, "source": rec.source,
           "language": rec.language, "id": rec.id}
    for query in (_MERGE_RELATIONS, _MERGE_TEMPLATES, _MERGE_EDGES):  # as an older kgprobe wrote it
        graph.write(query, rows=[row])
    r = kgprobe("probe", "--model", str(gpt2), "-r", "P36", "-s", "random", "-n", "2", "--at", REF,
                "--no-cache", "--json", env=kgprobe_env, timeout=600)
    one_line_error(r, 4, f"template {rec.id} of P36 in the graph", f"limit of {TEMPLATE_LIMIT:,}")


def test_a_context_longer_than_the_model_is_an_error_never_a_silent_cut(kgprobe_env: dict[str, str],
                                                                        gpt2: Path) -> None:
    context = "The capital of France, a city that is old and large, is " * 10  # > 64 positions
    r = kgprobe("score", "--model", str(gpt2), context, " Paris", "--no-cache", "--json", env=kgprobe_env)
    one_line_error(r, 2, "context length 64", "never cuts a context silently")
    short = kgprobe("score", "--model", str(gpt2), "The capital of France is", " Paris", "--no-cache",
                    "--json", env=kgprobe_env)
    assert short.returncode == 0, short.stderr


# --- 3. one JSON document has a size cap; JSON lines stream ----------------------------------
def _entity(qid: str, pad: int = 0) -> dict[str, Any]:
    ent: dict[str, Any] = {"type": "item", "id": qid, "labels": {"en": {"language": "en", "value": qid}},
                           "claims": {}}
    if pad:
        ent["descriptions"] = {"de": {"language": "de", "value": "x" * pad}}
    return ent


def test_a_single_json_document_over_the_cap_is_refused(graph: Any, kgprobe_env: dict[str, str],
                                                        tmp_path: Path) -> None:
    over = JSON_LIMIT_MB * 2**20 + 1024
    doc = tmp_path / "one-line.json"  # a valid entity document, one line, over the cap
    doc.write_text(json.dumps({"entities": {"Q1": _entity("Q1", pad=over)}}))
    r = kgprobe("ingest", str(doc), "--json", env=kgprobe_env)
    one_line_error(r, 4, str(doc), f"larger than {JSON_LIMIT_MB} MiB", "KGPROBE_MAX_JSON_MB")
    pretty = tmp_path / "pretty.json"  # the same over several lines: still one document
    pretty.write_text(json.dumps({"entities": {"Q1": _entity("Q1", pad=over)}}, indent=1))
    one_line_error(kgprobe("ingest", str(pretty), env=kgprobe_env), 4, f"larger than {JSON_LIMIT_MB} MiB")
    bear = tmp_path / "metadata_relations.json"
    bear.write_text(json.dumps({"P36": {"templates": ["[X] " + "y" * over + " [Y]."]}}))
    one_line_error(kgprobe("templates", "import", str(bear), "-f", "bear", env=kgprobe_env), 4,
                   f"larger than {JSON_LIMIT_MB} MiB")
    # JSON lines of the same total size stream entity by entity
    lines = tmp_path / "entities.jsonl"
    n = JSON_LIMIT_MB + 2
    with lines.open("w") as fh:
        for i in range(1, n + 1):
            fh.write(json.dumps(_entity(f"Q{i}", pad=2**20)) + "\n")
    assert lines.stat().st_size > JSON_LIMIT_MB * 2**20
    ok = kgprobe("ingest", str(lines), "--json", env=kgprobe_env, timeout=600)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert json.loads(ok.stdout)["entities"] == n


# --- 4. the score cache never stops a run ------------------------------------------------------
def test_an_unusable_score_cache_is_one_warning_and_the_run_goes_on(kgprobe_env: dict[str, str],
                                                                    gpt2: Path, tmp_path: Path) -> None:
    def args(*candidates: str) -> list[str]:
        return ["score", "--model", str(gpt2), "The capital of France is", *candidates, "--json"]

    def run_with(cache: Path, *candidates: str) -> Any:
        expected = kgprobe(*args(*candidates), "--no-cache", env=kgprobe_env)
        assert expected.returncode == 0, expected.stderr
        r = kgprobe(*args(*candidates), env={**kgprobe_env, "KGPROBE_SCORE_CACHE": str(cache)})
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout) == json.loads(expected.stdout)  # the same scores, cache or not
        return r

    not_db = tmp_path / "not-a-db.sqlite"
    not_db.write_text("these are not the scores you are looking for\n" * 100)
    one_line_warning(run_with(not_db, " Paris", " Rome"), str(not_db), "--no-cache", "KGPROBE_SCORE_CACHE")

    good = tmp_path / "good.sqlite"
    first = run_with(good, " Paris", " Rome")
    assert first.stderr.strip() == ""  # a usable cache: no warning
    data = good.read_bytes()
    assert len(data) >= 8192  # at least two pages: the schema and the table
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(data[: len(data) // 2])
    one_line_warning(run_with(truncated, " Paris", " Rome"), str(truncated))

    locker = sqlite3.connect(str(good), timeout=0)  # another process's write in flight
    try:
        locker.execute("BEGIN EXCLUSIVE")
        one_line_warning(run_with(good, " Lyon"), str(good), "locked")  # a new score must be written
    finally:
        locker.rollback()
        locker.close()


def one_line_warning(r: Any, *texts: str) -> None:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning: score cache"), r.stderr[-2000:]
    for text in texts:
        assert text in lines[0], (text, lines[0])


# --- 5. text encodings of CSV inputs -----------------------------------------------------------
FACTOR_CSV = (",full_prefix,doc_id,completion,contradiction_0,contradiction_1,contradiction_2,"
              "longest_completions,turncated_prefixes\n"
              "0,Paris is,1,the capital of France.,a city in Spain.,a river.,a song.,x,Paris is\n"
              "1,Caf\u00e9s are,2,places to drink.,a planet.,solid iron.,a song.,x,Caf\u00e9s are\n")


@pytest.mark.parametrize("kind", ["latin-1", "binary", "utf-16"])
def test_factor_csv_encodings(kind: str, kgprobe_env: dict[str, str], gpt2: Path, tmp_path: Path) -> None:
    path = tmp_path / f"factor-{kind}.csv"
    if kind == "latin-1":
        data = FACTOR_CSV.encode("latin-1")
        bad = data.index(b"\xe9")  # the first byte that is not UTF-8, counted by hand
    elif kind == "binary":
        data = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
        bad = 0
    else:
        data = FACTOR_CSV.encode("utf-16")  # with its byte-order mark
    path.write_bytes(data)
    r = kgprobe("factor", str(path), "--model", str(gpt2), "--json", env=kgprobe_env)
    if kind == "utf-16":
        utf8 = tmp_path / "factor-utf8.csv"
        utf8.write_text(FACTOR_CSV, encoding="utf-8")
        same = kgprobe("factor", str(utf8), "--model", str(gpt2), "--json", env=kgprobe_env)
        assert r.returncode == 0 and same.returncode == 0, r.stderr + same.stderr
        a, b = json.loads(r.stdout), json.loads(same.stdout)
        assert a["items"] == b["items"] == 2 and a["per_item"] == b["per_item"]
        return
    one_line_error(r, 4, str(path), f"offset {bad}", "UTF-8")


@pytest.mark.parametrize("kind", ["latin-1", "binary", "utf-16"])
def test_human_scores_encodings(kind: str, tmp_path: Path) -> None:
    text = "subject,relation,object,score\nQ142,P36,Q90,0.9\nQ183,P36,Q64,0.2\n# Z\u00fcrich,,,\n"
    rows = text.splitlines()[:3]
    path = tmp_path / f"human-{kind}.csv"
    env = fresh_home_env(tmp_path)
    if kind == "utf-16":
        from kgprobe.probing.measures.evaluation import read_human_scores

        path.write_bytes(("\n".join(rows) + "\n").encode("utf-16"))
        bom8 = tmp_path / "human-bom.csv"
        bom8.write_bytes(("\n".join(rows) + "\n").encode("utf-8-sig"))
        expected = {"Q142|P36|Q90": 0.9, "Q183|P36|Q64": 0.2}
        assert read_human_scores(path) == expected and read_human_scores(bom8) == expected
        return
    if kind == "latin-1":
        data = text.encode("latin-1")
        bad = data.index(b"\xfc")
    else:
        data = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
        bad = 0
    path.write_bytes(data)
    r = kgprobe("evaluate", "--model", "m", "--human", str(path), env=env)
    one_line_error(r, 4, str(path), f"offset {bad}")
    assert not (tmp_path / "home" / "server.json").exists()  # refused before the graph


# --- 6. smaller defects --------------------------------------------------------------------------
def test_kmin_n_in_the_measure_spec_sets_the_runs_n(graph: Any, kgprobe_env: dict[str, str],
                                                    gpt2: Path) -> None:
    load(graph)
    env = kgprobe_env
    measures = json.loads(kgprobe("measures", "--json", env=env).stdout)["measures"]
    kmin = next(m for m in measures if m["name"] == "kmin")
    assert "n" in [p["name"] for p in kmin["parameters"]]  # what `kgprobe measures` promises

    base = ["probe", "--model", str(gpt2), "-r", "P36", "-s", "random", "--at", REF, "--no-cache", "--json"]
    r = kgprobe(*base, "--measure", "kmin:n=2", env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    props = json.loads(r.stdout)["score_properties"]
    assert props == ["score__gpt2__kmin_random_n2"]  # n=2, not the default 5
    assert len(facts_scores(graph, props[0])) == 3  # three capitals

    one_line_error(kgprobe(*base, "--measure", "kmin:n=3", "-n", "4", env=env), 2, "n=3 contradicts -n 4")
    one_line_error(kgprobe(*base, "--measure", "probability:n=3", env=env), 2, "unknown parameter n")
    one_line_error(kgprobe(*base, "--measure", "kmin:n=3", "--measure", "kavg:n=2", env=env), 2, "contradicts")
    one_line_error(kgprobe(*base, "--measure", "kmin:n=0", env=env), 2)
    one_line_error(kgprobe(*base, "--measure", "kmin:bogus=1", env=env), 2, "parameters: strategy, n")


def test_index_files_are_owner_only(graph: Any, kgprobe_env: dict[str, str], graph_settings: Any) -> None:
    if graph_settings.uri:
        pytest.skip("the index lives in the managed server's KGPROBE_HOME")
    load(graph)
    indexes = Path(graph_settings.home) / "indexes"
    old = indexes / "semantic"
    old.mkdir(parents=True, exist_ok=True)
    (old / "stale.txt").write_text("left by an older kgprobe")
    os.chmod(indexes, 0o755)
    os.chmod(old, 0o755)
    os.chmod(old / "stale.txt", 0o644)
    r = kgprobe("distractors", "Q30", "P35", "-s", "sem", "-n", "2", "--at", REF, "--json",
                env=kgprobe_env, timeout=600)
    assert r.returncode == 0, r.stderr
    tree = [indexes, *indexes.rglob("*")]
    assert {p.name for p in tree} >= {"indexes", "semantic", "stale.txt"} and len(tree) > 3
    for p in tree:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))


def test_db_stop_works_with_a_readable_config_file(tmp_path: Path) -> None:
    from kgprobe.graph.server import free_port

    home = tmp_path / "home"
    home.mkdir()
    cfg = tmp_path / "config.json"
    secret = "pw-in-a-0644-config"
    cfg.write_text(json.dumps({"home": str(home), "bolt_port": free_port(), "http_port": free_port(),
                               "password": secret}))
    cfg.chmod(0o644)
    env = clean_env(KGPROBE_CONFIG=str(cfg))
    stopped = kgprobe("db", "stop", "--json", env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"stopped": False}
    assert secret not in stopped.stdout + stopped.stderr
    one_line_error(kgprobe("stats", env=env), 2, "chmod 600")  # other commands still refuse it
    one_line_error(kgprobe("db", "start", env=env), 2, "chmod 600")
