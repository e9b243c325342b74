"""Issue 40 items 3 and 5, through the CLI on a real graph with a tiny real model: the read
commands keep one default measure (kmin, what a plain probe scores) whatever was probed last,
and name the measure and threshold they used; and stdout holds only results — every command
run with ``-q`` and stdout on a pipe writes no progress, no carriage return, no escape code."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from cli_support import kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

torch.set_num_threads(1)
FIXTURES = Path(__file__).parents[1] / "fixtures"
COMMON = ["--strategy", "random", "-n", "2", "--at", REF, "--sample", "0", "--no-cache"]


def _ok(args: list[str], env: dict[str, str]) -> Any:
    r = kgprobe(*args, env=env, timeout=600)
    assert r.returncode == 0, (args, r.stderr)
    return r


def test_unknown_and_evaluate_keep_the_default_measure(graph: Any, kgprobe_env: dict[str, str],
                                                      tmp_path: Path, tiny_model: TinyModel) -> None:
    load(graph)
    env = kgprobe_env
    gpt2 = str(tiny_model("gpt2"))
    _ok(["probe", "--model", gpt2, "-r", "P35", "-r", "P36", *COMMON, "--json"], env)
    # a later BELIEF probe of the same model: its run is now the latest
    _ok(["probe", "--model", gpt2, "-r", "P36", *COMMON, "--measure", "belief", "--json"], env)

    facts = json.loads(_ok(["unknown", "--model", "gpt2", "--threshold", "2", "--json"], env).stdout)
    assert len(facts) == 4  # the kmin facts of both relations, not BELIEF's three
    assert {(f["measure"], f["threshold"]) for f in facts} == {("kmin_random_n2", 2.0)}
    table = _ok(["unknown", "--model", "gpt2", "--threshold", "2"], env).stdout
    assert "4 facts gpt2 does not know (kmin_random_n2, known >= 2)" in " ".join(table.split())
    asked = json.loads(_ok(["unknown", "--model", "gpt2", "--measure", "belief", "--threshold", "2",
                            "--json"], env).stdout)
    assert {f["measure"] for f in asked} == {"belief_random_n2"} and len(asked) == 3

    rob = json.loads(_ok(["evaluate", "-m", "gpt2", "--vs-model", "gpt2", "--vs-measure",
                          "belief_random_n2", "--json"], env).stdout)["robustness"]
    assert rob["a"] == "gpt2/kmin_random_n2" and rob["b"] == "gpt2/belief_random_n2"

    # a model with no kmin scores: one line naming the default and the measures it has
    llama = str(tiny_model("llama"))
    _ok(["probe", "--model", llama, "-r", "P36", *COMMON, "--measure", "belief", "--json"], env)
    for args in (["unknown", "--model", "llama"], ["evaluate", "-m", "llama", "--vs-model", "gpt2"]):
        r = kgprobe(*args, env=env)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "default measure 'kmin'" in r.stderr and "belief_random_n2" in r.stderr

    cmp = json.loads(_ok(["compare", "gpt2", "llama", "--json"], env).stdout)
    assert cmp["measure"] == "belief_random_n2" and cmp["threshold"] == 0.5
    text = " ".join(_ok(["compare", "gpt2", "llama"], env).stdout.split())
    assert "(belief_random_n2, known >= 0.5)" in text


#: what progress looks like on any path: Rich's bar (``━━━━ 100% 0:00:01``; a table's heavy
#: rule is never followed by a space), kgprobe's plain lines (``scoring 64/80 requests, 0:00:01``)
PROGRESS = re.compile(r"━ |ETA|\d+/\d+ (facts|requests|records|items)|\b\d:\d\d:\d\d\b")


def test_stdout_holds_only_results(graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel) -> None:
    load(graph)
    env = kgprobe_env
    gpt2 = str(tiny_model("gpt2"))
    # FACTOR rows short enough for a 64-position model, and enough of them (4 requests each)
    # that the engine scores more than one chunk of 64 requests: where a bar used to appear
    rows = "".join(f"{i},Item {i} is,{i},the capital.,a river.,a song.,a planet.,x,Item {i} is\n"
                   for i in range(20))
    short = tmp_path / "factor.csv"
    short.write_text(",full_prefix,doc_id,completion,contradiction_0,contradiction_1,contradiction_2,"
                     "longest_completions,turncated_prefixes\n" + rows)
    human = tmp_path / "human.csv"
    commands = [
        ["probe", "--model", gpt2, "-r", "P35", "-r", "P36", *COMMON],
        ["probe", "--model", gpt2, "-r", "P36", "--strategy", "random", "-n", "3", "--at", REF,
         "--sample", "0"],
        ["stats"], ["templates", "list", "-r", "P36"], ["measures"],
        ["unknown", "--model", "gpt2", "--threshold", "2"],
        ["compare", "gpt2", "gpt2"],
        ["report", "--model", "gpt2", "--out", str(tmp_path / "rep")],
        ["distractors", "Q30", "P35", "-s", "random", "-n", "2", "--at", REF],
        ["score", "--model", gpt2, "The capital of France is", " Paris", " Rome"],
        ["factor", str(short), "--model", gpt2],
        ["factor", "--from-graph", "-r", "P36", "-m", gpt2, "-n", "2", "--prefix-facts", "0",
         "--sample", "0"],
        ["evaluate", "-m", "gpt2", "--human", str(human)],
        ["db", "status"],
        ["ingest", str(FIXTURES / "wikidata" / "entity-json" / "Q182397.json")],
    ]
    for args in commands:
        if args[0] == "evaluate":  # human scores keyed by the stored facts
            facts = json.loads(_ok(["unknown", "--model", "gpt2", "--threshold", "2", "--json"], env).stdout)
            human.write_text("statement,score\n" + "".join(f"{f['key']},{i}\n" for i, f in enumerate(facts)))
        out = _ok(["-q", *args], env).stdout
        assert out.strip(), args  # results are there
        assert "\r" not in out and "\x1b" not in out, (args, out[:400])
        assert not PROGRESS.search(out), (args, PROGRESS.search(out), out[:400])
