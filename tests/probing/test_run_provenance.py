"""The ProbeRun's record as a type (issue 39, step 7): a real probe run (tiny real model, real
graph server) writes it once; ``provenance.read_run`` gives it back as a ``RunProvenance``
with typed, decoded fields, whose values the test computes on its own."""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import torch
from probe_world import REF, load
from tiny_models import TinyModel

import kgprobe
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import ProbeConfig
from kgprobe.probing.run import run_probe
from kgprobe.reports.build import run_fields

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def engine(tiny_model: TinyModel) -> tuple[Path, Any]:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    path = tiny_model("gpt2", name="tinygpt")
    return path, Engine(load_model(str(path)))


def test_a_run_record_reads_back_as_its_dataclass(graph: Any, engine: tuple[Path, Any],
                                                    tmp_path: Path) -> None:
    from kgprobe.probing.semantic import IndexSettings, ensure_index
    from kgprobe.provenance import RunProvenance, read_run

    path, eng = engine
    load(graph)
    index = ensure_index(graph, tmp_path / "index", IndexSettings(dim=8, seed=0))
    cfg = ProbeConfig(model=str(path), sample=None, n=2, seed=7, at=REF, batch_facts=4,
                      threshold=0.25, measures=("kmin", "kavg"))
    summary = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False)
    stored = pr.get_run(graph, summary.run_id)
    assert stored is not None
    rec = read_run(stored)

    assert isinstance(rec, RunProvenance)
    git = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert (rec.id, rec.status, rec.model, rec.model_fingerprint) == (
        summary.run_id, "finished", str(path), eng.fingerprint)
    assert (rec.seed, rec.n, rec.threshold, rec.strategy, rec.sample) == (7, 2, 0.25, "temp+sem", None)
    assert (rec.code_version, rec.git_hash) == (kgprobe.__version__, git)
    assert rec.reference_date == 20240601  # REF, 2024-06-01, as year·10000 + month·100 + day
    assert rec.measures == ["kmin", "kavg"]
    assert rec.measure_keys == ["kmin_temp_sem_n2", "kavg_temp_sem_n2"]
    # the JSON-encoded properties come back decoded, typed as the dataclass says
    assert [(s["name"], s["key"]) for s in rec.measure_specs or []] == [
        ("kmin", "kmin_temp_sem_n2"), ("kavg", "kavg_temp_sem_n2")]
    assert rec.library_versions is not None and rec.library_versions["torch"] == version("torch")
    assert rec.measure_params is not None and rec.measure_params["threshold"] == 0.25
    # the semantic index its distractors came from: the settings this test built it with
    assert rec.measure_params["semantic_index"]["dim"] == 8
    assert rec.measure_params["semantic_index"]["sample"] == 200_000  # the default, not set here
    assert rec.end_marker is not None and rec.end_marker["choice"] == "auto"
    assert rec.graph_snapshot is not None and rec.graph_snapshot["facts"] > 0
    assert rec.templates is not None and set(rec.templates) == set(summary.relations)
    assert rec.relation_config_hashes is not None and set(rec.relation_config_hashes) == {"kmin", "kavg"}
    assert rec.facts_scored == summary.scored > 0 and rec.unscorable_reasons == summary.unscorable_reasons
    assert isinstance(rec.environment, dict)
    # the one writer wrote exactly what the record re-encodes (a property never changes form;
    # the graph keeps no null property)
    written = {k: v for k, v in rec.props().items() if v is not None}
    assert len(written) > 30 and {k: stored[k] for k in written} == written
    # and the report's reader is this one
    assert run_fields(stored)["library_versions"] == rec.library_versions


def test_a_run_records_the_settings_of_the_index_it_keeps(graph: Any, engine: tuple[Path, Any],
                                                          tmp_path: Path) -> None:
    """A run given only the index directory keeps the index built there with settings of the
    user's own (no rebuild with the defaults) and records them; a run whose strategy uses no
    index records none."""
    from kgprobe.probing.semantic import IndexSettings, build_index
    from kgprobe.provenance import read_run

    path, eng = engine
    load(graph)
    build_index(graph, tmp_path / "index", IndexSettings(dim=6, seed=3, sample=40))
    mtime = (tmp_path / "index" / "manifest.json").stat().st_mtime_ns
    for strategy, want in (("temp+sem", {"dim": 6, "seed": 3, "sample": 40}), ("random", None)):
        cfg = ProbeConfig(model=str(path), sample=4, n=2, seed=1, at=REF, strategy=strategy,
                          measures=("kmin",))
        summary = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint,
                            index_dir=tmp_path / "index", progress=False)
        stored = pr.get_run(graph, summary.run_id)
        assert stored is not None
        params = read_run(stored).measure_params or {}
        if want is None:
            assert "semantic_index" not in params
        else:
            assert {k: params["semantic_index"][k] for k in want} == want
    assert (tmp_path / "index" / "manifest.json").stat().st_mtime_ns == mtime  # not rebuilt


def test_a_run_names_the_fitted_model_of_its_index(graph: Any, engine: tuple[Path, Any],
                                                   tmp_path: Path) -> None:
    """Sem distractors depend on the index's fitted model (vocabulary, IDF, SVD), which an
    update after an ingest keeps and a rebuild refits (docs/distractors.md): two indexes of the
    same graph and settings differ where their models were fitted on other graphs. The run
    records which model it used (``semantic_index.model``): the same after an update, another
    after a refit with another seed, the first again after a refit with the first settings (the
    model's content, not the dates its files were written)."""
    from kgprobe.graph.ingest import ingest
    from kgprobe.probing.semantic import IndexSettings, build_index
    from kgprobe.provenance import read_run
    from kgprobe.records import EntityRecord, FactRecord

    path, eng = engine
    load(graph)
    d = tmp_path / "index"

    def model_of_a_run() -> str:
        cfg = ProbeConfig(model=str(path), sample=4, n=2, seed=1, at=REF, measures=("kmin",), force=True)
        summary = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index_dir=d, progress=False)
        stored = pr.get_run(graph, summary.run_id)
        assert stored is not None and summary.scored > 0
        return str((read_run(stored).measure_params or {})["semantic_index"]["model"])

    build_index(graph, d, IndexSettings(dim=6, seed=3, sample=40))
    first = model_of_a_run()
    assert len(first) == 16
    # a refit with another seed: another model; with the first settings again: the first one
    build_index(graph, d, IndexSettings(dim=6, seed=4, sample=40))
    assert model_of_a_run() != first
    build_index(graph, d, IndexSettings(dim=6, seed=3, sample=40))
    assert model_of_a_run() == first
    # an ingest, then an update of the index (not a refit): the same model
    before = json.loads((d / "manifest.json").read_text())
    ingest(graph, [EntityRecord(qid="Q990000071", label="Newland", types=["Q6256"]),
                   FactRecord(subject="Q990000071", pid="P36", object="Q90")])
    assert model_of_a_run() == first
    after = json.loads((d / "manifest.json").read_text())
    assert after["n_entities"] == before["n_entities"] + 1  # Newland embedded: the index was updated
    assert after["build"]["retrained"] is False and after["build"]["n_embedded"] < before["n_entities"]
