#!/usr/bin/env python3
"""Write tests/durations.json: the seconds each test file took in each half of `make test`,
from the JUnit XML files of a run (pytest --junitxml). tests/conftest.py hands the heaviest
files to the pytest-xdist workers first, so that no worker is left alone with a long file at
the end of a half. A file missing from the table only loses its place, never a test.

    .venv/bin/python -m pytest -n 2 --dist loadfile --junitxml=arcadedb.xml
    KGPROBE_TEST_SERVER=neo4j KGPROBE_TEST_SERVER_ONLY=1 .venv/bin/python -m pytest -n 2 \\
        --dist loadfile --junitxml=neo4j.xml
    .venv/bin/python scripts/test_durations.py --arcadedb arcadedb.xml --neo4j neo4j.xml
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "durations.json"


def file_seconds(junit: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of its tests), rounded to 0.1 s."""
    total: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        total[path] += float(case.get("time") or 0.0)
    return {path: round(sec, 1) for path, sec in sorted(total.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arcadedb", type=Path, required=True, help="JUnit XML of the ArcadeDB half")
    ap.add_argument("--neo4j", type=Path, required=True, help="JUnit XML of the Neo4j half")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args()
    doc = {"arcadedb": file_seconds(a.arcadedb), "neo4j": file_seconds(a.neo4j)}
    a.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for half, files in doc.items():
        print(f"{half}: {len(files)} files, {sum(files.values()):.0f} s in all")


if __name__ == "__main__":
    main()
