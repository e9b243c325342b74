"""The device kit (benchmarks/device/) carries what the GPU machine's image lacks: every module
its steps import resolves with the image's distributions and the carried ones alone.

A lent GPU machine reaches no package index, and its minutes are few (docs/benchmarks.md,
"Taking the GPU figures"): a module that a new import pulls in and that neither the image nor
``wheels.txt`` holds would fail there, after its start was paid for. Here it fails first."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("image_site", ROOT / "benchmarks/device/image_site.py")
assert _spec and _spec.loader
image_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(image_site)

#: what run.sh's steps import: the benchmarks it runs and the kgprobe code they reach
STEPS = ("benchmarks.bench_scoring", "benchmarks.bench_loaders", "benchmarks.bench_bulk_workers",
         "benchmarks.bench_semantic_build", "benchmarks.bench_ivf_quantizer", "benchmarks.gen_dump",
         "benchmarks.bench_probe",
         "kgprobe.cli", "kgprobe.probing.engine", "kgprobe.probing.semantic",
         "kgprobe.probing.probe_set", "kgprobe.loaders.wikidata_json", "kgprobe.loaders.parallel",
         "kgprobe.graph.bulk", "faiss", "pyarrow.parquet")

#: the parser's fast paths, imported where present (a missing one degrades, it does not fail)
FAST_PATHS = (("kgprobe.loaders.wikidata_json", "msgspec"), ("kgprobe.loaders.common", "isal_zlib"))

def _import_alone(python: Path, site: Path) -> subprocess.CompletedProcess[str]:
    code = ("import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
            # optional imports that fall back silently: the figures would be the fallback's
            + "\n".join(f"assert importlib.import_module({m!r}).{a} is not None, {m + '.' + a!r}"
                        for m, a in FAST_PATHS)
            # the bulk step runs the CLI, whose options' types typer resolves only then
            + "\nsys.argv = ['kgprobe', 'ingest', '--help']\ntry:\n    importlib.import_module("
              "'kgprobe.cli').main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = f"{site}{os.pathsep}{ROOT}"
    return subprocess.run([str(python), "-c", code, *STEPS], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_device_steps_import_with_the_image_and_the_carried_wheels_alone(tmp_path: Path) -> None:
    carried = image_site.carried()
    assert "faiss-cpu" in carried and "lm-eval" in carried  # the index and the harness
    python = image_site.bare_python(tmp_path / "venv")
    site = tmp_path / "image"
    image_site.link(site, image_site.image_packages() + carried + list(image_site.STAND_INS))
    got = _import_alone(python, site)
    assert got.returncode == 0, got.stderr[-3000:]

    # the same interpreter without the carried wheels: kgprobe's own needs are missing there,
    # so this check does see what the image lacks
    bare = tmp_path / "bare"
    image_site.link(bare, image_site.image_packages() + list(image_site.STAND_INS))
    without = _import_alone(python, bare)
    assert without.returncode != 0
    assert "ModuleNotFoundError" in without.stderr


def test_the_lists_name_distributions_once() -> None:
    for names in (image_site.image_packages(), image_site.carried()):
        normed = [image_site.norm(n) for n in names]
        assert len(normed) == len(set(normed)) and all(normed)
    assert "torch" in image_site.image_packages() and "faiss-cpu" not in image_site.image_packages()


def _bench_probe(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks/bench_probe.py"), *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_the_probe_loop_step_scores_a_set_without_a_graph(tmp_path: Path) -> None:
    """run.sh's probe-loop step: ``bench_probe.py --set`` scores a probe set through the loop
    with no graph server and reports the engine's share of the wall; the options a set fixes
    are refused beside it."""
    got = _bench_probe("--set", "demo", "--model-free", "--repeat", "2")
    assert got.returncode == 0, got.stderr[-3000:]
    lines = got.stdout.splitlines()
    # the shipped demo set holds 60 facts of the six demo relations (kgprobe/data)
    runs = [ln for ln in lines if ln.startswith("probe [kmin]: 60 facts (")]
    assert len(runs) == 2 and all("over 6 relations" in ln for ln in runs), got.stdout
    shares = [float(ln.split(": ")[1].split(" %")[0]) for ln in lines if "in the engine (runner.run" in ln]
    assert len(shares) == 2 and all(0 < s < 100 for s in shares), got.stdout
    parts = [ln for ln in lines if ln.strip().startswith("loop parts:")]
    assert all("gather 0.00 ms wall 0.00 ms CPU per fact (0 calls)" in ln
               and "write 0.00 ms wall" in ln for ln in parts), parts  # no graph read or write

    refused = _bench_probe("--set", "demo", "--model-free", "--measure", "belief", "-n", "3")
    assert refused.returncode == 2
    assert "the probe set fixes --measure, -n: leave them out with --set" in refused.stderr
