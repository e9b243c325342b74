"""``kgprobe probe --shard K/N``: N processes against one graph server cover one run.

Two real CLI processes probe the two shards of the same sample concurrently on the CPU (tiny
GPT-2, the managed test server); their union must equal one unsharded run: no fact lost, none
scored twice, no conflicting score, and both ProbeRuns recorded as finished.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from _kgprobe_process import start_kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import ProbeConfig, measure_key, model_key
from kgprobe.probing.run import run_probe

torch.set_num_threads(1)

#: a test-side read of which run wrote each fact (the property name is a parameter)
RUN_OF = "MATCH ()-[f:FACT]->() WHERE f[$run] IS NOT NULL RETURN f.key AS key, f[$run] AS run"


def test_shards_are_disjoint_and_cover_the_sample() -> None:
    keys = [f"Q{i}|P{i % 7}|Q{i * 3}" for i in range(500)]
    parts = [pr.shard_keys(keys, (k, 3)) for k in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(keys)
    assert all(len(p) > 100 for p in parts)  # a hash split, not everything in one shard
    # stable: independent of the order the keys come in
    assert pr.shard_keys(list(reversed(keys)), (2, 3)) == list(reversed(parts[1]))
    assert pr.parse_shard("2/3") == (2, 3)
    for bad in ("0/2", "3/2", "2", "a/b"):
        with pytest.raises(ConfigError):
            pr.parse_shard(bad)


def test_two_shard_processes_equal_one_unsharded_run(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel
) -> None:
    load(graph)
    model = tiny_model("gpt2")
    common = ["probe", "--model", str(model), "--sample", "0", "-n", "2", "--strategy", "random",
              "--at", REF, "--no-cache", "--device", "cpu", "--batch-tokens", "64", "--json"]
    procs = [start_kgprobe([*common, "--shard", f"{k}/2"], kgprobe_env) for k in (1, 2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        outs.append(json.loads(out))

    props = pr.ScoreProps(model_key(str(model), "float32"), measure_key("kmin", "random", 2))
    sharded = {r["key"]: r["score"] for r in pr.report_rows(graph, props)}
    writer = {r["key"]: r["run"] for r in graph.read(RUN_OF, run=props.run)}
    runs = {r["id"]: r for r in pr.list_runs(graph)}
    assert len(runs) == 2
    assert sorted(r["shard"] for r in runs.values()) == ["1/2", "2/2"]
    assert all(r["status"] == "finished" for r in runs.values())
    # every fact written by exactly one shard, and each run's counter counts its own facts
    assert set(writer) == set(sharded)
    for run_id, run in runs.items():
        mine = [k for k, w in writer.items() if w == run_id]
        assert run["facts_scored"] + run["facts_unscorable"] == len(
            pr.shard_keys(sorted(writer), tuple(int(x) for x in run["shard"].split("/"))))  # type: ignore[arg-type]
        assert run["facts_scored"] == len(mine) > 0
    assert sum(o["scored"] for o in outs) == len(sharded)

    # one unsharded run of the same configuration on a fresh copy of the graph
    graph.write("MATCH (n) DETACH DELETE n")
    load(graph)
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    engine = Engine(load_model(str(model), device="cpu"))
    cfg = ProbeConfig(model=str(model), sample=None, n=2, strategy="random", at=REF)
    whole = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, progress=False)
    single = {r["key"]: r["score"] for r in pr.report_rows(graph, props)}
    assert whole.scored == len(single) == len(sharded)
    assert set(single) == set(sharded)
    for key, score in single.items():
        assert abs(score - sharded[key]) <= 1e-5, key
