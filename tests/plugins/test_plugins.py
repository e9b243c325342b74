"""Issue 20 item 3: measures from outside the package. The docs' example measure is a package of
its own (examples/kgprobe-top1); it is pip-installed into a temporary directory and run through
the `kgprobe` CLI, by its entry point and by `--plugin`, and the values it writes onto the FACT
edges are recomputed by hand with a plain forward pass. Bad plug-ins are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_support import clean_env, kgprobe
from distractor_world import world
from plugin_support import pip_install, with_path
from probe_world import REF, TEMPLATE_TEXTS, load
from tiny_models import TinyModel

from kgprobe.records import EntityRecord, FactRecord

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kgprobe-top1"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("plugin-site") / "site"
    pip_install(EXAMPLE, target)
    assert (target / "kgprobe_top1" / "__init__.py").exists()
    assert list(target.glob("kgprobe_top1-0.1.0.dist-info/entry_points.txt"))
    return target


def expected_top1(model: Any, tokenizer: Any, pids: set[str]) -> dict[tuple[str, str, str], float]:
    """The measure's definition, by hand: per fact, over its relation's object-last and question
    templates with the subject's label, the share whose arg-max next token (stripped) equals
    the first word of the object's label."""
    labels = {r.qid: r.label for r in world() if isinstance(r, EntityRecord)}
    out: dict[tuple[str, str, str], float] = {}
    for f in world():
        if not isinstance(f, FactRecord) or f.pid not in pids or f.rank == "deprecated":
            continue
        if not labels.get(f.subject) or not labels.get(f.object):
            continue
        hits = []
        for pid, template in TEMPLATE_TEXTS:
            if pid != f.pid:
                continue
            text = template.replace("[X]", str(labels[f.subject]))
            if text.endswith("?"):
                context = text  # a question: the answer follows it
            elif text.endswith("[Y]."):
                context = text[: -len("[Y].")].rstrip()
            else:
                continue  # the object inside the sentence: no cloze
            ids = tokenizer(context, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, -1]
            top = tokenizer.decode([int(torch.argmax(logits))])
            hits.append(top.strip() == str(labels[f.object]).split()[0])
        out[(f.subject, f.pid, f.object)] = sum(hits) / len(hits)
    return out


def stored(graph: Any, model_key: str) -> dict[tuple[str, str, str], float]:
    from kgprobe.graph import probe_runs as pr

    rows = pr.scores_with_ends(graph, pr.ScoreProps(model_key, "top1"))
    return {(r["s"], r["pid"], r["o"]): r["score"] for r in rows}


@pytest.mark.slow
def test_installed_package_measures_through_the_cli(graph: Any, kgprobe_env: dict[str, str], site: Path) -> None:
    """The entry point: installed, `kgprobe probe --measure top1` runs it with the default
    model, and every stored value equals the hand computation."""
    load(graph)
    args = ["probe", "--measure", "top1", "-r", "P36", "-r", "P27", "--sample", "0", "--at", REF,
            "--no-cache", "--json"]
    before = kgprobe(*args, env=kgprobe_env)
    assert before.returncode == 2 and before.stderr.startswith("error: unknown measure top1;")
    assert len(before.stderr.strip().splitlines()) == 1

    env = with_path(kgprobe_env, site)
    listed = json.loads(kgprobe("measures", "--json", env=env).stdout)
    assert "top1" in [m["name"] for m in listed["measures"]]
    r = kgprobe(*args, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["score_properties"] == ["score__smollm2_135m__top1"]

    from kgprobe.probing.models import DEFAULT_MODEL, load_model

    lm = load_model(DEFAULT_MODEL, threads=1)
    want = expected_top1(lm.model, lm.tokenizer, {"P36", "P27"})
    got = stored(graph, "smollm2_135m")
    assert got == want
    assert len(want) >= 10 and {0.0, 1.0} <= set(want.values())  # the model knows some, not all


def test_plugin_option_and_environment(graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel) -> None:
    """Not installed, only importable: `--plugin MODULE` (and KGPROBE_PLUGINS) loads the module,
    which registers its measure; a tiny model's values equal the hand computation."""
    load(graph)
    env = with_path(kgprobe_env, EXAMPLE)  # the source folder: no entry point, no dist-info

    def names(*root: str, extra: dict[str, str] | None = None) -> list[str]:
        r = kgprobe(*root, "measures", "--json", env={**env, **(extra or {})})
        assert r.returncode == 0, r.stderr
        return [m["name"] for m in json.loads(r.stdout)["measures"]]

    assert "top1" not in names()
    assert names("--plugin", "kgprobe_top1")[-1] == "top1"
    assert names(extra={"KGPROBE_PLUGINS": "kgprobe_top1"})[-1] == "top1"

    gpt2 = tiny_model("gpt2")
    r = kgprobe("--plugin", "kgprobe_top1", "probe", "--model", str(gpt2), "--measure", "top1", "-r", "P36",
                "--sample", "0", "--at", REF, "--no-cache", "--json", env=env)
    assert r.returncode == 0, r.stderr
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gpt2).eval()
    want = expected_top1(model, AutoTokenizer.from_pretrained(gpt2), {"P36"})
    assert stored(graph, "gpt2") == want and len(want) == 3


def test_bad_plugins_are_one_line_exit_2(tmp_path: Path) -> None:
    """An import error, a missing module, a name that is not a module, a measure that takes a
    built-in's name (as a module and as an installed entry point): one line, exit code 2
    (README's table: a bad configuration), before any graph is contacted."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "broken_plugin.py").write_text("import kgprobe_no_such_dependency\n")
    (mods / "clashing_plugin.py").write_text(
        "from kgprobe.probing.measures.registry import Measure, register\n\n\n"
        "@register\nclass Mine(Measure):\n    name = 'kmin'\n    section = 'x'\n    summary = 'x'\n")
    pkg = tmp_path / "kgprobe-clash"
    (pkg / "kgprobe_clash").mkdir(parents=True)
    (pkg / "kgprobe_clash" / "__init__.py").write_text(
        "from kgprobe.probing.measures.registry import Measure\n\n\n"
        "class Kavg(Measure):\n    name = 'kavg'\n    section = 'x'\n    summary = 'x'\n")
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "kgprobe-clash"\nversion = "1.0"\n\n'
        '[project.entry-points."kgprobe.measures"]\nkavg = "kgprobe_clash:Kavg"\n\n'
        '[tool.setuptools]\npackages = ["kgprobe_clash"]\n')
    site = tmp_path / "site"
    pip_install(pkg, site)
    base = clean_env()
    base["KGPROBE_HOME"] = str(tmp_path / "home")  # never started: nothing may touch a graph
    env = with_path(base, mods)
    for args, extra_env, text in (
        (["--plugin", "broken_plugin", "measures"], env,
         "error: plugin module broken_plugin: ModuleNotFoundError: No module named 'kgprobe_no_such_dependency'"),
        (["measures"], {**env, "KGPROBE_PLUGINS": "broken_plugin"}, "error: plugin module broken_plugin:"),
        (["--plugin", "no_such_plugin", "stats"], env, "error: --plugin no_such_plugin: no such module"),
        (["--plugin", "not a module", "stats"], env, "error: --plugin: 'not a module' is not a Python module name"),
        (["--plugin", "clashing_plugin", "probe", "--measure", "kmin"], env,
         "error: plugin module clashing_plugin: TypeError: measure name 'kmin' of clashing_plugin.Mine is "
         "taken by the built-in measure kgprobe.probing.measures.builtin."),
        (["measures"], with_path(base, site),
         "error: plugin entry point kavg = kgprobe_clash:Kavg of kgprobe-clash 1.0 (kgprobe.measures): measure "
         "name 'kavg' of kgprobe_clash.Kavg is taken by the built-in measure"),
    ):
        r = kgprobe(*args, env=extra_env)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith(text), (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "home" / "server.json").exists()
    # --verbose shows where the line came from, and still ends with it
    r = kgprobe("--verbose", "--plugin", "broken_plugin", "measures", env=env)
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: plugin module broken_plugin:")


def test_the_docs_example_is_the_package() -> None:
    """docs/measures.md shows the example package's module and pyproject.toml as they are."""
    doc = (REPO / "docs" / "measures.md").read_text(encoding="utf-8")
    part = doc.split("### Worked example: adding a measure", 1)[1].split("\n### ", 1)[0]
    for path in (EXAMPLE / "kgprobe_top1" / "__init__.py", EXAMPLE / "pyproject.toml"):
        assert path.read_text(encoding="utf-8") in part, path
