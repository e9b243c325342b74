"""What a `kgprobe` command costs the test suite: a new ``python -m kgprobe.cli`` process
against one forked from the suite's fork server (tests/_kgprobe_process.py), side by side.

Each round runs the same commands both ways, alternating which way goes first, on a home of
its own that is never started (no graph server: what is timed is the process, its imports and
the command's own work). The commands are ones the suite runs many times: a refusal before the
graph (``probe --threshold nan``), ``db status --json``, and a ``score`` with a tiny random
GPT-2 built by the tests' own helper (the command loads torch, transformers and the model).

Prints the median wall seconds per command each way and their ratio, and checks that both ways
gave the same stdout, stderr and exit code.

    PYTHONPATH=$PWD:$PWD/tests python benchmarks/bench_test_cli.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import _kgprobe_process as kp  # noqa: E402
from _scoring_models import build  # noqa: E402

from kgprobe.graph.server import free_port  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-test-cli-"))
    model = build("gpt2", tmp / "gpt2")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEO4J_", "KGPROBE_"))}
    env.update(KGPROBE_HOME=str(tmp / "home"), KGPROBE_BOLT_PORT=str(free_port()),
               KGPROBE_HTTP_PORT=str(free_port()), KGPROBE_CONFIG=str(tmp / "none.json"))
    commands = {
        "refusal": ["probe", "--threshold", "nan", "--model", "x"],
        "db status": ["db", "status", "--json"],
        "score": ["score", "--model", str(model), "The capital of France is", " Paris", " Rome", "--json",
                  "--no-cache"],
    }

    def new_process(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kgprobe.cli", *args], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=600)

    def forked(args: list[str]) -> subprocess.CompletedProcess[str]:
        return kp.run_kgprobe(args, env, cwd=tmp, timeout=600)

    t0 = time.perf_counter()
    forked(["--version"])  # the fork server's own start (once per pytest process), timed apart
    server_start = time.perf_counter() - t0
    times: dict[str, dict[str, list[float]]] = {name: {"new": [], "forked": []} for name in commands}
    for r in range(a.rounds):
        for name, args in commands.items():
            order = [("new", new_process), ("forked", forked)]
            if r % 2:
                order.reverse()
            got = {}
            for way, run in order:
                t = time.perf_counter()
                got[way] = run(args)
                times[name][way].append(time.perf_counter() - t)
            n, f = got["new"], got["forked"]
            assert (n.returncode, n.stdout, n.stderr) == (f.returncode, f.stdout, f.stderr), (name, n, f)
    kp.stop_fork_server()
    rows = {name: {way: statistics.median(v) for way, v in t.items()} for name, t in times.items()}
    load = os.getloadavg()[0]
    if a.json:
        print(json.dumps({"fork_server_start_s": server_start, "median_s": rows, "rounds": a.rounds,
                          "load_average": load}))
        return
    print(f"fork server start (once per pytest process): {server_start:.2f} s; {a.rounds} rounds; "
          f"load average {load:.1f}")
    print(f"{'command':<12}{'new process s':>15}{'forked s':>10}{'new / forked':>14}")
    for name, row in rows.items():
        print(f"{name:<12}{row['new']:>15.2f}{row['forked']:>10.2f}{row['new'] / row['forked']:>13.1f}×")


if __name__ == "__main__":
    main()
