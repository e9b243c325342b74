"""Baselines of the distractor paper: Probability, Precision@n, ROUGE-L, BERTScore-style (with
the packaged MiniLM), LLM-as-judge (prompt, verdicts, the unavailable message) and KaRR —
hand-computed values and direct engine scores on a tiny random GPT-2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.probing.engine import Engine
from kgprobe.probing.measures.baselines import (
    KarrItem,
    ProbeItem,
    beam_outputs,
    bertscore_f1,
    embedding_measure,
    judge_measure,
    judge_prompt,
    karr,
    parse_verdict,
    precision_at_n,
    probability,
    rouge_l,
    rouge_measure,
)
from kgprobe.probing.measures.common import Entity, Fact
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import (
    BeamSearchRequest,
    LogProbRequest,
    NextTokenRequest,
    TokenScoresRequest,
    TokenScoresResult,
)

torch.set_num_threads(1)
FIXTURES = Path(__file__).parents[1] / "fixtures"
FACT = Fact(Entity("France"), "P36", Entity("Paris", ("Paris city",)))
ITEM = ProbeItem(FACT, ("The capital of [X] is [Y].", "[X] has its capital in [Y]."))


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model("gpt2")), device="cpu")


def test_rouge_l_by_hand() -> None:
    assert rouge_l("William Shakespeare", "W Shakespeare") == pytest.approx(0.5)
    # LCS("the city of paris", "paris is a city") = 1 ("city" or "paris"): R = 1/4, P = 1/4
    assert rouge_l("the city of Paris", "Paris is a city") == pytest.approx(0.25)
    assert rouge_l("Paris", "") == 0.0
    # beta = 2 weighs recall: R = 1, P = 1/3 -> 5 * 1/3 / (4/3 + 1) = 5/7
    assert rouge_l("Paris", "Paris is nice", beta=2.0) == pytest.approx(5 / 7)


def test_rouge_l_char_equals_the_distractor_papers_code() -> None:
    """``unit="char"`` against the output of DistFactAssessLM's own ``rouge_l`` (fixture)."""
    rows = json.loads((FIXTURES / "dfa_rouge_char" / "rouge_l.json").read_text(encoding="utf-8"))
    assert len(rows) == 25
    for r in rows:
        got = rouge_l(r["reference"], r["candidate"], unit="char")
        assert got == pytest.approx(r["f1"], abs=1e-12), r
    # the word unit differs where the paper's text and the code part: " Paris" is the word
    # "paris" (1.0) but 5 of 6 characters
    assert rouge_l("Paris", " Paris") == 1.0
    assert rouge_l("Paris", " Paris", unit="char") == pytest.approx(10 / 11)
    with pytest.raises(ConfigError, match="unit"):
        rouge_l("a", "b", unit="token")  # type: ignore[arg-type]


def test_bertscore_f1_by_hand() -> None:
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    diag = np.array([math.sqrt(0.5), math.sqrt(0.5)])
    ref = np.stack([e1, e2])
    cand = np.stack([e1, diag])
    # R = mean(max(1, .707), max(0, .707)) = (1 + .707)/2 ; P = mean(1, .707) = same
    r = (1 + math.sqrt(0.5)) / 2
    assert bertscore_f1(ref, cand) == pytest.approx(r)
    assert bertscore_f1(ref, np.zeros((0, 2))) == 0.0


def test_probability_matches_direct(gpt2: LoadedModel) -> None:
    engine = Engine(gpt2)
    [s] = probability(engine, [ITEM])
    per = []
    for ctx in ("The capital of France is", "France has its capital in"):
        rs = engine.run([LogProbRequest(ctx, " Paris"), LogProbRequest(ctx, " Paris city")])
        per.append(sum(math.exp(r.logprob) for r in rs))  # type: ignore[union-attr]
    assert s.per_cloze == pytest.approx(per, rel=1e-4)
    assert s.score == pytest.approx(sum(per) / 2, rel=1e-4)


def test_precision_at_n(gpt2: LoadedModel) -> None:
    engine = Engine(gpt2)
    ctx = "The capital of France is"
    [top] = engine.run([NextTokenRequest(ctx, 3)])
    second = top.tokens[1].strip()  # type: ignore[union-attr]
    item = ProbeItem(Fact(Entity("France"), "P36", Entity(second)), ("The capital of [X] is [Y].",))
    res = precision_at_n(engine, [item], [1, 2, 3])
    first = top.tokens[0].strip()  # type: ignore[union-attr]
    assert res[1][0].score == (1.0 if first == second else 0.0)
    assert res[2][0].score == 1.0 and res[3][0].score == 1.0
    with pytest.raises(ConfigError):
        precision_at_n(engine, [item], [0])
    # strip=False: the distractor paper's code, ``decode(x) in all_labels`` on the raw token
    tokens = top.tokens  # type: ignore[union-attr]
    raw = precision_at_n(engine, [item], [3], strip=False)[3][0].score
    assert raw == (1.0 if second in tokens[:3] else 0.0)


def test_beam_rouge_and_embedding_measures(gpt2: LoadedModel) -> None:
    engine = Engine(gpt2)
    beams = beam_outputs(engine, [ITEM], beam_width=3, max_new_tokens=4)
    assert len(beams[0]) == 2
    [b] = engine.run([BeamSearchRequest("The capital of France is", 3, 4)])
    assert beams[0][0][1] == [h.text.strip() for h in b.hypotheses]  # type: ignore[union-attr]
    [r] = rouge_measure([ITEM], beams)
    expected = [max((rouge_l(lab, h) for lab in ("Paris", "Paris city") for h in hyps), default=0.0)
                for _, hyps in beams[0]]
    assert r.per_cloze == pytest.approx(expected)
    # a beam that says the label gets ROUGE-L 1 and BERTScore 1 (packaged MiniLM)
    fixed = [[(c, ["Paris", "London"]) for c, _ in beams[0]]]
    assert rouge_measure([ITEM], fixed)[0].score == 1.0
    [e] = embedding_measure([ITEM], fixed)
    assert e.score == pytest.approx(1.0, abs=1e-6)
    [e2] = embedding_measure([ITEM], [[(c, ["Rome"]) for c, _ in beams[0]]])
    assert e2.score is not None and e2.score < 1.0


def test_llm_judge_prompt_verdicts_and_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    p = judge_prompt("The capital of France is", ["Paris", "Paris city"], "Paris, of course")
    assert p.startswith("You need to check whether the prediction")
    assert p.endswith('Query: The capital of France is\nGround truth: ["Paris", "Paris city"]\n'
                      "Prediction: Paris, of course\nCorrectness:")
    assert parse_verdict(" correct") == 1.0 and parse_verdict("Incorrect.") == 0.0
    assert parse_verdict("unsure") == 0.0
    monkeypatch.delenv("KGPROBE_JUDGE_URL", raising=False)
    with pytest.raises(ConfigError, match="KGPROBE_JUDGE_URL"):
        judge_measure([ITEM], [[]])


def test_token_scores_request_is_a_plain_labels_call(gpt2: LoadedModel, tmp_path: Path) -> None:
    """``TokenScoresRequest``: log p of every token after the first, the text encoded alone,
    as ``model(ids, labels=ids)`` averages them; one token: nothing scored (NaN mean); the
    score cache gives the same result back."""
    from kgprobe.probing.cache import ScoreCache

    tok, model = gpt2.tokenizer, gpt2.model
    text = "The capital of France is Paris"
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        loss = float(model(ids, labels=ids).loss)
    cached = Engine(gpt2, cache=ScoreCache(tmp_path / "c.sqlite"))
    [r] = cached.run([TokenScoresRequest(text)])
    assert isinstance(r, TokenScoresResult)
    assert list(r.token_ids) == ids[0].tolist() and len(r.token_logprobs) == ids.shape[1] - 1
    assert r.mean_logprob == pytest.approx(-loss, rel=1e-5)
    one = tok.decode(ids[0, :1])
    [r1] = Engine(gpt2).run([TokenScoresRequest(one)])
    assert isinstance(r1, TokenScoresResult) and r1.token_logprobs == () and math.isnan(r1.mean_logprob)
    again = Engine(gpt2, cache=ScoreCache(tmp_path / "c.sqlite"))
    assert again.run([TokenScoresRequest(text)]) == [r] and again.stats.computed == 0
    with pytest.raises(ConfigError):
        TokenScoresRequest("")


def test_karr_follows_the_reference_formulas(gpt2: LoadedModel) -> None:
    """KaRR by hand, each probability from ``model(ids, labels=...)`` as DistFactAssessLM's
    ``sentence_prob`` / ``condition_prob`` compute it (the engine is not used for the expected
    values): first token unscored, last-n-token targets, substring pairing in N, the fact's own
    subject and relation in the samples, the question template left out."""
    model, tok = gpt2.model, gpt2.tokenizer

    def p(text: str, last: int = 0) -> float:
        ids = tok(text, return_tensors="pt").input_ids
        labels = ids.clone()
        if last:
            labels[:, :-last] = -100
        with torch.no_grad():
            return float(1 / torch.exp(model(ids, labels=labels).loss))

    def cond(gamma: str, given: str) -> float:
        return p(gamma, len(tok(" " + gamma.replace(given, "").strip()).input_ids))

    def add(total: float, a: float, b: float) -> float:
        return total if math.isnan(a) or math.isnan(b) else total + a * b

    fr = Entity("Republic of France", ("France",))
    item = KarrItem(Fact(fr, "P36", Entity("Paris")),
                    ("[X] has its capital in [Y].", "What is the capital of [X]?"),
                    other_subjects=(Entity("Kingdom of England"),),
                    other_relation_templates=(("[X] is a city in [Y].", "Where is [X]?"),))
    [k] = karr(Engine(gpt2), [item], sampling="first")
    b1, b2 = "Republic of France has its capital in", "France has its capital in"
    g1, g2 = b1 + " Paris", b2 + " Paris"
    n = add(0.0, p(b1), cond(g1, b1))
    n = add(n, p(b2), cond(g1, b2) + cond(g2, b2))  # b2 is inside g1 too
    d_s = (p(b1) * cond(g1, b1) + p(b2) * cond(g2, b2)
           + p("Kingdom of England has its capital in")
           * cond("Kingdom of England has its capital in Paris", "Kingdom of England has its capital in")) / 2
    d_r = 0.0
    for a in ("Republic of France", "France"):
        d_r = add(d_r, p(a), cond(f"{a} has its capital in Paris.", a)
                  + cond(f"{a} is a city in Paris.", a))
    d_r /= 2
    assert k.karr_subject == pytest.approx(n / d_s, rel=1e-5)
    assert k.karr_relation == pytest.approx(n / d_r, rel=1e-5)
    assert k.karr == pytest.approx(math.sqrt(k.karr_subject * k.karr_relation))  # type: ignore[operator]
    assert k.knows == (k.karr > 22)  # type: ignore[operator]
    # only the others: no other subject and no other relation -> no KaRR, nothing is scored
    fresh = Engine(gpt2)
    [none] = karr(fresh, [KarrItem(item.fact, item.templates)], include_own=False)
    assert none.karr is None and none.knows is None
    assert none.karr_subject is None and none.karr_relation is None
    assert fresh.stats.computed == 0 and fresh.stats.forward_calls == 0
    # a question-only relation has no KaRR either
    [q] = karr(fresh, [KarrItem(item.fact, ("What is the capital of [X]?",))])
    assert q.karr is None and q.karr_subject is None


def test_llm_judge_through_a_real_local_endpoint(gpt2: LoadedModel,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A real OpenAI-compatible HTTP endpoint on loopback, answered by the tiny GPT-2 through
    the engine (greedy); the measure's verdicts must be those of the endpoint's texts."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from kgprobe.probing.requests import GenerateRequest

    engine = Engine(gpt2)
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = body["messages"][0]["content"]
            seen.append(prompt)
            # the tiny model has 64 positions: it reads only the end of the judge prompt
            [g] = engine.run([GenerateRequest(prompt[-40:], max_new_tokens=2)])
            text = g.text  # type: ignore[union-attr]
            out = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(out.encode())

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("KGPROBE_JUDGE_URL", f"http://127.0.0.1:{server.server_address[1]}/v1")
        monkeypatch.setenv("KGPROBE_JUDGE_MODEL", "tiny")
        beams = [[(c, ["Paris", "London"]) for c, _ in
                  beam_outputs(engine, [ITEM], beam_width=1, max_new_tokens=1)[0]]]
        [j] = judge_measure([ITEM], beams)
    finally:
        server.shutdown()
    assert len(seen) == 4  # 2 clozes x 2 beam outputs
    expected = []
    for c, hyps in beams[0]:
        verdicts = []
        for h in hyps:
            [g] = engine.run([GenerateRequest(judge_prompt(c.context, ["Paris", "Paris city"], h)[-40:],
                                              max_new_tokens=2)])
            verdicts.append(parse_verdict(g.text))  # type: ignore[union-attr]
        expected.append(max(verdicts))
    assert j.per_cloze == expected


def test_judge_verdicts_are_read_as_written() -> None:
    """Issue 11 §3: "Correctness: incorrect" was read as correct, a quoted "correct" as
    incorrect."""
    assert parse_verdict("Correctness: incorrect") == 0.0
    assert parse_verdict("Correctness: correct") == 1.0
    assert parse_verdict('"correct"') == 1.0
    assert parse_verdict("'Incorrect'.") == 0.0
    assert parse_verdict("**Correct**") == 1.0
    assert parse_verdict("The prediction is incorrect.") == 0.0
    assert parse_verdict("incorrectly phrased") == 0.0  # no verdict word at all
    assert parse_verdict("") == 0.0


#: Issue 21 §5: judge answers and the verdict a reader gives them (by hand, not by the parser).
JUDGE_PHRASINGS = [
    ("correct", 1.0), ("Correct.", 1.0), ("CORRECT", 1.0), ("  correct\n", 1.0),
    ("The prediction is correct.", 1.0), ("Yes, it is correct.", 1.0),
    ("Correct? Yes, correct.", 1.0), ("correct. The prediction does not contradict the references.", 1.0),
    ("Correctness: Correct", 1.0),
    ("not correct", 0.0), ("Not Correct", 0.0), ("NOT CORRECT.", 0.0), ("isn't correct", 0.0),
    ("It isn\u2019t correct.", 0.0), ("The prediction is not correct.", 0.0),
    ("Correct? No, incorrect.", 0.0), ("Correct? No.", 0.0), ("Is it correct? No, it is wrong.", 0.0),
    ("No, that is not correct.", 0.0), ("partially correct", 0.0), ("Partly correct.", 0.0),
    ("correct or incorrect", 0.0), ("Incorrect", 0.0), ("WRONG", 0.0), ("never correct", 0.0),
    ("Correctness:", 0.0), ("I cannot tell.", 0.0),
]


@pytest.mark.parametrize(("answer", "verdict"), JUDGE_PHRASINGS)
def test_judge_verdicts_of_negations_questions_and_case(answer: str, verdict: float) -> None:
    assert parse_verdict(answer) == verdict


def test_judge_retries_honour_retry_after_and_cache(tmp_path: Path) -> None:
    """429 with Retry-After, then 503 without it, then an answer: three requests to a real
    local HTTP server, the waits taken from the header and the backoff; the verdict cached."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from kgprobe.probing.judge import ChatJudge, VerdictCache, retry_after

    script = [(429, {"Retry-After": "3"}), (503, {}), (200, {})]
    hits: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            code, headers = script[min(len(hits), len(script) - 1)]
            hits.append(code)
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            if code == 200:
                self.wfile.write(json.dumps(
                    {"choices": [{"message": {"content": "Correctness: incorrect"}}]}).encode())

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    waits: list[float] = []
    try:
        judge = ChatJudge(f"http://127.0.0.1:{server.server_address[1]}/v1", "m", backoff_s=0.5,
                          cache=VerdictCache(tmp_path / "judge.sqlite"), sleep=waits.append)
        assert judge.complete("q") == "Correctness: incorrect"
        assert hits == [429, 503, 200]
        assert waits == [3.0, 0.5 * 2]  # Retry-After, then backoff x 2^1
        assert judge.complete("q") == "Correctness: incorrect" and len(hits) == 3  # cached
        assert parse_verdict(judge.complete("q")) == 0.0
        # a 4xx that is not a rate limit is not retried: one line
        script[:] = [(400, {})]
        with pytest.raises(ConfigError, match="HTTP 400"):
            judge.complete("other prompt")
        assert hits[-1] == 400 and len(hits) == 4
    finally:
        server.shutdown()
    assert retry_after("12") == 12.0 and retry_after(None) is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0


def test_bertscore_weights_by_hand() -> None:
    """Zero-weight rows take part in the matching but not in the averages."""
    ref = np.array([[1.0, 0.0], [0.0, 1.0]])  # second row: a [CLS]-like token, weight 0
    cand = np.array([[0.6, 0.8]])
    # R = (1*0.6 + 0*0.8) / 1 = 0.6; P = max(0.6, 0.8) = 0.8 (matched against the zero-weight
    # row); F = 2*0.48/1.4
    f = bertscore_f1(ref, cand, np.array([1.0, 0.0]), np.array([1.0]))
    assert f == pytest.approx(2 * 0.6 * 0.8 / 1.4)


def test_bertscore_equals_the_bert_score_package() -> None:
    """Issue 11 §3: kgprobe's BERTScore F1 equals ``bert_score.score`` on the same encoder
    (the packaged MiniLM, last of its 6 layers), no idf, no rescaling, within 1e-3."""
    bert_score = pytest.importorskip("bert_score", reason="bert-score (dev extra) not installed")
    from kgprobe.probing.embeddings import bertscore_embeddings, packaged_minilm_dir

    refs = ["Paris", "Barack Obama", "the United States of America", "Berlin", "New York City"]
    cands = ["Paris, France", "Obama", "United States", "London is big", "york"]
    _, _, f = bert_score.score(cands, refs, model_type=str(packaged_minilm_dir()), num_layers=6,
                               idf=False, rescale_with_baseline=False, lang="en")
    emb = bertscore_embeddings(refs + cands)
    for i in range(len(refs)):
        (vr, wr), (vc, wc) = emb[i], emb[len(refs) + i]
        assert bertscore_f1(vr, vc, wr, wc) == pytest.approx(float(f[i]), abs=1e-3), refs[i]
