"""kgprobe's outside examples (examples/kgprobe-*) installed as packages for a test, shared by
tests/plugins/ and tests/cli/: into a folder of their own, never into the venv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pip_install(src: Path, target: Path) -> None:
    """``pip install --no-deps --target``: into a folder of its own, never into the venv."""
    work = target.parent / f"{src.name}-src"
    shutil.copytree(src, work)  # the build writes build/ and *.egg-info next to the sources
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                        "--no-build-isolation", "--target", str(target), str(work)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def install_example(factory: pytest.TempPathFactory, package: str) -> Path:
    """examples/kgprobe-NAME pip-installed (:func:`pip_install`) into a temporary folder of
    its own, its entry points written: the folder, for ``PYTHONPATH``."""
    target = factory.mktemp(f"{package}-site") / "site"
    pip_install(REPO / "examples" / package, target)
    module = package.replace("-", "_")
    assert list(target.glob(f"{module}-0.1.0.dist-info/entry_points.txt"))
    return target


def with_path(env: dict[str, str], *paths: Path) -> dict[str, str]:
    return {**env, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(REPO)])}
