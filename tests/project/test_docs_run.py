"""Docs that run (issue 40 item 6): every fenced code block of README.md and docs/*.md that is
Python, Cypher, or a shell block with a ``kgprobe`` command is executed here, in document order,
on one shared demo graph (``kgprobe demo`` once, into the session's real graph server) with tiny
local models in place of the registry's. A block that cannot run in a test (a 100 GB dump,
Docker, a GPU, a served model, minutes of benchmark) is marked in the Markdown, right before its
fence, with ``<!-- docs-test: skip REASON -->`` (or ``<!-- docs-test: skip-line "TEXT" REASON
-->`` for the lines of a block that contain TEXT); ``test_every_block_runs_or_is_marked`` fails
on a block in scope that is neither run nor marked, on a marker without a reason, and on a
marker that no longer applies, so a new block cannot be skipped silently.

How a block is run (nothing else is changed; the substitutions are the table ``SUBST`` below):

* **shell**: each line starting with ``kgprobe`` (``\\``-continuations joined, ``#`` comments
  dropped) runs through ``kgprobe.cli.main`` with that argv, in this process (its environment
  and working directory swapped in for the call; a subprocess where a block put a plug-in on
  ``PYTHONPATH``), in a scratch directory, and must exit 0.
  Optional parts of a synopsis, ``[…]``, are left out; ``a|b|c`` takes ``a``. A command that
  loads a model and names none gets ``-m`` the tiny stand-in of the default model; ``--sample``
  above ``MAX_SAMPLE`` is cut to it, a ``probe``/``export`` with no sample size of its own gets
  ``--sample MAX_SAMPLE``, and a ``demo`` re-run ``--per-relation DEMO_PER_RELATION``. ``pip install`` lines are checked, not run: the extras
  named must exist in pyproject.toml (kgprobe itself is installed from its checkout). Any
  other line in a shell block that has a ``kgprobe`` line makes the block need a marker.
* **python**: ``exec`` in the scratch directory with the environment of the graph server, the
  names of ``NAMES`` predefined (a tiny model, its tokenizer, a Trainer…) and the string
  literals of ``SUBST`` replaced.
* **cypher**: each ``;``-separated query through ``kgprobe.cypher``; every score property a
  query names (``score__…``, ``known__…``, ``stale__…``) must exist on some FACT edge of the
  demo graph, since a query over a misspelt property silently returns nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}
MAX_SAMPLE = 20
#: a demo re-run (the session's demo has already scored 10 facts per relation) probes fewer
DEMO_PER_RELATION = "3"
#: commands that load a model: without -m/--model/--backend they get the default's stand-in
MODEL_COMMANDS = {"probe", "score", "factor", "demo"}
#: registry model names -> tiny random models saved under a directory of the same name, so the
#: score property names (``score__smollm2_135m__…``) in the docs' Cypher are the real ones
MODELS = {"smollm2-135m": "gpt2", "gemma3-270m": "gpt2", "qwen2.5-coder-1.5b": "gpt2", "my-model": "gpt2"}
MARKER = re.compile(r"^<!--\s*docs-test:\s*(skip-line|skip)\s+(.*?)\s*-->\s*$")


def SUBST(world: World) -> dict[str, str]:
    """Placeholders of the docs -> what the test uses (whole shell words, or Python string
    literals' contents)."""
    m = world.models
    return {
        "smollm2-135m": m["smollm2-135m"],  # the default model (registry) -> its tiny stand-in
        "gemma3-270m": m["gemma3-270m"],
        "qwen2.5-coder-1.5b": m["qwen2.5-coder-1.5b"],
        "./my-model": m["my-model"],  # "your model"
        "HuggingFaceTB/SmolLM2-135M": m["smollm2-135m"],  # a hub id: no network in tests
        ".../demo-report/smollm2_135m": str(world.home / "demo-report" / "smollm2_135m"),
        "human.csv": str(world.work / "human.csv"),  # written from the demo's stored facts
        "expert_factor.csv": str(FIXTURES / "factor" / "expert_factor_sample.csv"),
        "news_factor.csv": str(FIXTURES / "factor" / "news_factor_sample.csv"),
        "relations.jsonl": str(FIXTURES / "templates" / "LAMA_relations.jsonl"),
        # a Wikidata JSON dump / entity JSON / Turtle / N-Triples: small real fixtures
        "latest-all.json.bz2": str(FIXTURES / "wikidata" / "wdtk" / "mock-dump-for-testing.json"),
        "Q42.json": str(FIXTURES / "wikidata" / "entity-json" / "Q182397.json"),
        "Q42.ttl": str(FIXTURES / "wikidata" / "wdqs-rdf" / "Q42.ttl"),
        "truthy.nt": str(FIXTURES / "wikidata" / "derived" / "Q42_truthy.nt"),
        "/tmp/demo": str(world.work / "tmp-demo"),  # a path outside the scratch directory
        "other": m["gemma3-270m"],  # evaluate --vs-model other: another model with stored scores
    }


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    skip: str | None = None  # the reason, when the whole block is marked
    skip_lines: dict[str, str] = field(default_factory=dict)  # TEXT -> reason
    markers: list[tuple[int, str]] = field(default_factory=list)  # (line, raw) of its markers

    @property
    def id(self) -> str:
        path = self.path.relative_to(REPO) if self.path.is_relative_to(REPO) else self.path.name
        return f"{path}:{self.line}"

    @property
    def kind(self) -> str | None:
        """python, cypher, shell (a shell block with a kgprobe line) or None: not in scope."""
        if self.lang in ("python", "py"):
            return "python"
        if self.lang == "cypher":
            return "cypher"
        if self.lang in SHELL_LANGS and any(words(c)[:1] == ["kgprobe"] for c in commands(self.text)):
            return "shell"
        return None


def parse(path: Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a Markdown file with their markers, and the problems found."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    pending: list[tuple[int, str, str, str]] = []  # markers waiting for their fence
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line.strip())
        if m:
            pending.append((i + 1, m.group(1), m.group(2), line.strip()))
            i += 1
            continue
        fence = re.match(r"^\s*(`{3,})\s*([\w+-]*)", line)
        if fence:
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith(fence.group(1)):
                end += 1
            block = Block(path, i + 1, fence.group(2).lower(), "\n".join(lines[i + 1:end]) + "\n")
            for n, what, rest, raw in pending:
                block.markers.append((n, raw))
                if what == "skip":
                    block.skip = rest
                else:
                    sl = re.match(r'^"([^"]+)"\s+(\S.*)$', rest)
                    if not sl:
                        problems.append(f'{path.name}:{n}: skip-line needs "TEXT" and a reason: {raw}')
                    else:
                        block.skip_lines[sl.group(1)] = sl.group(2)
            pending = []
            blocks.append(block)
            i = end + 1
            continue
        if pending and line.strip():
            problems.extend(f"{path.name}:{n}: marker not right before a fence: {raw}" for n, _, _, raw in pending)
            pending = []
        i += 1
    return blocks, problems


def commands(text: str) -> list[str]:
    """A shell block's command lines: ``\\``-continuations and lines inside an open quote
    joined, comment-only lines dropped; in a transcript (lines starting ``$ ``) only those."""
    lines = text.splitlines()
    if any(line.startswith("$ ") for line in lines):
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    out: list[str] = []
    cur = ""
    for raw in lines:
        line = (cur + raw.rstrip()) if cur else raw.strip()
        cur = ""
        if line.endswith("\\"):
            cur = line[:-1].rstrip() + " "
            continue
        if _open_quote(line):
            cur = line + "\n"
            continue
        if line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    if cur.strip():
        out.append(cur.strip())
    return out


def _open_quote(line: str) -> bool:
    try:
        shlex.split(line, comments=True)
    except ValueError as exc:
        return "quotation" in str(exc)
    return False


def words(cmd: str) -> list[str]:
    try:
        return shlex.split(cmd, comments=True)
    except ValueError:
        return cmd.split()


def all_blocks() -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for path in DOCS:
        b, p = parse(path)
        blocks += b
        problems += p
    return blocks, problems


def _in_scope() -> list[Block]:
    return [b for b in all_blocks()[0] if b.kind is not None]


# --- the checks that need no server --------------------------------------------------------

def test_every_block_runs_or_is_marked() -> None:
    """Each block in scope is run by ``test_doc_block`` unless marked; markers carry a reason,
    sit on a block in scope and (skip-line) match one of its lines; a shell line that is not a
    kgprobe command (nor a checked ``pip install``) needs a marker."""
    blocks, problems = all_blocks()
    for b in blocks:
        if b.markers and b.kind is None:
            problems.append(f"{b.id}: a docs-test marker on a block that is not run anyway ({b.lang or 'plain'})")
        if b.skip is not None and not b.skip.strip():
            problems.append(f"{b.id}: skip without a reason")
        for text in b.skip_lines:
            if text not in b.text:
                problems.append(f'{b.id}: skip-line "{text}" matches no line of the block')
        if b.kind == "shell" and b.skip is None:
            for cmd in commands(b.text):
                if any(t in cmd for t in b.skip_lines):
                    continue
                w = words(cmd)
                if w[:1] != ["kgprobe"] and w[:2] != ["pip", "install"]:
                    problems.append(f"{b.id}: not a kgprobe command and not marked: {cmd!r}")
    assert not problems, "\n".join(problems)
    assert len([b for b in blocks if b.kind and b.skip is None]) >= 30  # the parser found them


def test_the_parser_sees_a_new_block_and_its_marker(tmp_path: Path) -> None:
    """A block added without a marker is in scope (and so run); a marker applies to the fence
    right after it only."""
    doc = tmp_path / "new.md"
    doc.write_text("text\n\n```bash\nkgprobe stats --json\n```\n\n"
                   "<!-- docs-test: skip needs a GPU -->\n```bash\nkgprobe probe --device cuda\n```\n"
                   "```\nkgprobe stats \\\n  --json   # a comment\n```\n```text\nkgprobe output\n```\n",
                   encoding="utf-8")
    blocks, problems = parse(doc)
    assert problems == []
    assert [(b.line, b.kind, b.skip) for b in blocks] == [
        (3, "shell", None), (8, "shell", "needs a GPU"), (11, "shell", None), (15, None, None)]
    assert len(commands(blocks[2].text)) == 1
    assert words(commands(blocks[2].text)[0]) == ["kgprobe", "stats", "--json"]


# --- the shared world: one demo graph, tiny models, a scratch directory ---------------------

@dataclass
class World:
    env: dict[str, str]
    settings: Any
    home: Path
    work: Path
    models: dict[str, str]
    base_pythonpath: str = ""
    names: dict[str, Any] = field(default_factory=dict)


def _cli(args: list[str], env: dict[str, str], cwd: Path,
         own_process: bool = False) -> subprocess.CompletedProcess[str]:
    """One documented command: ``kgprobe.cli.main`` run in this process with the command's
    argv, environment (``os.environ`` replaced by ``env`` for the call), working directory
    and stdout/stderr captured, its exit code from ``SystemExit`` as the console script's
    would be. A process per command paid Python's, torch's and transformers' imports ~80
    times, most of this module's ten minutes. With ``own_process`` (a block that put an
    example plug-in's directory on ``PYTHONPATH``) it runs as ``python -m kgprobe.cli`` in a
    subprocess: only a new process reads that path, as a user's shell would."""
    if own_process:
        return subprocess.run([sys.executable, "-m", "kgprobe.cli", *args], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=600)
    import io
    import logging

    import torch

    from kgprobe import cli, progress
    from kgprobe.probing import models

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    log = logging.getLogger("kgprobe")
    saved_log = (list(log.handlers), log.level)
    saved_threads = torch.get_num_threads()  # --threads sets the process's
    # what the global options and the model options set for the whole process: -q/-v and
    # --device/--batch-tokens/--model-arg/--backend (the tests after this module see the defaults)
    saved_quiet, saved_verbose = progress.is_quiet(), cli._verbose
    saved_loading = dataclasses.replace(models.LOAD_DEFAULTS)
    code: int | str | None = 0
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = ["kgprobe", *args]
    torch.set_num_threads(int(env.get("OMP_NUM_THREADS") or saved_threads))  # as a new process reads it
    try:
        with _registries_kept(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as exc:
                code = exc.code
            except Exception:  # what the console script would print: a traceback, exit 1
                import traceback

                traceback.print_exc(file=err)
                code = 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        log.handlers[:], log.level = saved_log
        torch.set_num_threads(saved_threads)
        progress.set_quiet(saved_quiet)
        cli._verbose = saved_verbose
        for f in dataclasses.fields(saved_loading):
            setattr(models.LOAD_DEFAULTS, f.name, getattr(saved_loading, f.name))
    if code is None:
        code = 0
    elif isinstance(code, str):  # sys.exit("message"): printed on stderr, exit 1
        print(code, file=err)
        code = 1
    return subprocess.CompletedProcess(["kgprobe", *args], code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _registries_kept() -> Iterator[None]:
    """Whatever a block registers (a measure, backend, loader format, strategy or report
    section, by a Python block or a command's ``--plugin``) is taken out of the process's
    registries afterwards: the loader and strategy tests that run later in the session count them."""
    import kgprobe.loaders.formats
    import kgprobe.probing.backends
    import kgprobe.probing.strategies
    import kgprobe.reports.sections  # noqa: F401  (their registries join KINDS)
    from kgprobe.plugins import KINDS
    from kgprobe.probing.measures.catalog import load_all

    load_all()
    known = [(reg, set(reg.load())) for reg in KINDS.values()]
    try:
        yield
    finally:
        for reg, before in known:
            for name in set(reg) - before:
                reg.pop(name)


@pytest.fixture(scope="module")
def world(graph_settings: Any, _session_graph: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The session's graph emptied and loaded once with ``kgprobe demo`` (the tiny stand-in of
    smollm2-135m, careful and raw wordings), the other stand-ins probed on the demo's
    relations, and a scratch directory holding the files the docs name."""
    from _scoring_models import build

    from kgprobe.api import DEMO_RELATIONS

    s = graph_settings
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEO4J_", "KGPROBE_"))}
    if s.uri:
        env.update(NEO4J_URI=s.uri, NEO4J_USER=s.user, NEO4J_PASSWORD=s.password or "")
        if s.database:
            env["NEO4J_DATABASE"] = s.database
    else:
        env.update(KGPROBE_HOME=str(s.home), KGPROBE_BOLT_PORT=str(s.bolt_port), KGPROBE_HTTP_PORT=str(s.http_port))
    home = Path(str(s.home))
    env["KGPROBE_HOME"] = str(home)
    env["KGPROBE_CONFIG"] = str(home / "no-config.json")
    root = tmp_path_factory.mktemp("docs-run")
    env["KGPROBE_SCORE_CACHE"] = str(root / "scores.sqlite")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    work = root / "work"
    work.mkdir()
    models = {name: str(build(arch, root / "models" / name, positions=4096)) for name, arch in MODELS.items()}
    _session_graph.write("MATCH (n) DETACH DELETE n")
    w = World(env=env, settings=s, home=home, work=work, models=models, base_pythonpath=env["PYTHONPATH"])
    # run.yaml: docs/results.md's own example, with the model's stand-in
    yaml_block = next(b for b in parse(REPO / "docs" / "results.md")[0] if b.lang == "yaml")
    (work / "run.yaml").write_text(yaml_block.text.replace("smollm2-135m", models["smollm2-135m"])
                                 .replace("sample: 120", f"sample: {MAX_SAMPLE}"), encoding="utf-8")
    r = _cli(["-q", "demo", "-m", models["smollm2-135m"]], env, work)
    assert r.returncode == 0, r.stderr
    rel = [a for pid in DEMO_RELATIONS for a in ("-r", pid)]
    for name in ("gemma3-270m", "qwen2.5-coder-1.5b"):
        r = _cli(["-q", "probe", "-m", models[name], *rel, "--per-relation", "3"], env, work)
        assert r.returncode == 0, r.stderr
    # human scores for `evaluate --human human.csv`, keyed by the stored facts
    facts = _session_graph.read(
        "MATCH ()-[f:FACT]->() WHERE f.score__smollm2_135m__kmin_temp_sem_n5 IS NOT NULL "
        "RETURN f.key AS key ORDER BY key")
    (work / "human.csv").write_text("statement,score\n" + "".join(
        f"{row['key']},{i % 7}\n" for i, row in enumerate(facts)), encoding="utf-8")
    yield w


#: names a Python block may use without defining them (built by ``_names``)
NAMES = ("model", "tok", "tokenizer", "args", "ds", "trainer")


def _names(world: World) -> dict[str, Any]:
    """Names a Python block uses without defining them: a model and its tokenizer, and a
    Trainer of two steps on a few sentences (as tests/probing/test_probe_set_callback.py)."""
    if not world.names:
        import torch
        from trainer_support import _Texts
        from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

        path = world.models["smollm2-135m"]
        model = AutoModelForCausalLM.from_pretrained(path)
        tok = AutoTokenizer.from_pretrained(path)
        args = TrainingArguments(output_dir=str(world.work / "trainer"), max_steps=2, per_device_train_batch_size=4,
                                 report_to=[], save_strategy="no", use_cpu=True)
        ds = _Texts(tok)
        torch.manual_seed(0)
        trainer = Trainer(model=model, args=args, train_dataset=ds, processing_class=tok)
        world.names.update(model=model, tok=tok, tokenizer=tok, args=args, ds=ds, trainer=trainer)
    return world.names


# --- running a block -------------------------------------------------------------------------

def _synopsis(w: list[str]) -> list[str]:
    """Leave out ``[…]`` optional parts; take the first of ``a|b|c``."""
    out: list[str] = []
    depth = 0
    for word in w:
        opens, closes = word.count("["), word.count("]")
        if word.startswith("[") or depth:
            depth += opens - closes
            continue
        if "|" in word and not word.startswith(("'", '"')) and "://" not in word:
            word = word.split("|")[0]
        out.append(word)
    return out


def shell_args(cmd: str, world: World) -> list[str] | None:
    """The CLI's arguments for one documented command line, or None for a checked pip line."""
    subst = SUBST(world)
    w = words(cmd)
    if w[:2] == ["pip", "install"]:
        for target in w[2:]:
            if target.startswith("./examples/"):  # an example plug-in: on the path, loaded by name
                pkg = REPO / target
                module = next(p.parent.name for p in pkg.glob("*/__init__.py"))
                world.env["PYTHONPATH"] = f"{pkg}{os.pathsep}{world.env['PYTHONPATH']}"
                world.env["KGPROBE_PLUGINS"] = module
        extras = pyproject_extras()
        for target in w[2:]:
            m = re.fullmatch(r"(-e\s*)?(\S*?)\[([\w,-]+)\]", target)
            if m:
                assert m.group(2) in (".", "./"), f"{cmd!r}: kgprobe is installed from its checkout ('.[extra]')"
                missing = set(m.group(3).split(",")) - extras
                assert not missing, f"{cmd!r}: no such extra in pyproject.toml: {missing}"
        return None
    assert w[:1] == ["kgprobe"], cmd
    args = [subst.get(a, a) for a in _synopsis(w[1:])]
    # the blocks share one demo world: a wipe would empty it for every block after this one
    assert args[:2] != ["db", "wipe"], f"{cmd!r} wipes the graph: mark its block docs-test: skip"
    if args and args[0] in MODEL_COMMANDS and not {"-m", "--model", "--backend"} & set(args):
        args += ["-m", world.models["smollm2-135m"]]
    for i, a in enumerate(args[:-1]):
        if a == "--sample" and args[i + 1].isdigit() and int(args[i + 1]) > MAX_SAMPLE:
            args[i + 1] = str(MAX_SAMPLE)
    sized = {"--sample", "--per-relation", "--set", "--config", "--dry-run"} & set(args)
    if args[:1] in (["probe"], ["export"]) and not sized:  # the default sample of 60
        args += ["--sample", str(MAX_SAMPLE)]
    if args[:1] == ["demo"] and "--per-relation" not in args:
        args += ["--per-relation", DEMO_PER_RELATION]
    return args


def pyproject_extras() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def run_shell(block: Block, world: World) -> None:
    for cmd in commands(block.text):
        if any(t in cmd for t in block.skip_lines):
            continue
        args = shell_args(cmd, world)
        if args is None:
            continue
        r = _cli(["-q", *args], world.env, world.work,
                 own_process=world.env["PYTHONPATH"] != world.base_pythonpath)
        assert r.returncode == 0, f"{block.id}: `{cmd}` -> exit {r.returncode}\n{r.stderr[-3000:]}"
    world.env.pop("KGPROBE_PLUGINS", None)
    world.env["PYTHONPATH"] = world.base_pythonpath


def run_python(block: Block, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    code = block.text
    for old, new in SUBST(world).items():
        code = code.replace(f'"{old}"', repr(new)).replace(f"'{old}'", repr(new))
    for key in [k for k in os.environ if k.startswith(("NEO4J_", "KGPROBE_"))]:
        monkeypatch.delenv(key)
    for key, value in world.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(world.work)
    names: dict[str, Any] = {"__name__": "docs_block"}
    if any(re.search(rf"\b{k}\b", code) for k in NAMES):
        names.update({k: v for k, v in _names(world).items() if re.search(rf"\b{k}\b", code)})
    for tracker in TRACKERS:
        if re.search(rf"^import {tracker}$", code, re.M) and importlib.util.find_spec(tracker) is None:
            monkeypatch.setitem(sys.modules, tracker, _recording_module(tracker))
    with _registries_kept():
        exec(compile(code, block.id, "exec"), names)


#: tracking clients the recipes import; when not installed, a module that records every call
#: (tests/project/test_docs_tracking.py checks what the recipes log)
TRACKERS = ("mlflow", "wandb")


def _recording_module(name: str) -> types.ModuleType:
    from test_docs_tracking import Recorder

    module = types.ModuleType(name)
    calls: dict[str, list[Any]] = {}
    module.__getattr__ = lambda attr: Recorder(calls, f"{name}.{attr}")  # type: ignore[attr-defined]
    return module


PROPERTY = re.compile(r"\b((?:score|known|stale)__\w+__\w+)")


def run_cypher(block: Block, world: World, graph: Any) -> None:
    from kgprobe.api import cypher

    queries = [q.strip() for q in re.sub(r"(?m)^\s*//.*$", "", block.text).split(";") if q.strip()]
    assert queries, block.id
    for q in queries:
        for prop in sorted(set(PROPERTY.findall(q))):
            rows = graph.read(f"MATCH ()-[f:FACT]->() WHERE f.`{prop}` IS NOT NULL RETURN count(f) AS n")
            assert rows[0]["n"] > 0, f"{block.id}: no FACT edge has {prop} after the demo"
        cypher(q, settings=world.settings)


#: the Neo4j half of `make test` (KGPROBE_TEST_SERVER_ONLY) runs the docs' Cypher, which must
#: run on both servers; the shell and Python blocks ran in the ArcadeDB half, and running their
#: ~80 processes again would add ten minutes to CI for what the Cypher and the graph tests cover
SECOND_HALF = os.environ.get("KGPROBE_TEST_SERVER_ONLY", "").strip() in ("1", "true", "yes")
ONE_HALF = pytest.mark.skipif(SECOND_HALF, reason="shell and Python doc blocks run in the ArcadeDB half")


@pytest.mark.parametrize("block", [pytest.param(b, marks=() if b.kind == "cypher" else ONE_HALF)
                                   for b in _in_scope() if b.skip is None], ids=lambda b: b.id)
def test_doc_block(block: Block, world: World, _session_graph: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.kind == "shell":
        run_shell(block, world)
    elif block.kind == "python":
        run_python(block, world, monkeypatch)
    else:
        run_cypher(block, world, _session_graph)


@ONE_HALF
def test_a_broken_block_fails(world: World, _session_graph: Any, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner is not lenient: a misspelt option, a missing key in Python and a misspelt
    score property each fail."""
    bad = [Block(tmp_path / "x.md", 1, "bash", "kgprobe report -m smollm2-135m --formt md\n"),
           Block(tmp_path / "x.md", 2, "python", "import kgprobe\nkgprobe.load_results('nowhere/')\n"),
           Block(tmp_path / "x.md", 3, "cypher", "MATCH ()-[f:FACT]->() WHERE f.score__smollm2_135m__kmn_temp_sem_n5 < 1 RETURN f;\n")]
    with pytest.raises(AssertionError, match="exit 2"):
        run_shell(bad[0], world)
    with pytest.raises(AssertionError, match="wipes the graph"):
        run_shell(Block(tmp_path / "x.md", 4, "bash", "kgprobe db wipe --yes\n"), world)
    with pytest.raises(Exception, match="nowhere"):
        run_python(bad[1], world, monkeypatch)
    with pytest.raises(AssertionError, match="no FACT edge has score__smollm2_135m__kmn_temp_sem_n5"):
        run_cypher(bad[2], world, _session_graph)
