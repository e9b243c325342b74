"""Loader throughput alone (no graph): statements per second and peak memory.

Separates the parse cost from the write cost the ingest benchmark measures. Uses a generated
JSON dump (``gen_dump.write_dump``) unless a path is given.

    python benchmarks/bench_loaders.py --statements 1000000 [--path dump.json.gz] [--seed 0]

``--realistic`` (issue 37) parses lines that look like the real dump's (``gen_dump.py
--realistic``: every language's terms, sitelinks, references, non-item datatypes) and sets the
parse beside its floor, measured in the same run: gunzip + ``orjson.loads`` of every line.
Both are CPU time (process time), alternated over ``--repeats`` rounds; the ratio is what
counts on a busy machine.

    python benchmarks/bench_loaders.py --realistic --entities 15000 --repeats 3 [--path real.json.gz]

``--workers N`` (issue 37 #3) times the parse alone (wall clock: the work is spread over
processes) with 1 and with N worker processes, side by side, in MB/s of uncompressed JSON and
statements/s, and their ratio; the records must be the same. A list (``--workers 4,8,16``)
times each count against the same 1-worker runs, alternated within each round.

    python benchmarks/bench_loaders.py --realistic --workers 2 [--entities 15000] [--repeats 3]
    python benchmarks/bench_loaders.py --realistic --path real.json.gz --workers 4,8,16 --repeats 2
"""


from __future__ import annotations

import argparse
import gzip
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson  # noqa: E402
from gen_dump import write_dump, write_realistic_dump  # noqa: E402

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


def parse_cpu(path: Path, **filters: object) -> tuple[float, int]:
    """CPU seconds to read every record of ``path`` (decompression included), and the
    statements they account for (facts, types and skipped statements)."""
    start = time.process_time()
    statements = 0
    for r in open_source(path, **filters):  # type: ignore[arg-type]
        if isinstance(r, FactRecord):
            statements += 1
        elif isinstance(r, EntityRecord):
            statements += len(r.types) + len(r.superclasses)
        elif isinstance(r, SkipRecord) and not r.reason.startswith("qualifier:"):
            statements += r.count  # (a qualifier without a value is no statement)
    return time.process_time() - start, statements


def floor_cpu(path: Path, gunzip: Any = gzip.open) -> tuple[float, int]:
    """CPU seconds for gunzip + ``orjson.loads`` of every entity line: what no JSON loader
    written on top of a decoder can beat. Also the uncompressed bytes. ``gunzip``: the
    standard library's (the issue's floor) or ISA-L's (``isal.igzip.open``, what kgprobe
    decompresses with: the floor of the fastest gunzip)."""
    start = time.process_time()
    size = 0
    with gunzip(path, "rb") as fh:
        for line in fh:
            size += len(line)
            s = line.strip()
            if s in (b"[", b"]", b""):
                continue
            orjson.loads(s[:-1] if s.endswith(b",") else s)
    return time.process_time() - start, size


def parse_wall(path: Path, workers: int) -> tuple[float, int]:
    """Wall seconds to read every record of ``path`` with ``workers`` processes, and the
    statements they account for. CPU seconds (this process's, and its workers') are added to
    :data:`CPU`: on a busy machine wall-clock ratios say little, the CPU says what the workers
    cost in all."""
    from kgprobe.loaders.wikidata_json import load_json

    cpu0 = time.process_time()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    statements = 0
    for r in load_json(path, workers=workers):
        if isinstance(r, FactRecord):
            statements += 1
        elif isinstance(r, EntityRecord):
            statements += len(r.types) + len(r.superclasses)
        elif isinstance(r, SkipRecord) and not r.reason.startswith("qualifier:"):
            statements += r.count
    wall = time.perf_counter() - start
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(workers, []).append((time.process_time() - cpu0, kids.ru_utime + kids.ru_stime
                                        - kids0.ru_utime - kids0.ru_stime))
    return wall, statements


def _ready(_: int) -> int:
    import kgprobe.loaders.wikidata_json  # noqa: F401 - what a worker imports to parse

    return 0


def startup(workers: int) -> tuple[float, float]:
    """Wall and CPU seconds (workers') to start ``workers`` spawn workers ready to parse: a
    cost per ingest, not per byte (what a 100 GB file never notices)."""
    from kgprobe.loaders.parallel import ordered_map

    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    for _ in ordered_map(_ready, iter(range(2 * workers)), workers):
        pass
    wall = time.perf_counter() - start
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, kids.ru_utime + kids.ru_stime - kids0.ru_utime - kids0.ru_stime


#: per number of workers: (main process CPU-s, workers' CPU-s) of each run
CPU: dict[int, list[tuple[float, float]]] = {}


def scaling(path: Path, repeats: int, counts: list[int]) -> None:
    """Parse alone with 1 worker and with each of ``counts`` worker processes, alternated within
    each round, on ``path`` and on the same lines uncompressed (then the main process has no
    gunzip to do); medians and their ratios to 1 worker."""
    from kgprobe.loaders.wikidata_json import load_json

    paths = [path]
    if path.suffix == ".gz":
        plain = path.with_suffix("")
        with gzip.open(path, "rb") as src, open(plain, "wb") as dst:
            dst.write(src.read())
        paths.append(plain)
    for p in paths:
        CPU.clear()
        reference = list(load_json(p, workers=1))
        same = {n: list(load_json(p, workers=n)) == reference for n in counts}
        del reference
        with gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb") as fh:
            mb = sum(len(line) for line in fh) / 1e6
        walls: dict[int, list[float]] = {n: [] for n in [1, *counts]}
        for _ in range(repeats):
            for n, out in walls.items():
                seconds, statements = parse_wall(p, n)
                out.append(seconds)
            print(f"  {p.name}: " + ", ".join(
                f"{n} worker{'s' if n > 1 else ''} {out[-1]:.2f} s" for n, out in walls.items()))
        t1 = statistics.median(walls[1])
        c1 = statistics.median(m + k for m, k in CPU[1])
        print(f"{p.name}: {mb:,.1f} MB uncompressed, {statements:,} statements, median of {repeats} "
              f"(wall clock):\n"
              f"  1 worker:  {t1:.2f} s, {mb / t1:,.1f} MB/s, {statements / t1:,.0f} statements/s, "
              f"{c1:.2f} CPU-s")
        for n in counts:
            tn = statistics.median(walls[n])
            main = statistics.median(m for m, _ in CPU[n])
            kids = statistics.median(k for _, k in CPU[n])
            bound = c1 / max(main, (main + kids) / n)
            up_wall, up_cpu = startup(n)
            steady = c1 / max(main, (main + kids - up_cpu) / n)
            print(f"  {n} workers: {tn:.2f} s, {mb / tn:,.1f} MB/s, {statements / tn:,.0f} "
                  f"statements/s; ratio {t1 / tn:.2f}x; the same records: {same[n]}\n"
                  f"    CPU: main process {main:.2f} + workers {kids:.2f} CPU-s: on {n} idle "
                  f"cores at best {bound:.2f}x; starting the workers alone takes {up_wall:.2f} s "
                  f"wall, {up_cpu:.2f} CPU-s: without it (a large file) at best {steady:.2f}x; "
                  f"wall without it: {t1 / max(tn - up_wall, 1e-9):.2f}x")


def realistic(path: Path, repeats: int, relations: list[str] | None) -> None:
    filters = {} if relations is None else {"relations": relations}
    from isal import igzip

    rows = []
    isal_rows = []
    for _ in range(repeats):
        floor, size = floor_cpu(path)
        fast, _ = floor_cpu(path, igzip.open)
        parse, statements = parse_cpu(path, **filters)
        rows.append((floor, parse))
        isal_rows.append((fast, parse))
        print(f"  floor {floor:.2f} CPU-s (ISA-L gunzip: {fast:.2f}), parse {parse:.2f} CPU-s: "
              f"{parse / floor:.2f}x ({parse / fast:.2f}x)")
    floor = statistics.median(f for f, _ in rows)
    parse = statistics.median(p for _, p in rows)
    ratio = statistics.median(p / f for f, p in rows)
    fast = statistics.median(f for f, _ in isal_rows)
    print(f"  with ISA-L's gunzip in the floor too: floor {fast:.2f} CPU-s, parse/floor "
          f"{statistics.median(p / f for f, p in isal_rows):.2f}x")
    mb = size / 1e6
    print(f"{path.name}: {mb:,.1f} MB uncompressed, {statements:,} statements"
          f"{'' if relations is None else ' (relations ' + ','.join(relations) + ')'}; "
          f"median of {repeats}: floor {floor:.2f} CPU-s ({mb / floor:,.1f} MB/s), parse "
          f"{parse:.2f} CPU-s ({mb / parse:,.1f} MB/s, {statements / parse:,.0f} statements/s); "
          f"parse/floor {ratio:.2f}x (each round: {', '.join(f'{p / f:.2f}' for f, p in rows)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--statements", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--path", type=Path, default=None, help="an existing dump instead")
    ap.add_argument("--realistic", action="store_true", help="real-looking lines, parse vs floor")
    ap.add_argument("--entities", type=int, default=15_000, help="with --realistic")
    ap.add_argument("--repeats", type=int, default=3, help="with --realistic")
    ap.add_argument("--relations", default=None, help="with --realistic: P19,P27,… kept only")
    ap.add_argument("--workers", default=None, metavar="N[,N...]",
                    help="with --realistic: parse alone with 1 worker and with each N worker "
                         "processes, side by side (e.g. 2, or 4,8,16 on a larger machine)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path
        if args.realistic:
            if path is None:
                path = Path(tmp) / "real.json.gz"
                stats = write_realistic_dump(path, args.entities, args.seed)
                print(f"generated {path.name}: {stats['entities']:,} entities, "
                      f"{stats['bytes'] / stats['entities']:,.0f} bytes and "
                      f"{stats['statements'] / stats['entities']:.1f} statements per entity, "
                      f"{stats['item_valued'] / stats['statements']:.1%} item-valued")
            if args.workers:
                scaling(path, args.repeats, [int(n) for n in args.workers.split(",")])
                return
            realistic(path, args.repeats, args.relations.split(",") if args.relations else None)
            return
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
