"""An interpreter that sees only what the GPU machine's Python would: a bare virtual
environment (``DIR/venv``: no package at all, so the processes a benchmark starts with
``sys.executable`` see no more than it) and a folder (``DIR/site``) holding the image's
distributions (``image_packages.txt``), and those the device kit carries (``wheels.txt``) if asked,
linked from this environment. With that folder and the checkout on ``PYTHONPATH`` it fails on a
module the image lacks and the kit forgets, here, before device minutes are spent on it.

    python benchmarks/device/image_site.py [--carried] DIR [EXTRA ...]   # prints DIR/venv's python

``--carried`` links wheels.txt's distributions too (try_here.sh installs the real wheels
instead); EXTRA names distributions linked besides (this environment's stand-ins for the image's
own, e.g. a newer hub client's HTTP library).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def listed(path: Path) -> list[str]:
    """Distribution names of a list file: one per line, ``#`` comments, ``==VERSION`` dropped."""
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line.split("==", 1)[0].strip())
    return names


def image_packages() -> list[str]:
    return listed(HERE / "image_packages.txt")


def carried() -> list[str]:
    return listed(HERE / "wheels.txt")


def link(out: Path, names: Iterable[str]) -> list[str]:
    """Link the top-level modules (and metadata) of each named distribution installed here into
    ``out``; the names linked. A name not installed here is left out (the image may hold
    distributions this environment does not)."""
    want = {_norm(n) for n in names}
    out.mkdir(parents=True, exist_ok=True)
    done = []
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name or _norm(name) not in want or _norm(name) in {_norm(d) for d in done}:
            continue
        done.append(name)
        base = Path(str(dist.locate_file("")))
        tops = {f.parts[0] for f in dist.files or []}
        for top in tops - {"..", "__pycache__"}:
            if top.endswith(".pth") or not (base / top).exists() or (out / top).exists():
                continue
            os.symlink(base / top, out / top)
    return done


def bare_python(out: Path) -> Path:
    """The python of a new virtual environment in ``out`` with nothing installed (not even pip)
    and no system site-packages: this interpreter's own version and standard library."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", "--clear", str(out)], check=True)
    return out / "bin" / "python"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--carried", action="store_true", help="wheels.txt's distributions too")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    names = image_packages() + (carried() if args.carried else []) + args.extra
    n = len(link(args.out / "site", names))
    python = bare_python(args.out / "venv")
    print(f"image_site: {n} distributions linked into {args.out / 'site'}", file=sys.stderr)
    print(python)


if __name__ == "__main__":
    main()
