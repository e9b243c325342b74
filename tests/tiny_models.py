"""Tiny random models built once per test process and shared, read-only, by every test file.

Building one (a tokenizer trained on a few sentences, a model saved and read back) costs a
second or more; dozens of test files used to build the same seeded models in fixtures of their
own. ``tiny_model(kind, positions=64, name=None)`` builds each distinct model once, into the
session's temporary folder, and gives every later caller the same directory.

tests/conftest.py loads this module as a plug-in (``pytest_plugins``), so every test may ask
for the fixture ``tiny_model``; the cache is this module's dictionary. Under pytest-xdist each
worker builds its own copies.

The directories are shared: a test must never write into one (copy it first, as
tests/probing/test_measure_registry.py does); a test that needs to keeps building its own. The
fixture checks this at the end of the session: a built directory whose files changed is an
error there, naming the directory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _measures_models import build_tiny_nli
from _scoring_models import build

#: kinds beyond _scoring_models.build's (gpt2, llama, bert, t5; a long-context GPT-2 is
#: tiny_model("gpt2", positions=4096))
_OTHER_BUILDERS: dict[str, Callable[[Path], Path]] = {
    "nli": build_tiny_nli,  # a BERT sequence classifier with MNLI's labels
}

#: the fixture's value: ``tiny_model(kind, positions=64, name=None) -> Path``
TinyModel = Callable[..., Path]

#: (kind, positions, name) -> the built directory, for the whole test process
_BUILT: dict[tuple[str, int, str], Path] = {}
#: the built directory -> its files' digests as built
_AS_BUILT: dict[Path, dict[str, str]] = {}


def _digests(path: Path) -> dict[str, str]:
    return {str(f.relative_to(path)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(path.rglob("*")) if f.is_file()}


def tiny_model_dir(factory: pytest.TempPathFactory, kind: str, positions: int = 64,
                   name: str | None = None) -> Path:
    """The directory of the tiny ``kind`` model, built on first use. ``name`` is the
    directory's own name (default: ``kind``), which kgprobe takes as the model key, so a test
    that expects a key (``tinygpt``) asks for that name; ``positions`` is the GPT-2's context."""
    leaf = name or kind
    key = (kind, positions, leaf)
    if key not in _BUILT:
        path = factory.mktemp(f"tiny-{kind}-{positions}") / leaf
        if kind in _OTHER_BUILDERS:
            _OTHER_BUILDERS[kind](path)
        else:
            build(kind, path, positions=positions)
        _BUILT[key] = path
        _AS_BUILT[path] = _digests(path)
    return _BUILT[key]


@pytest.fixture(name="tiny_model", scope="session")
def tiny_model_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyModel]:
    """``tiny_model(kind, positions=64, name=None) -> Path``: see :func:`tiny_model_dir`."""

    def get(kind: str, positions: int = 64, name: str | None = None) -> Path:
        return tiny_model_dir(tmp_path_factory, kind, positions, name)

    yield get
    changed = [str(path) for path, built in _AS_BUILT.items() if _digests(path) != built]
    for path in changed:  # reported once, by the first module's teardown
        del _AS_BUILT[Path(path)]
    if changed:
        pytest.fail(f"a test wrote into a shared tiny model (copy it first): {', '.join(changed)}")
