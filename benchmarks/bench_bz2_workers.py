"""A multi-stream .bz2 (or multi-frame .zst) read by 1 and 2 workers, side by side: parse alone and ``ingest --bulk``.

    python benchmarks/bench_bz2_workers.py --entities 8000 --workers 1 2
    python benchmarks/bench_bz2_workers.py --entities 8000 --workers 1 2 --codec zst

The realistic dump of `benchmarks/gen_dump.py` (lines built from the real entity JSON of the
fixtures) is written as text, then compressed as a parallel bzip2 writes it (Wikidata's
``latest-all.json.bz2``): one stream per ~900 kB of text (``--stream-kb``), concatenated; and
once more as a single stream, the file a plain ``bzip2`` writes, which the workers cannot split
(decompressed by the main process, parsed in the workers). For each file and number of workers:
the wall and CPU seconds (main process, workers) of reading every record (``load_json``), and of
``kgprobe ingest FILE --bulk DIR`` writing the import files (no server: a Neo4j named, never
reached). MB/s are of the uncompressed JSON. Figures go to docs/benchmarks.md.

``--codec zst`` does the same with Zstandard (the ``zst`` extra): one frame per ``--stream-kb``
of text, concatenated, as ``pzstd`` writes them, and once as the single frame a plain ``zstd``
writes.
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_bulk_workers import run as bulk_run  # noqa: E402
from benchmarks.gen_dump import write_realistic_dump  # noqa: E402


def _zst(data: bytes) -> bytes:
    """One zstd frame of ``data`` (level 3, zstd's default), for a worker process."""
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(data)


#: per ``--codec``: the suffix and a function compressing bytes into one stream (frame)
CODECS = {"bz2": (".bz2", bz2.compress), "zst": (".zst", _zst)}


def multistream(text: Path, out: Path, stream_bytes: int, codec: str = "bz2") -> int:
    """``text`` compressed one stream (frame) per ``stream_bytes`` (cut anywhere, mid-line as
    a parallel bzip2 or pzstd cuts), concatenated; the number of streams."""
    data = text.read_bytes()
    pieces = [data[i:i + stream_bytes] for i in range(0, len(data), stream_bytes)]
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        out.write_bytes(b"".join(pool.map(CODECS[codec][1], pieces, chunksize=4)))
    return len(pieces)


def parse(path: Path, workers: int) -> dict[str, float]:
    """Wall and CPU seconds (here, and the workers') to read every record of ``path``."""
    from kgprobe.loaders.wikidata_json import load_json

    cpu0, kids0 = time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    n = sum(1 for _ in load_json(path, workers=workers))
    wall = time.perf_counter() - t0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"records": n, "wall_s": round(wall, 2), "main_cpu_s": round(time.process_time() - cpu0, 2),
            "workers_cpu_s": round(kids.ru_utime + kids.ru_stime - kids0.ru_utime - kids0.ru_stime, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entities", type=int, default=8_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--stream-kb", type=int, default=900, help="text per bzip2 stream (zstd frame)")
    ap.add_argument("--codec", choices=sorted(CODECS), default="bz2")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of all the workers (a loaded machine); ratios of the best walls")
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kgprobe-bench-bz2-", dir=args.tmp))
    try:
        text = tmp / "dump.json"
        stats = write_realistic_dump(text, args.entities, args.seed)
        mb = text.stat().st_size / 1e6
        suffix, compress = CODECS[args.codec]
        multi = tmp / f"multi.json{suffix}"
        streams = multistream(text, multi, args.stream_kb * 1000, args.codec)
        single = tmp / f"single.json{suffix}"
        single.write_bytes(compress(text.read_bytes()))
        print(json.dumps({"codec": args.codec, "dump": stats, "json_mb": round(mb, 1), "streams": streams,
                          "multi_mb": round(multi.stat().st_size / 1e6, 1),
                          "loadavg": os.getloadavg()}), flush=True)
        for name, path in (("multi-stream", multi), ("single-stream", single)):
            walls: dict[tuple[str, int], float] = {}
            for n in [n for _ in range(args.repeat) for n in args.workers]:
                row = {"file": name, "what": "parse", "workers": n, **parse(path, n)}
                walls["parse", n] = min(walls.get(("parse", n), 1e9), float(row["wall_s"]))
                print(json.dumps({**row, "mb_per_s": round(mb / float(row["wall_s"]), 1),
                                  "loadavg": os.getloadavg()[0]}), flush=True)
                bulk = bulk_run(ROOT, path, tmp / f"import-{n}", n)
                walls["bulk", n] = min(walls.get(("bulk", n), 1e9), float(bulk["wall_s"]))  # type: ignore[arg-type]
                print(json.dumps({"file": name, "what": "ingest --bulk", **bulk,
                                  "mb_per_s": round(mb / float(bulk["wall_s"]), 1),  # type: ignore[arg-type]
                                  "loadavg": os.getloadavg()[0]}), flush=True)
            lo, hi = min(args.workers), max(args.workers)
            print(json.dumps({"file": name, f"ratio_{hi}_vs_{lo}": {
                w: round(walls[w, lo] / walls[w, hi], 2) for w in ("parse", "bulk")}}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
