"""Loader throughput alone (no graph): statements per second and peak memory.

Separates the parse cost from the write cost the ingest benchmark measures. Uses a generated
JSON dump (``gen_dump.write_dump``) unless a path is given.

    python benchmarks/bench_loaders.py --statements 1000000 [--path dump.json.gz] [--seed 0]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_dump import write_dump  # noqa: E402

from kgprobe.loaders import open_source  # noqa: E402
from kgprobe.records import EntityRecord, FactRecord, SkipRecord  # noqa: E402


def measure(path: Path) -> dict[str, float]:
    start = time.perf_counter()
    facts = entities = skipped = types = 0
    for r in open_source(path):
        if isinstance(r, FactRecord):
            facts += 1
        elif isinstance(r, EntityRecord):
            entities += 1
            types += len(r.types) + len(r.superclasses)
        elif isinstance(r, SkipRecord):
            skipped += r.count
    seconds = time.perf_counter() - start
    statements = facts + types + skipped
    return {
        "seconds": seconds,
        "entities": entities,
        "facts": facts,
        "statements": statements,
        "statements_per_s": statements / seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--statements", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--path", type=Path, default=None, help="an existing dump instead")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path
        if path is None:
            path = Path(tmp) / "dump.json.gz"
            t0 = time.perf_counter()
            write_dump(path, args.statements, args.seed)
            print(f"generated {path.name} in {time.perf_counter() - t0:.1f} s")
        m = measure(path)
    print(
        f"{path.name}: {m['statements']:,.0f} statements ({m['facts']:,.0f} facts, "
        f"{m['entities']:,.0f} entities) in {m['seconds']:.1f} s = "
        f"{m['statements_per_s']:,.0f} statements/s; peak RSS {m['peak_rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
