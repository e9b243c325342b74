"""docs/tracking.md's MLflow and W&B recipes run as written (issue 40: they read keys that
results.json no longer had, and failed on their first line). The report directory is real
(`kgprobe report --out` on the test server); the two trackers are not dependencies, so their
modules are small recording stand-ins that keep what the recipe logs, and the test checks that
against results.json read independently."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from cli_support import kgprobe
from report_worlds import hostile_graph_fixture  # noqa: F401  (the fixture hostile_graph: scored facts)

DOC = Path(__file__).resolve().parents[2] / "docs" / "tracking.md"


def _blocks() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    return {("mlflow" if "import mlflow" in b else "wandb"): b for b in blocks}


class Recorder:
    """Keeps every call: ``calls[name] -> [(args, kwargs)]``; attributes are recorders too."""

    def __init__(self, calls: dict[str, list[Any]], name: str) -> None:
        self._calls, self._name = calls, name

    def __getattr__(self, attr: str) -> Recorder:
        return Recorder(self._calls, f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Recorder:
        self._calls.setdefault(self._name, []).append((args, kwargs))
        return self

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture()
def report_dir(hostile_graph: Any, kgprobe_env: dict[str, str], tmp_path: Path) -> Path:
    out = tmp_path / "runs" / "hand"
    r = kgprobe("report", "-m", "hand", "--out", str(out), env=kgprobe_env, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("tracker", ["mlflow", "wandb"])
def test_the_tracking_recipes_run_on_a_real_report(report_dir: Path, tracker: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pandas")
    calls: dict[str, list[Any]] = {}
    module = types.ModuleType(tracker)
    module.__getattr__ = lambda attr: Recorder(calls, f"{tracker}.{attr}")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, tracker, module)
    code = _blocks()[tracker].replace('OUT = "runs/smollm2"', f"OUT = {str(report_dir)!r}")
    exec(compile(code, f"docs/tracking.md ({tracker})", "exec"), {"__name__": "recipe"})

    doc = json.loads((report_dir / "results.json").read_text())
    overall = next(m for m in doc["models"] if m["model_key"] == "hand")["overall"]
    if tracker == "mlflow":
        (run_name,) = [kw["run_name"] for _, kw in calls["mlflow.start_run"]]
        metrics = {a[0]: a[1] for a, _ in calls["mlflow.log_metric"]}
        params = {k: v for a, _ in calls["mlflow.log_params"] for k, v in a[0].items()}
    else:
        (init,) = [kw for _, kw in calls["wandb.init"]]
        run_name, params = init["name"], init["config"]
        (summary,) = [a[0] for a, _ in calls["wandb.init.summary.update"]]
        metrics = {k.replace("/", "."): v for k, v in summary.items()}
    assert run_name == "hand kmin_temp_sem_n5"
    assert params["measure_key"] == "kmin_temp_sem_n5" and params["threshold"] == 0.5
    assert metrics["hand.all.mean"] == pytest.approx(overall["mean"])
    assert metrics["hand.all.n"] == overall["n"] == 11
