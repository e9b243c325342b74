"""--config FILE (kgprobe.runconfig): a command's options from YAML or TOML, checked against the
real CLI command's parameters (no graph, no model)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from kgprobe.cli import app
from kgprobe.errors import ConfigError
from kgprobe.runconfig import config_defaults


def _params(command: str) -> list[object]:
    group = typer.main.get_command(app)
    return list(group.commands[command].params)  # type: ignore[attr-defined]


def test_yaml_keys_become_the_probe_options(tmp_path: Path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text("model: smollm2-135m\nrelation: P17\nbatch-facts: 32\nmax_labels: 1\n"
                   "model_args: {revision: main, trust_remote_code: true}\nforce: true\nn: 3\n",
                   encoding="utf-8")
    got = config_defaults(cfg, _params("probe"))
    assert got == {"model": "smollm2-135m", "relation": ["P17"], "batch_facts": 32, "max_labels": 1,
                   "model_arg": ["revision=main", "trust_remote_code=true"], "force": True, "n": 3}


def test_toml_and_refusals(tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    cfg.write_text('model = "m"\nrelation = ["P17", "P36"]\nsample = 100\n', encoding="utf-8")
    assert config_defaults(cfg, _params("probe")) == {"model": "m", "relation": ["P17", "P36"], "sample": 100}
    cfg.write_text('model = "m"\nbatch_fact = 3\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown key 'batch_fact' \(did you mean 'batch_facts'\?\)"):
        config_defaults(cfg, _params("probe"))
    cfg.write_text('seed = 1\nseed_ = 2\n[probe]\nx = 1\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown keys 'seed_'.*'probe'"):
        config_defaults(cfg, _params("probe"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        config_defaults(bad, _params("probe"))
    bad.write_text("- a\n- b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        config_defaults(bad, _params("report"))
    bad.write_text("batch-facts: 1\nbatch_facts: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="given twice"):
        config_defaults(bad, _params("probe"))


def test_every_command_that_computes_reads_a_config(tmp_path: Path) -> None:
    """demo, factor and ladder take --config like probe and report: keys checked against each
    command's own options (factor's CSV argument included), unknown keys refused."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: smollm2-135m\nper_relation: 12\ndtype: bfloat16\n", encoding="utf-8")
    assert config_defaults(cfg, _params("demo")) == {"model": "smollm2-135m", "per_relation": 12,
                                                     "dtype": "bfloat16"}
    cfg.write_text("file: expert.csv\nmax-length: 1024\nlimit: 20\n", encoding="utf-8")
    assert config_defaults(cfg, _params("factor")) == {"file": "expert.csv", "max_length": 1024, "limit": 20}
    cfg.write_text("model: [a, b, c]\nout: lad\n", encoding="utf-8")
    assert config_defaults(cfg, _params("ladder")) == {"models": ["a", "b", "c"], "out": "lad"}
    cfg.write_text("sample: 5\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key 'sample'; known: .*per_relation"):
        config_defaults(cfg, _params("demo"))
