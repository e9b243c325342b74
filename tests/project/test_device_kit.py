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
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("image_site", ROOT / "benchmarks/device/image_site.py")
assert _spec and _spec.loader
image_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(image_site)

#: what run.sh's steps import: the benchmarks it runs and the kgprobe code they reach
STEPS = ("benchmarks.bench_scoring", "benchmarks.bench_loaders", "benchmarks.bench_bulk_workers",
         "benchmarks.bench_semantic_build", "benchmarks.bench_ivf_quantizer", "benchmarks.gen_dump",
         "benchmarks.bench_probe", "benchmarks.bench_neo4j_import",
         "kgprobe.cli", "kgprobe.probing.engine", "kgprobe.probing.semantic",
         "kgprobe.probing.probe_set", "kgprobe.loaders.wikidata_json", "kgprobe.loaders.parallel",
         "kgprobe.graph.bulk", "faiss", "pyarrow.parquet")

#: the parser's fast paths, imported where present (a missing one degrades, it does not fail)
FAST_PATHS = (("kgprobe.loaders.wikidata_json", "msgspec"), ("kgprobe.loaders.common", "isal_zlib"))

#: what run.sh's neo4j, parse and arcadedb steps import (the Java kit: image_site.JAVA_KIT_LEAVES are not
#: carried)
JAVA_STEPS = ("benchmarks.gen_dump", "benchmarks.bench_neo4j_import", "benchmarks.bench_loaders",
              "benchmarks.bench_graphimporter_heap",
              "benchmarks.bench_bulk_workers", "kgprobe.cli",
              "kgprobe.loaders.wikidata_json", "kgprobe.loaders.parallel", "kgprobe.graph.bulk",
              "kgprobe.graph.client", "kgprobe.config", "neo4j_server")

_kit_spec = importlib.util.spec_from_file_location("java_kit", ROOT / "benchmarks/device/java_kit.py")
assert _kit_spec and _kit_spec.loader
java_kit = importlib.util.module_from_spec(_kit_spec)
_kit_spec.loader.exec_module(java_kit)


def _import_alone(python: Path, site: Path, steps: tuple[str, ...] = STEPS) -> subprocess.CompletedProcess[str]:
    code = ("import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
            # optional imports that fall back silently: the figures would be the fallback's
            + "\n".join(f"assert importlib.import_module({m!r}).{a} is not None, {m + '.' + a!r}"
                        for m, a in FAST_PATHS)
            # the bulk step runs the CLI, whose options' types typer resolves only then
            + "\nsys.argv = ['kgprobe', 'ingest', '--help']\ntry:\n    importlib.import_module("
              "'kgprobe.cli').main()\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join((str(site), str(ROOT), str(ROOT / "tests")))
    return subprocess.run([str(python), "-c", code, *steps], env=env, cwd=ROOT,
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


def test_the_java_kits_step_imports_without_faiss_and_the_harness(tmp_path: Path) -> None:
    carried = image_site.carried("java")
    assert "faiss-cpu" not in carried and "lm-eval" not in carried and "orjson" in carried
    assert [s.split("==")[0] for s in image_site.carried_specs("java")] == carried
    python = image_site.bare_python(tmp_path / "venv")
    site = tmp_path / "image"
    image_site.link(site, image_site.image_packages() + carried + list(image_site.STAND_INS))
    got = _import_alone(python, site, JAVA_STEPS)
    assert got.returncode == 0, got.stderr[-3000:]


def test_the_java_kit_keeps_what_the_class_load_log_names_and_every_jar_entry(tmp_path: Path) -> None:
    """java_kit.pack's two pieces of its own: the log's jars and modules, and a jar rewritten
    uncompressed with every entry, in order, byte for byte (the kit itself is made and checked
    by ``java_kit.py pack``: a JVM run, too long for the suite)."""
    log = ("[0.011s][info][class,load] java.lang.Object source: shared objects file\n"
           "[0.050s][info][class,load] org.neo4j.cli.AdminTool source: file:/m2/neo4j-5.26.30.jar\n"
           "[0.051s][info][class,load] org.neo4j.X source: file:/m2/neo4j-5.26.30.jar\n"
           "[0.060s][info][class,load] javax.management.ObjectName source: jrt:/java.management\n"
           "[0.070s][info][class,load] Foo$$Lambda/0x0000 source: org.neo4j.Foo\n"
           "[0.080s][info][class,load] java.sql.Date source: jrt:/java.sql\n")
    d = tmp_path
    (d / "1.txt").write_text(log, encoding="utf-8")
    assert java_kit.loaded([d / "1.txt"]) == ({"java.management", "java.sql"}, {"/m2/neo4j-5.26.30.jar"})

    entries = [("META-INF/", b""), ("META-INF/MANIFEST.MF", b"Manifest-Version: 1.0\n"),
               ("org/x/A.class", bytes(range(256)) * 40), ("org/x/", b""), ("z.txt", b"z" * 5000)]
    with zipfile.ZipFile(d / "a.jar", "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(name, data)
    java_kit.stored(d / "a.jar", d / "out" / "a.jar")
    with zipfile.ZipFile(d / "out" / "a.jar") as z:
        assert [(i.filename, z.read(i)) for i in z.infolist()] == entries
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}
        assert z.testzip() is None


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

    # --instant: no tokenization, answers at once; what is left of the wall is outside the engine
    instant = _bench_probe("--set", "demo", "--instant")
    assert instant.returncode == 0, instant.stderr[-3000:]
    out = instant.stdout
    assert "probe [kmin]: 60 facts (" in out and "), 0 forward calls" in out, out
    per_fact = float(out.split("  per fact: ")[1].split(" ms wall")[0])
    outside = float(out.split("outside the engine: ")[1].split(" ms wall")[0])
    assert 0 < outside <= per_fact, out
    assert _bench_probe("--instant").returncode == 2  # a set's loop only

    # --simulate-device: the loop's three orders over a device thread, one process
    sim = _bench_probe("--set", "demo", "--simulate-device", "0.2", "--device-queue", "0.001",
                       "--launch-ahead", "three")
    assert sim.returncode == 0, sim.stderr[-3000:]
    blocks = sim.stdout.split("launch ahead: ")[1:]
    assert [b.split("\n", 1)[0] for b in blocks] == ["off", "read-first", "on"], sim.stdout
    for b, ahead in zip(blocks, ("no", "yes", "yes"), strict=True):
        assert f"batches launched ahead: {ahead}" in b, b
        busy = float(b.split("simulated device: busy ")[1].split(" s,")[0])
        # the same unique requests each time: at least 60 facts' worth at 0.2 ms a request
        assert busy >= 60 * 0.2e-3 and "(0.2 ms a request, queue 0.001 s)" in b, b
    assert _bench_probe("--launch-ahead", "three").returncode == 2
