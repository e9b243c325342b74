"""The device kit (benchmarks/device/) carries what the GPU machine's image lacks: every module
its steps import resolves with the image's distributions and the carried ones alone.

A lent GPU machine reaches no package index, and its minutes are few (docs/benchmarks.md,
"Taking the GPU figures"): a module that a new import pulls in and that neither the image nor
``wheels.txt`` holds would fail there, after its start was paid for. Here it fails first."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("image_site", ROOT / "benchmarks/device/image_site.py")
assert _spec and _spec.loader
image_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(image_site)

#: what run.sh's steps import: the benchmarks it runs and the kgprobe code they reach
STEPS = ("benchmarks.bench_scoring", "benchmarks.bench_loaders", "benchmarks.bench_bulk_workers",
         "benchmarks.bench_semantic_build", "benchmarks.gen_dump", "kgprobe.cli",
         "kgprobe.probing.engine", "kgprobe.probing.semantic", "kgprobe.loaders.wikidata_json",
         "kgprobe.loaders.parallel", "kgprobe.graph.bulk", "faiss")

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
