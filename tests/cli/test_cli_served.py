"""Issue 40 item 1 on issue 39's backend registry: a served model from the CLI. `probe`, `score`
and `factor` score a model behind a real OpenAI-compatible server that the test starts
(llama-cpp-python's, as tests/probing/test_scoring_served.py: the default model's GGUF file), picked
through the backend registry (`--backend openai-completions --model-arg base_url=...`) or by
its URL (`--model http://.../v1`). Every score is compared with the in-process transformers
backend on the same GGUF file, conditioned on the BOS token the server is told to prepend, to
the tolerances test_scoring_served.py measured. A real local HTTP server that completes text
but returns no prompt log-probabilities is refused in one line, exit 2."""

from __future__ import annotations

import json
import math
import os
import statistics
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cli_support import clean_env, kgprobe
from probe_world import REF, load
from served_support import BOS_FIX, BOS_TEXT, KEY, MEDIAN_TOL, TOKEN_TOL, _llama_server

from kgprobe.graph import probe_runs as pr
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import LoadedModel, from_model, load_model
from kgprobe.probing.requests import LogProbRequest, LogProbResult

REPO = Path(__file__).resolve().parents[2]
FACTOR_CSV = REPO / "tests" / "fixtures" / "factor" / "news_factor_sample.csv"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server of tests/probing/test_scoring_served.py (its BOS fix included), for this module."""
    with _llama_server(tmp_path_factory.mktemp("llama") / "server.log", BOS_FIX) as base:
        yield base


@pytest.fixture(scope="module")
def local() -> LoadedModel:
    """The in-process reference: the same GGUF file de-quantized to fp32 by transformers, with
    the token the server prepends (<|endoftext|>) as BOS before every prompt."""
    lm = load_model("smollm2-135m", device="cpu")
    lm.tokenizer.bos_token = BOS_TEXT
    return from_model(lm.model, lm.tokenizer, name="smollm2-bos-reference", bos_policy="always")


def _within_tolerance(gaps: list[float]) -> None:
    """test_scoring_served.py's acceptance: median gap under MEDIAN_TOL, 80% under TOKEN_TOL."""
    gaps = sorted(gaps)
    print(f"served vs in-process over {len(gaps)} values: median {gaps[len(gaps) // 2]:.4f}, "
          f"largest {gaps[-1]:.4f} nats")
    assert gaps[len(gaps) // 2] < MEDIAN_TOL
    assert sum(g < TOKEN_TOL for g in gaps) >= 0.8 * len(gaps)


def _stored(graph: Any, prop: str) -> dict[str, float]:
    return {r["key"]: float(r["score"]) for r in pr.measure_rows(graph, {"score": prop})
            if r.get("score") is not None}


def test_probe_a_served_model_through_the_backend_registry(
        graph: Any, kgprobe_env: dict[str, str], served: str, local: LoadedModel) -> None:
    """`probe --backend openai-completions --model-arg base_url=...` writes per-fact
    probabilities equal to the in-process backend's on the same facts (log scale, the served
    test's tolerances); the run records the backend and the server's model id, which `ladder`
    then takes as `-m`."""
    from kgprobe.probing.run import probe

    load(graph)
    env = {**kgprobe_env, "KGPROBE_API_KEY": KEY}
    args = ["--measure", "probability", "-r", "P36", "-r", "P27", "--sample", "0", "--at", REF,
            "--max-labels", "1", "--no-cache", "--json"]
    r = kgprobe("probe", "--backend", "openai-completions", "--model-arg", f"base_url={served}",
                "--model-arg", "model=smollm2-135m-q4_1", *args, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["score_properties"] == ["score__smollm2_135m_q4_1__probability_o1"]
    got = _stored(graph, doc["score_properties"][0])
    run = [x for x in pr.list_runs(graph) if x.get("model_key") == "smollm2_135m_q4_1"]
    assert run and run[0]["model_kind"] == "openai-completions"

    ref = probe(local, model_name="smollm2-bos-reference", relations=("P36", "P27"), sample=None,
                measures=("probability",), at=REF, max_object_labels=1, cache=False,
                progress=False, graph=graph)
    want = _stored(graph, ref.score_properties[0])
    assert set(got) == set(want) and len(want) >= 10
    assert all(v > 0 for v in [*got.values(), *want.values()])
    _within_tolerance([abs(math.log(got[k]) - math.log(want[k])) for k in want])

    # the URL form names the same model on the same server: the same configuration, so every
    # fact is already scored (nothing rescored, nothing new written)
    again = kgprobe("probe", "--model", served, *args, env=env, timeout=900)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["scored"] == 0
    assert _stored(graph, doc["score_properties"][0]) == got

    # ladder takes the served model by the server's model id, beside two local probes
    probe(local, model_name="reference-copy", relations=("P36", "P27"), sample=None,
          measures=("probability",), at=REF, max_object_labels=1, cache=False, progress=False,
          graph=graph)
    lad = kgprobe("ladder", "-m", "smollm2-135m-q4_1", "-m", "smollm2-bos-reference", "-m",
                  "reference-copy", "--measure", "probability", "--json", env=env)
    assert lad.returncode == 0, lad.stderr
    rungs = {r["model_key"]: r for r in json.loads(lad.stdout)["rungs"]}
    assert rungs["smollm2_135m_q4_1"]["overall"]["mean"] == pytest.approx(statistics.fmean(got.values()))
    assert rungs["reference_copy"]["overall"]["mean"] == pytest.approx(statistics.fmean(want.values()))


def test_score_a_served_model_by_its_url(served: str, local: LoadedModel, tmp_path: Path) -> None:
    """`score --model URL` (and the registry form): per-token log-probs of the candidates equal
    the in-process backend's within the served test's tolerances; the ranking is the same."""
    env = clean_env(KGPROBE_API_KEY=KEY, KGPROBE_HOME=str(tmp_path / "home"),
                    PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    cases = [("The capital of France is", [" Paris", " London"]),
             ("Albert Einstein was born in", [" Ulm", " the city of Paris"])]
    gaps: list[float] = []
    for n, (context, candidates) in enumerate(cases):
        how = (["--model", served] if n == 0 else
               ["--backend", "openai-completions", "--model-arg", f"base_url={served}"])
        r = kgprobe("score", context, *candidates, *how, "--no-cache", "--json", env=env)
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)
        ref = Engine(local).run([LogProbRequest(context, c) for c in candidates])
        for row, loc in zip(rows, ref, strict=True):
            assert isinstance(loc, LogProbResult)
            assert "".join(row["tokens"]) == row["candidate"]
            assert len(row["token_logprobs"]) == len(loc.token_logprobs)
            gaps += [abs(a - b) for a, b in zip(row["token_logprobs"], loc.token_logprobs, strict=True)]
        want_rank = sorted(range(len(ref)), key=lambda i: -ref[i].logprob)  # type: ignore[union-attr]
        assert [rows[i]["rank"] for i in want_rank] == list(range(1, len(rows) + 1))
    _within_tolerance(gaps)


def test_runs_against_two_servers_record_each_address(
        graph: Any, kgprobe_env: dict[str, str], served: str, tmp_path: Path) -> None:
    """A served model's run records the server's address (issue 40, round 3): the same model id
    reached at two addresses gives two runs told apart by their recorded ``model_base_url``
    (in the ProbeRun and in results.json) and fingerprint; the recorded address keeps neither
    the API key nor a password given in the URL's user info."""
    load(graph)
    env = {**kgprobe_env, "KGPROBE_API_KEY": KEY}
    port = urlsplit(served).port
    password = "pw-in-the-url-not-a-secret"
    other = f"http://kg:{password}@localhost:{port}/v1"  # the same server, another address
    args = ["--measure", "probability", "-r", "P36", "--per-relation", "2", "--at", REF,
            "--max-labels", "1", "--no-cache", "--json"]
    keys = []
    for url in (served, other):
        r = kgprobe("probe", "--model", url, *args, env=env, timeout=900)
        assert r.returncode == 0, r.stderr
        keys.append(json.loads(r.stdout)["model_key"])
    runs = {x["model_key"]: x for x in pr.list_runs(graph)}
    assert keys[0] != keys[1] and set(keys) <= set(runs)
    first, second = runs[keys[0]], runs[keys[1]]
    assert first["model"] == second["model"] == "smollm2-135m-q4_1"
    assert first["model_base_url"] == served
    assert second["model_base_url"] == f"http://localhost:{port}/v1"
    assert first["model_fingerprint"] != second["model_fingerprint"]

    out = tmp_path / "report"
    r = kgprobe("report", "-m", keys[0], "--vs", keys[1], "--measure", "probability",
                "--output-path", str(out), env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "results.json").read_text())
    urls = {m["model_key"]: m["model_base_url"] for m in doc["models"]}
    assert urls == {keys[0]: [served], keys[1]: [f"http://localhost:{port}/v1"]}
    recorded = json.dumps([first, second], default=str) + (out / "results.json").read_text()
    assert KEY not in recorded and password not in recorded


def test_demo_and_distractors_take_a_served_model(
        graph: Any, kgprobe_env: dict[str, str], served: str) -> None:
    """`demo` and `distractors` (appropt) pick their model as `probe` does (issue 40, round 3):
    `--backend openai-completions --model-arg base_url=...` or a URL as `--model`. appropt
    generates candidates by beam search, which a completions server does not serve: one line
    naming the request kind, exit 2 (before: the URL was an unknown model name). A server that
    gives no prompt log-probabilities is refused in one line by both commands, the demo before
    it ingests anything (the demo's graph load takes minutes on a busy machine; its served
    probe is `probe`'s code path, tested above)."""
    from distractor_world import FRANCE

    load(graph)
    env = {**kgprobe_env, "KGPROBE_API_KEY": KEY}
    r = kgprobe("distractors", FRANCE, "P36", "-s", "appropt", "-n", "3", "--model", served,
                env=env, timeout=900)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: backend 'openai-completions' does not serve "
                               "BeamSearchRequest (it serves: LogProbRequest)"), r.stderr

    facts = graph.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n")[0]["n"]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _NoLogprobs)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        for args in (["distractors", FRANCE, "P36", "-s", "appropt", "--backend", "openai-completions",
                      "--model-arg", f"base_url={base}"],
                     ["demo", "--backend", "openai-completions", "--model-arg", f"base_url={base}"],
                     ["demo", "--model", base, "--no-cache"]):
            r = kgprobe(*args, env=env)
            assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
            assert r.stderr.startswith(f"error: openai-completions: {base}/completions returned no "
                                       "log-probabilities"), (args, r.stderr)
    finally:
        httpd.shutdown()
    assert graph.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n")[0]["n"] == facts  # nothing ingested


#: FACTOR items in the official CSV layout, short (the news file's prefixes are hundreds of
#: tokens: minutes per item on a busy 2-core machine through a one-thread server). Not "Water
#: is made of hydrogen and": after it the server's distribution is test_scoring_served.py's
#: documented outlier (4.5 nats), and here it would shift all four completions of the item
SHORT_FACTOR = """,turncated_prefixes,completion,contradiction_0,contradiction_1,contradiction_2
0,The capital of France is,Paris.,Lyon.,Berlin.,Madrid.
1,Berlin is the capital of,Germany.,France.,Italy.,Spain.
2,Albert Einstein was born in the city of,Ulm.,Paris.,Vienna.,Boston.
"""


def test_factor_a_served_model(served: str, local: LoadedModel, tmp_path: Path) -> None:
    """`factor FILE --backend openai-completions ...`: each item's mean per-token log-probs of
    its completions equal the in-process backend's within the served test's tolerances."""
    from kgprobe.app.factor import run_factor_file

    items = tmp_path / "factor.csv"
    items.write_text(SHORT_FACTOR, encoding="utf-8")
    env = clean_env(KGPROBE_API_KEY=KEY, KGPROBE_HOME=str(tmp_path / "home"),
                    PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    r = kgprobe("factor", str(items), "--backend", "openai-completions", "--model-arg",
                f"base_url={served}", "--model-arg", "timeout=300", "--json", env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["model"] == "smollm2-135m-q4_1" and doc["items"] == 3
    ref = run_factor_file(items, local, progress=False)
    gaps = [abs(a - b) for s, w in zip(doc["per_item"], ref["per_item"], strict=True)
            for a, b in zip(s["scores"], w["scores"], strict=True)]
    assert len(gaps) == 3 * 4
    _within_tolerance(gaps)


class _NoLogprobs(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that completes text but gives no log-probabilities (as
    some hosted APIs answer ``echo`` with ``logprobs``: the field left null)."""

    asked: list[dict[str, Any]] = []

    def _send(self, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self._send({"object": "list", "data": [{"id": "plain-model", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).asked.append(body)
        self._send({"object": "text_completion", "model": "plain-model",
                    "choices": [{"index": 0, "text": " 8", "logprobs": None,
                                 "finish_reason": "length"}]})

    def log_message(self, *args: Any) -> None:
        pass


def test_a_server_without_prompt_logprobs_is_refused_in_one_line(tmp_path: Path) -> None:
    """probe, score and factor refuse the server in one line naming it, exit 2, before any graph
    is contacted (the managed server of KGPROBE_HOME is never started)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _NoLogprobs)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    env = clean_env(KGPROBE_HOME=str(tmp_path / "home"),
                    PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    try:
        for args in (["probe", "--model", base, "--no-cache"],
                     ["probe", "--backend", "openai-completions", "--model-arg", f"base_url={base}"],
                     ["score", "The capital of France is", " Paris", "--model", base, "--no-cache"],
                     ["factor", str(FACTOR_CSV), "--model", base]):
            r = kgprobe(*args, env=env)
            assert r.returncode == 2, (args, r.stdout, r.stderr)
            assert r.stderr.startswith(f"error: openai-completions: {base}/completions returned no "
                                       "log-probabilities of the prompt's tokens"), (args, r.stderr)
            assert "cannot be probed" in r.stderr
            assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    finally:
        httpd.shutdown()
    # what kgprobe asked for: the prompt echoed with its log-probabilities
    assert _NoLogprobs.asked and all(b["echo"] is True and b["logprobs"] >= 1 for b in _NoLogprobs.asked)
    assert not (tmp_path / "home" / "server.json").exists()


def test_unknown_backend_and_bad_arguments_are_one_line(tmp_path: Path) -> None:
    """A backend the registry does not have, a transformers backend named for a server, and an
    argument the backend does not take: one line each, exit 2, naming what is known."""
    env = clean_env(KGPROBE_HOME=str(tmp_path / "home"),
                    PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    for args, text in (
        (["--backend", "no-such"], "error: unknown backend 'no-such'; choose from: hf-causal, "
                                    "hf-masked, hf-seq2seq, openai-completions"),
        (["--backend", "hf-causal"], "error: backend 'hf-causal' is chosen by the transformers loader"),
        (["--backend", "openai-completions", "--model-arg", "base_url=http://127.0.0.1:9/v1",
          "--model-arg", "temprature=0"],
         "error: backend 'openai-completions': unknown --model-arg temprature; it takes: base_url, "
         "model=None"),
        (["--backend", "openai-completions"], "error: backend 'openai-completions' needs "
                                               "--model-arg base_url=..."),
    ):
        r = kgprobe("score", "The capital of France is", " Paris", *args, env=env)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith(text), (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
