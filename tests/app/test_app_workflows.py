"""Issue 39 #3, one floor for workflows: each workflow the CLI runs against the graph is one
function of ``kgprobe.app``, reached from Python through ``kgprobe.api`` under the command's
name with the CLI's option names; both refuse a bad value with the same one line and exit code
(the check lives in the app layer, not in the CLI), and both give the same result."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from cli_support import kgprobe
from probe_world import load

from kgprobe import api
from kgprobe.errors import KgprobeError

NAN = float("nan")

#: (the command line, the same call through the API): each with one bad value
BAD: list[tuple[list[str], Callable[[Path], Any]]] = [
    (["unknown", "-m", "gpt2", "--threshold", "nan"], lambda _: api.unknown("gpt2", threshold=NAN)),
    (["unknown", "-m", "gpt2", "-r", "capital"], lambda _: api.unknown("gpt2", relation="capital")),
    (["templates", "list", "-r", "X36"], lambda _: api.templates_list(relation=["X36"])),
    (["templates", "import", "t.jsonl", "--format", "yaml"],
     lambda d: api.templates_import(d / "t.jsonl", format="yaml")),
    (["templates", "import", "missing.jsonl", "--format", "lama"],
     lambda d: api.templates_import(d / "missing.jsonl", format="lama")),
    (["evaluate", "-m", "gpt2"], lambda _: api.evaluate("gpt2")),
    (["evaluate", "-m", "gpt2", "--vs-model", "b", "--folds", "1"],
     lambda _: api.evaluate("gpt2", vs_model="b", folds=1)),
    (["export", "-o", "set.parquet", "--seed", "-1"], lambda d: api.export(d / "set.parquet", seed=-1)),
    (["export", "-o", "set.parquet", "--at", "2024-13-01"],
     lambda d: api.export(d / "set.parquet", at="2024-13-01")),
    (["cypher", "missing.cypher"], lambda d: api.cypher(str(d / "missing.cypher"))),
    (["cypher", "RETURN $x AS x", "-p", "1x=2"], lambda _: api.cypher("RETURN $x AS x", param=["1x=2"])),
    (["probe", "-m", "gpt2", "--shard", "3/2", "--dry-run"], lambda _: api.probe("gpt2", shard="3/2", dry_run=True)),
    (["index", "--sample", "0"], lambda _: api.index(sample=0)),
    (["index", "--workers", "0"], lambda _: api.index(workers=0)),
]


@pytest.mark.parametrize(("argv", "call"), BAD, ids=[" ".join(a[:3]) for a, _ in BAD])
def test_the_api_and_the_cli_refuse_a_bad_value_with_the_same_line(
        argv: list[str], call: Callable[[Path], Any], kgprobe_env: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths of the command line: the same files
    with pytest.raises(KgprobeError) as caught:
        call(tmp_path)
    r = kgprobe(*argv, env=kgprobe_env)
    message = str(caught.value).replace(str(tmp_path) + "/", "")
    assert (r.returncode, r.stderr.strip()) == (caught.value.exit_code, f"error: {message}")
    assert r.stdout == ""


def test_the_api_gives_what_the_cli_prints(graph: Any, kgprobe_env: dict[str, str]) -> None:
    """``stats``, ``templates list`` and ``db status`` under their command's names, with the
    command's ``--json`` as their result."""
    load(graph)

    def cli(*argv: str) -> Any:
        r = kgprobe(*argv, "--json", env=kgprobe_env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    stats = api.stats().to_dict()
    assert stats == cli("stats")
    assert stats["templates"] == 5 and {r["pid"] for r in stats["per_relation"]} >= {"P35", "P36"}
    listed = [asdict(t) for t in api.templates_list(relation="P35")]
    assert listed == cli("templates", "list", "-r", "P35")
    assert sorted(t["text"] for t in listed) == ["The head of state of [X] is [Y].",
                                                 "Who is the head of state of [X]?"]
    assert api.db_status().to_dict() == cli("db", "status")



def test_kgprobe_index_builds_with_chosen_settings_then_keeps_and_updates_them(
        graph: Any, kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    """``kgprobe index`` builds the semantic index with the settings given, finds it current the
    next time (nothing embedded, the same settings, though none were given), embeds only what
    an ingest changed, and is what a probe's ``ensure_index`` then keeps; ``api.index`` gives
    what the command prints."""
    from kgprobe.api import write_records
    from kgprobe.probing import semantic as sem
    from kgprobe.records import FactRecord

    load(graph)
    d = tmp_path / "idx"

    def cli(*argv: str) -> Any:
        r = kgprobe("index", "--index-dir", str(d), *argv, "--json", env=kgprobe_env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    first = cli("--dim", "6", "--sample", "10")
    assert (first["action"], first["settings"]["dim"], first["settings"]["sample"]) == ("built", 6, 10)
    assert first["entities_fitted"] == 10 < first["entities_in_graph"]  # a fixed sample of 10
    assert first["entities_embedded"] == first["entities_indexed"] > 2
    # an exact index (a few entities): no lists to visit, no recall measured
    assert (first["index_kind"], first["nprobe"], first["recall_at_10"]) == ("IndexFlatIP", 0, None)
    again = cli()
    shown = kgprobe("index", "--index-dir", str(d), env=kgprobe_env)
    assert shown.returncode == 0 and "nprobe" in shown.stdout
    assert "None" not in shown.stdout  # what was not measured is a dash
    assert (again["action"], again["entities_embedded"], again["settings"]) == ("current", 0, first["settings"])
    same = api.index(d, progress=False).to_dict()
    assert {k: v for k, v in same.items() if k != "seconds"} == {k: v for k, v in again.items() if k != "seconds"}
    a, b = sem.SemanticIndex.load(d).qids.tolist()[:2]
    write_records(graph, [FactRecord(a, "P9999", b, statement_id="index-cli-1")], quiet=True)
    upd = cli()
    assert upd["action"] == "updated" and 1 <= upd["entities_embedded"] < upd["entities_indexed"]
    assert sem.ensure_index(graph, d).settings == sem.IndexSettings(**first["settings"])
    assert cli("--rebuild")["action"] == "built"


def test_api_probe_has_a_real_signature() -> None:
    """``api.probe`` (issue 39 #3): a misspelled keyword is a TypeError naming it, before the
    model is opened (it went into ``**kwargs`` and a served model's server was contacted first:
    four connection attempts, then a ServerError that did not name the keyword); its overloads'
    keywords (``ProbeOptions``) are its parameters."""
    import inspect

    with pytest.raises(TypeError, match="'smaple'"):
        api.probe("http://127.0.0.1:9/v1", smaple=10, dry_run=True)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="'eos_'"):
        api.score("a", ["b"], model="http://127.0.0.1:9/v1", eos_=True)  # type: ignore[call-arg]
    own = set(inspect.signature(api.probe).parameters) - {"model", "set", "output_path", "overwrite"}
    assert set(api.ProbeOptions.__annotations__) == own


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for this file's mypy runs: kgprobe's modules are analysed once, not per
    test (each run's script is its own; mypy re-checks what changed)."""
    pytest.importorskip("mypy.api")
    return tmp_path_factory.mktemp("mypy-cache")


def mypy_of(source: str, folder: Path, cache: Path) -> tuple[str, list[str]]:
    """mypy's output on a script, and the types its ``reveal_type`` calls revealed. mypy runs
    in its own process: in this one it would leave the recursion limit at 2**14 (mypy.main), and
    a later test's 5,000-deep JSON would then decode (test_loader_fast_path failed so)."""
    script = folder / "script.py"
    script.write_text(source)
    out = subprocess.run([sys.executable, "-m", "mypy", str(script), "--no-error-summary",
                          "--cache-dir", str(cache)], capture_output=True, text=True, check=False).stdout
    return out, [line.split("Revealed type is ")[1] for line in out.splitlines() if "Revealed type" in line]


def test_mypy_sees_what_api_probe_returns(tmp_path: Path, mypy_cache: Path) -> None:
    """A script's ``api.probe(...)`` is a ProbeSummary, with ``set=`` a SetResults, and a
    misspelled keyword is a type error (it was ``**kwargs -> Any``: no error, no type)."""
    out, revealed = mypy_of("from kgprobe import api\n"
                            "reveal_type(api.probe('gpt2', dry_run=True))\n"
                            "reveal_type(api.probe('gpt2', set='demo'))\n"
                            "reveal_type(api.probe_set('demo', 'gpt2'))\n"
                            "reveal_type(api.score('a', ['b']))\n"
                            "api.probe('gpt2', smaple=3)\n", tmp_path, mypy_cache)
    assert revealed == ['"kgprobe.probing.config.ProbeSummary"', '"kgprobe.app.probe_sets.SetResults"',
                        '"kgprobe.app.probe_sets.SetResults"',
                        '"list[kgprobe.probing.score.CandidateScore]"']
    assert 'No overload variant of "probe" matches' in out


def test_mypy_sees_the_api_workflows_signatures(tmp_path: Path, mypy_cache: Path) -> None:
    """``export_set``, ``compare``, ``load_results``, ``report``, ``ladder``, ``unknown`` and
    ``cypher`` have real signatures and typed results: a script's results have their types, and
    a misspelled keyword is a type error (``export_set`` took ``**options: Any``, the others
    returned ``Any``)."""
    out, revealed = mypy_of("from kgprobe import api\n"
                            "reveal_type(api.export_set('s.parquet', relation='P36', sample=0))\n"
                            "reveal_type(api.compare('a', 'b'))\n"
                            "reveal_type(api.load_results('out'))\n"
                            "reveal_type(api.report('a')[0])\n"
                            "reveal_type(api.ladder(['a', 'b', 'c'])[0])\n"
                            "reveal_type(api.unknown('a'))\n"
                            "reveal_type(api.cypher('RETURN 1'))\n"
                            "api.export_set('s.parquet', smaple=3)\n"
                            "api.export_set('s.parquet', sample='all')\n", tmp_path, mypy_cache)
    assert len(revealed) == 7 and revealed[0] != '"Any"'  # the set's header: probing's record
    assert revealed[1:] == ['"kgprobe.probing.scores.Comparison"', '"kgprobe.reports.results.Results"',
                            '"kgprobe.reports.data.Report"', '"kgprobe.reports.ladder.Ladder"',
                            '"list[kgprobe.probing.scores.ScoredFact]"', '"list[dict[str, Any]]"']
    assert 'Unexpected keyword argument "smaple" for "export_set"' in out
    assert 'Argument "sample" to "export_set" has incompatible type "str"' in out


def test_mypy_sees_the_records_the_workflows_return(tmp_path: Path, mypy_cache: Path) -> None:
    """Issue 39 #4: what the workflows return is records with known keys, not ``dict[str, Any]``
    (where a misspelled key went unseen): a report's per-fact rows (``ReportFact``), the
    samples and results.json of a scored set (``SampleRecord``, ``ResultsDocument``), FACTOR's
    result (``FactorResult``), the grid search's rows (``GridRow``)."""
    out, _ = mypy_of("from kgprobe import api\n"
                     "rep, _ = api.report('a')\n"
                     "rep.primary.facts[0]['scroe']\n"
                     "res = api.probe_set('demo', 'gpt2')\n"
                     "res.records[0]['scroe']\n"
                     "res.document['shema']\n"
                     "api.factor('f.csv')['acuracy']\n"
                     "grid = api.evaluate('a', human='h.csv', grid=True).grid\n"
                     "assert grid is not None\n"
                     "grid[0]['tau']\n"
                     "reveal_type(rep.primary.facts[0]['score'])\n", tmp_path, mypy_cache)
    for record, key in (("ReportFact", "scroe"), ("SampleRecord", "scroe"), ("ResultsDocument", "shema"),
                        ("FactorResult", "acuracy"), ("GridRow", "tau")):
        assert f'TypedDict "{record}" has no key "{key}"' in out, (record, out)
    assert 'Revealed type is "builtins.float"' in out or 'Revealed type is "float"' in out


@pytest.mark.parametrize(("argv", "line"), [
    (["probe", "--set", "demo"], "error: --set needs --output-path DIR: its scores go to DIR/scores.parquet"),
    (["-q", "-v", "stats"], "error: --quiet and --verbose exclude each other"),
    (["report", "-m", "gpt2", "--format", "yaml"],
     "error: unknown --format 'yaml'; choose from: text, json, md, tex, harness"),
    (["cypher", "RETURN 1", "--format", "xml"], "error: unknown --format 'xml'; choose from: table, json, csv"),
])
def test_the_cli_only_rules_live_in_the_app_floor(argv: list[str], line: str, tmp_path: Path) -> None:
    """What only the command line refuses (kgprobe/app/options.py, not cli.py): one line, exit 2,
    before any graph or model is touched."""
    from cli_support import fresh_home_env

    env = fresh_home_env(tmp_path)  # a stopped home: any graph access would start a server
    r = kgprobe(*argv, env=env)
    assert (r.returncode, r.stderr.strip(), r.stdout) == (2, line, "")
    assert not (tmp_path / "home" / "server.json").exists()
