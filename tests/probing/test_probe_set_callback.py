"""The training callback (issue 42 #4): a real ``transformers.Trainer`` trains a tiny GPT-2 for
a few steps; ``ProbeSetCallback`` scores a probe set at the configured steps and logs the
per-relation figures through the Trainer, and each logged value is what ``kgprobe.probe_set``
gives for the model as saved at that step (its checkpoint, scored on its own afterwards)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from probe_world import REF, load
from tiny_models import TinyModel
from trainer_support import _Texts


def _figures(entry: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in entry.items() if k.startswith("kgprobe/") and k != "kgprobe/seconds"}


def test_callback_logs_the_probe_sets_figures_at_the_configured_steps(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    import kgprobe
    from kgprobe.callbacks import ProbeSetCallback

    load(graph)
    pset = tmp_path / "set.parquet"
    kgprobe.export_set(pset, sample=None, n=2, strategy="random", at=REF, progress=False)
    path = tiny_model("gpt2")
    tok = AutoTokenizer.from_pretrained(path)
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path)
    args = TrainingArguments(output_dir=str(tmp_path / "train"), max_steps=4, per_device_train_batch_size=4,
                             learning_rate=5e-3, save_strategy="steps", save_steps=2, logging_steps=100,
                             report_to="none", use_cpu=True, disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=_Texts(tok), processing_class=tok)
    cb = ProbeSetCallback(pset, every=2).attach(trainer)
    trainer.train()

    logged = [h for h in trainer.state.log_history if "kgprobe/all/mean" in h]
    assert [h["step"] for h in logged] == [2, 4]
    assert all(h["kgprobe/seconds"] > 0 for h in logged)
    assert cb.last_step == 4 and cb.last is not None
    assert _figures(logged[0]) != _figures(logged[1])  # the model changed between the calls

    for entry in logged:  # each step's checkpoint scored on its own, after training
        ckpt = AutoModelForCausalLM.from_pretrained(tmp_path / "train" / f"checkpoint-{entry['step']}")
        direct = kgprobe.probe_set(pset, ckpt, tokenizer=tok, cache=False, progress=False)
        want = {f"kgprobe/{key}/{name}": v for key, figs in direct.figures().items()
                for name, v in figs.items() if v is not None}
        got = _figures(entry)
        assert set(got) == set(want) and "kgprobe/P35/mean" in got
        for k, v in want.items():
            assert abs(got[k] - v) <= 1e-5, (entry["step"], k, got[k], v)


def test_callback_leaves_the_model_training_and_checks_its_options(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import kgprobe
    from kgprobe.callbacks import ProbeSetCallback
    from kgprobe.errors import ConfigError

    load(graph)
    pset = tmp_path / "set.parquet"
    kgprobe.export_set(pset, sample=None, n=2, strategy="random", at=REF, progress=False)
    path = tiny_model("gpt2")
    model = AutoModelForCausalLM.from_pretrained(path)
    model.train()
    logs = ProbeSetCallback(pset, every=1).score(model, AutoTokenizer.from_pretrained(path), 1)
    assert model.training and "kgprobe/all/mean" in logs
    for bad in (0, -2, 1.5):
        with pytest.raises(ConfigError, match="every"):
            ProbeSetCallback(pset, every=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tokenizer"):
        ProbeSetCallback(pset, every=1).score(model, None, 1)


def test_import_kgprobe_does_not_import_the_trainer() -> None:
    """The callback is an optional import: ``import kgprobe`` (and its API) load neither the
    callback module nor transformers' Trainer."""
    code = ("import sys, kgprobe; kgprobe.probe_set; "
            "print('kgprobe.callbacks' in sys.modules, 'transformers.trainer' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
