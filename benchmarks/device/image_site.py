"""An interpreter that sees only what the GPU machine's Python would: a bare virtual
environment (``DIR/venv``: no package at all, so the processes a benchmark starts with
``sys.executable`` see no more than it) and a folder (``DIR/site``) holding the image's
distributions (``image_packages.txt``), and those the device kit carries (``wheels.txt``) if asked,
linked from this environment. With that folder and the checkout on ``PYTHONPATH`` it fails on a
module the image lacks and the kit forgets, here, before device minutes are spent on it.

    python benchmarks/device/image_site.py [--carried] DIR    # prints DIR/venv's python
    python benchmarks/device/image_site.py --specs            # wheels.txt as NAME==VERSION (pack.sh)

``--carried`` links wheels.txt's distributions too (try_here.sh installs the real wheels
instead). :data:`STAND_INS` are always linked besides.
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

#: this environment's stand-ins for distributions the image holds under other names: the
#: image's hub client stands on httpx, .venv's newer one on httpx2 (the same role)
STAND_INS = ("httpx2", "httpcore2", "truststore")


#: what the Java kit (pack.sh with KIT=java, run.sh's neo4j step) leaves out of wheels.txt: the
#: step parses a dump and writes import files, and the Java runtime needs the room
JAVA_KIT_LEAVES = ("faiss-cpu", "lm-eval")


def norm(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower().strip()


def entries(path: Path) -> list[str]:
    """The entries of a list file: ``NAME`` or ``NAME==VERSION``, one per line, ``#`` comments."""
    lines = (ln.split("#", 1)[0].replace(" ", "").strip()
             for ln in path.read_text(encoding="utf-8").splitlines())
    return [ln for ln in lines if ln]


def listed(path: Path) -> list[str]:
    """The distribution names of a list file (versions dropped)."""
    return [e.split("==", 1)[0] for e in entries(path)]


def image_packages() -> list[str]:
    return listed(HERE / "image_packages.txt")


def carried(kit: str = "gpu") -> list[str]:
    """wheels.txt's names, less `JAVA_KIT_LEAVES` for the Java kit."""
    names = listed(HERE / "wheels.txt")
    return [n for n in names if kit != "java" or norm(n) not in JAVA_KIT_LEAVES]


def carried_specs(kit: str = "gpu") -> list[str]:
    """wheels.txt as ``NAME==VERSION`` (the version written there, else the one installed here),
    less `JAVA_KIT_LEAVES` for the Java kit."""
    kept = {norm(n) for n in carried(kit)}
    specs = []
    for spec in entries(HERE / "wheels.txt"):
        if norm(spec.split("==", 1)[0]) not in kept:
            continue
        if "==" not in spec:
            try:
                spec = f"{spec}=={md.version(spec)}"
            except md.PackageNotFoundError:
                raise SystemExit(f"image_site: {spec} has no version in wheels.txt and is not "
                                 f"installed in {sys.executable}") from None
        specs.append(spec)
    return specs


def link(out: Path, names: Iterable[str]) -> list[str]:
    """Link the top-level modules (and metadata) of each named distribution installed here into
    ``out``; the names linked. A name not installed here is left out (the image may hold
    distributions this environment does not)."""
    want = {norm(n) for n in names}
    out.mkdir(parents=True, exist_ok=True)
    done: dict[str, str] = {}  # normalized -> as named (the first of a name found on the path)
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name or norm(name) not in want or norm(name) in done:
            continue
        done[norm(name)] = name
        base = Path(str(dist.locate_file("")))
        tops = {f.parts[0] for f in dist.files or []}
        for top in tops - {"..", "__pycache__"}:
            if top.endswith(".pth") or not (base / top).exists() or (out / top).exists():
                continue
            os.symlink(base / top, out / top)
    return list(done.values())


def bare_python(out: Path) -> Path:
    """The python of a new virtual environment in ``out`` with nothing installed (not even pip)
    and no system site-packages: this interpreter's own version and standard library."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", "--clear", str(out)], check=True)
    return out / "bin" / "python"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("--carried", action="store_true", help="wheels.txt's distributions too")
    ap.add_argument("--specs", action="store_true", help="print wheels.txt as NAME==VERSION")
    ap.add_argument("--kit", choices=("gpu", "java"), default="gpu", help="the kit's wheels (--specs)")
    args = ap.parse_args()
    if args.specs:
        print("\n".join(carried_specs(args.kit)))
        return
    if args.out is None:
        ap.error("DIR is required")
    names = image_packages() + (carried() if args.carried else []) + list(STAND_INS)
    n = len(link(args.out / "site", names))
    python = bare_python(args.out / "venv")
    print(f"image_site: {n} distributions linked into {args.out / 'site'}", file=sys.stderr)
    print(python)


if __name__ == "__main__":
    main()
