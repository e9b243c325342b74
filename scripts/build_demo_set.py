"""Regenerate the probe set shipped with kgprobe (``kgprobe/data/demo-set.parquet``,
``kgprobe probe --set demo``): start a managed graph server in a fresh temporary home, load the
bundled demo graph and kgprobe's templates, export the demo's sample (kgprobe.api.export_demo_set)
and stop the server. Needs what the managed server needs (the arcadedb-embedded wheel's Java).

    python scripts/build_demo_set.py [--out kgprobe/data/demo-set.parquet]

Run it when the set's layout or the scoring code it was exported for changes (the test
tests/probing/test_probe_set_demo.py says so); docs/probe-sets.md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from kgprobe.api import DEMO_SET_FILE, export_demo_set
from kgprobe.config import Settings
from kgprobe.graph.server import ManagedServer, free_port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEMO_SET_FILE, help="the set file to write")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgprobe-demo-set-") as home:
        settings = Settings(home=Path(home), bolt_port=free_port(), http_port=free_port(), heap="1g")
        server = ManagedServer(settings)
        server.start()
        try:
            header = export_demo_set(args.out, settings=settings, progress=True)
        finally:
            server.stop()
    print(json.dumps({"file": str(args.out), "bytes": args.out.stat().st_size, "facts": header["facts"],
                      "content_hash": header["content_hash"], "schema": header["schema"]}))


if __name__ == "__main__":
    main()
