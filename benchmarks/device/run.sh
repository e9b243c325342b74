#!/usr/bin/env bash
# The figures that need a lent GPU machine (16 cores, an H100/H200, no Java, no network), as one
# prepared script: issue 43's engine against the harness, issue 37's parse and bulk-file scaling
# over 16 cores, issue 44's semantic-index worker sweep; and issue 43's probe loop, scored on a
# probe set exported here (the loop's score half: no graph server, which needs Java). Prepared here with
# benchmarks/device/pack.sh, tried here with benchmarks/device/try_here.sh; run there from the
# repo root, carrying .whl and .device (the Java kit's steps: .whl-java and .device-java):
#
#   bash benchmarks/device/run.sh engine     # ~7 min: 8B, 1.7B, 135M shapes x {kgprobe, harness};
#                                            #   the 8B probe loop on .device/probe-set.parquet
#   SHAPES="8b 135m" bash benchmarks/device/run.sh engine   # some shapes, in this order
#   bash benchmarks/device/run.sh cpu        # ~6 min: parse 1/4/8/16 workers, bulk files, IVF quantizer, index sweep
#   bash benchmarks/device/run.sh neo4j      # ~4 min, KIT=java's kit (Java and Neo4j carried):
#                                            #   import files on every core, neo4j-admin import at
#                                            #   1/2/4/8/16 cores, the server's start and schema
#   bash benchmarks/device/run.sh parse      # at most 9 min, either kit: cpu's issue-37 half (parse
#                                            #   and import files at 1/4/8/16 workers), so that one
#                                            #   Java-kit session takes every 16-core figure of issue 37
#   bash benchmarks/device/run.sh arcadedb   # ~5 min, KIT=arcadedb's kit (.whl-java, .device-arcadedb):
#                                            #   the neo4j step's import files (its own if it did not
#                                            #   run first), GraphImporter's JSON lines, then
#                                            #   GraphImporter (its sorted index builds included)
#                                            #   pinned to 1/2/4/8/16 cores
#
# (two calls back to back: each fits the device's 10-minute call, the machine stays warm between
# them). Everything is written under $OUT: env.txt, engine.log (the probe loop's lines too),
# engine-<shape>.json, cpu.log, semantic.json. DEVICE_SMOKE=1 shrinks every step to seconds on a
# CPU (try_here.sh). PYTHON and PIP name the interpreter and pip to use (default python3).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/kgprobe-device-out}
read -ra PY <<< "${PYTHON:-python3}"   # a command line: the interpreter and its flags
read -ra PIPCMD <<< "${PIP:-${PY[*]} -m pip}"
SITE=${SITE:-/tmp/site}
SMOKE=${DEVICE_SMOKE:-0}
WORK=${WORK:-/tmp/kgprobe-device}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1

# the kit a step reads: the GPU kit's .whl and .device (pack.sh), the Java kit's .whl-java and
# .device-java (KIT=java pack.sh); parse runs with either, the Java kit's where it was carried
WHL=.whl DEV=.device
case "${1:-}" in
  neo4j) WHL=.whl-java DEV=.device-java ;;
  arcadedb) WHL=.whl-java DEV=.device-arcadedb ;;
  parse) [ -d .whl-java ] && { WHL=.whl-java DEV=.device-java; } ;;
esac

install() {
  # the wheels the image lacks (benchmarks/device/wheels.txt), never from a network
  "${PIPCMD[@]}" install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$WHL"/*.whl || { echo "run.sh: installing $WHL failed (was $WHL carried?)" >&2; exit 3; }
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  if [ "$1" = neo4j ]; then  # the Java kit (pack.sh with KIT=java)
    [ -f "$DEV/java/neo4j-runtime.tar.xz" ] || {
      echo "run.sh: $DEV/java missing (KIT=java bash benchmarks/device/pack.sh, then carry $WHL and $DEV)" >&2; exit 3; }
  elif [ "$1" = arcadedb ]; then  # ArcadeDB's Java kit (pack.sh with KIT=arcadedb)
    [ -f "$DEV/arcadedb/arcadedb-runtime.tar.xz" ] || {
      echo "run.sh: $DEV/arcadedb missing (KIT=arcadedb bash benchmarks/device/pack.sh, then carry $WHL and $DEV)" >&2; exit 3; }
  elif [ "$1" != parse ]; then  # parse: wheels only
    [ -d "$DEV/tok" ] || { echo "run.sh: $DEV/tok missing (pack.sh, then carry $WHL and $DEV)" >&2; exit 3; }
  fi
}

environment() {
  {
    date -u; uname -m; nproc; free -g 2>/dev/null | head -2
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
    cat "$DEV/code.txt" 2>/dev/null  # written by pack.sh: the tree travels without .git
    "${PY[@]}" - <<'EOF'
import importlib.metadata as md, sys
print("python", sys.version.split()[0])
for n in ("torch", "transformers", "tokenizers", "lm-eval", "faiss-cpu", "numpy", "scipy",
          "scikit-learn", "orjson", "msgspec", "isal"):
    try:
        print(n, md.version(n))
    except md.PackageNotFoundError:
        print(n, "missing")
EOF
  } >> "$OUT/env.txt" 2>&1
}

need() {  # need MODULE...: refuse a step whose figures would be some fallback's
  "${PY[@]}" -c "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]" "$@" || {
    echo "run.sh: missing $* (is it in benchmarks/device/wheels.txt?)" >&2; return 3; }
}

step() {  # step NAME SECONDS COMMAND...: one benchmark, its own time limit, its output in the log
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date -u +%T), limit ${limit}s): $*" >&2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  echo "=== $name: exit $rc after $((SECONDS - t0)) s" >&2
}

engine() {
  # SHAPES picks and orders the shapes (default all three); the model-free loop comes last, so
  # a call cut short by the device time left loses the least
  local shapes size=(--prompts 100 --candidates 100) dev=(--device cuda --dtype bfloat16)
  read -ra shapes <<< "${SHAPES:-8b 1.7b 135m}"
  local loop_shape=8b
  if [ "$SMOKE" = 1 ]; then
    shapes=(135m); size=(--prompts 3 --candidates 3); dev=(--device cpu); loop_shape=135m
  fi
  need lm_eval.models.huggingface pyarrow || return 3
  [ -f .device/probe-set.parquet ] || { echo "run.sh: .device/probe-set.parquet missing (pack.sh)" >&2; return 3; }
  [ -f .device/bear/P19.jsonl ] || { echo "run.sh: .device/bear missing (pack.sh)" >&2; return 3; }
  for shape in "${shapes[@]}"; do  # one process per shape, as in docs/benchmarks.md
    step "engine $shape" 150 "${PY[@]}" benchmarks/bench_scoring.py "${dev[@]}" --random-init "$shape" \
      --tokenizer .device/tok --data .device/bear/P19.jsonl "${size[@]}" --systems kgprobe,harness \
      --json "$OUT/engine-$shape.json"
    if [ "$shape" = "$loop_shape" ]; then
      # issue 43: the same call split in chunks of 2,500 requests, each launched while the one
      # before runs: the first row starts after a quarter of the host's preparation (session
      # 33's H200: the device idle 14-17 % of the wall, most of it before the first row)
      step "engine $shape, chunks of 2500" 90 "${PY[@]}" benchmarks/bench_scoring.py "${dev[@]}" \
        --random-init "$shape" --tokenizer .device/tok --data .device/bear/P19.jsonl "${size[@]}" \
        --systems kgprobe --chunk-size 2500 --json "$OUT/engine-$shape-chunks.json"
      # issue 43: the probe loop's share of the wall in the engine and the device's. Each
      # repeat probes with batch k+1 launched only after batch k is written (as before the
      # two-phase loop), then launched after batch k's values are read (sessions 31-37), then
      # launched before they are read (session 38): side by side in one process. The first
      # probe compiles FlexAttention's row shapes; the second repeat's three are warm
      step "probe loop $shape" 260 "${PY[@]}" benchmarks/bench_probe.py --set .device/probe-set.parquet \
        --random-init "$shape" --tokenizer .device/tok "${dev[@]}" --repeat 2 --launch-ahead three
    fi
  done
  # the same loop without a model (real tokenization and plan, made-up scores): its own
  # Python per fact on this host's CPU, beside this machine's figures in docs/benchmarks.md
  step "probe loop, model-free" 60 "${PY[@]}" benchmarks/bench_probe.py --set .device/probe-set.parquet \
    --random-init 135m --tokenizer .device/tok --device cpu --model-free --repeat 2
}

parse() {
  # issue 37 on every core, no Java and no FAISS (either kit's wheels): the parse alone, 1 worker
  # against each count, .json.gz and plain; then the bulk load's import files, the main process's
  # CPU by thread (what stays serial on many cores)
  local entities=40000 counts=4,8,16 repeats=2
  [ "$SMOKE" = 1 ] && { entities=1500 counts=2 repeats=1; }
  need msgspec isal.isal_zlib orjson || return 3
  local dump="$WORK/real.json.gz"
  step "realistic dump" 120 "${PY[@]}" benchmarks/gen_dump.py "$dump" --realistic --entities "$entities"
  step "parse scaling" 240 "${PY[@]}" benchmarks/bench_loaders.py --realistic --path "$dump" \
    --workers "$counts" --repeats "$repeats"
  step "bulk files" 180 "${PY[@]}" benchmarks/bench_bulk_workers.py --dump "$dump" \
    --workers 1 ${counts//,/ } --tmp "$WORK"
  rm -f "$dump" "${dump%.gz}"
}

cpu() {
  local synthetic=300000 sample=20000 sweep=1,2,4,8,16
  local nlist=40000 vectors=200000 threads=1,4,16
  if [ "$SMOKE" = 1 ]; then
    synthetic=5000 sample=1000 sweep=1,2
    nlist=256 vectors=5000 threads=1,2
  fi
  need faiss || return 3
  parse
  # issue 44: the IVF fill and k-means at 100M entities' 40,000 lists, flat quantizer against
  # the HNSW graph, by threads (on 2 cores: docs/benchmarks.md, "Semantic index at scale, step 8")
  step "ivf quantizer" 150 "${PY[@]}" benchmarks/bench_ivf_quantizer.py --nlist "$nlist" \
    --vectors "$vectors" --threads "$threads" --pq
  step "ivf k-means" 90 "${PY[@]}" benchmarks/bench_ivf_quantizer.py --nlist "$nlist" \
    --vectors "$vectors" --threads "${threads##*,}" --train
  # issue 44: the semantic index, no graph server: one fresh process per worker count
  step "semantic sweep" 240 "${PY[@]}" benchmarks/bench_semantic_build.py --synthetic "$synthetic" \
    --sample "$sample" --workers "$sweep" --json > "$OUT/semantic.json"
  cat "$OUT/semantic.json"
}

import_files() {
  # import_files ENTITIES DIR: a realistic dump's bulk import files, written on every core (the
  # URI names a Neo4j and is never reached), unless an earlier step on this warm machine left
  # them complete: the neo4j and arcadedb steps, run back to back, take the same files
  local entities=$1 files=$2 dump="$WORK/bulk-$1.json"
  if [ -f "$files/.complete" ]; then
    echo "=== import files: $files from an earlier step ($(du -sb "$files" | cut -f1) bytes)" >&2
    return 0
  fi
  rm -rf "$files"
  step "realistic dump (plain)" 200 "${PY[@]}" benchmarks/gen_dump.py "$dump" --realistic --entities "$entities"
  step "import files, $(nproc) workers" 150 env NEO4J_URI=bolt://127.0.0.1:9 NEO4J_PASSWORD=unused \
    KGPROBE_HOME="$WORK/home" "${PY[@]}" -c "from kgprobe.cli import main; main()" ingest "$dump" \
    --bulk "$files" --workers "$(nproc)" --json
  rm -f "$dump"
  [ -f "$files/import.args" ] || { echo "run.sh: no import files in $files" >&2; return 3; }
  du -sb "$files"
  touch "$files/.complete"
}

neo4j() {
  # issue 37's figures that need Java, on every core: the import files (`kgprobe ingest --bulk`,
  # one worker per core), Neo4j's import tool pinned to 1..16 cores, then the server started on
  # the last import and kgprobe's constraints and indexes built (benchmarks/bench_neo4j_import.py).
  # The runtime is carried (benchmarks/device/java_kit.py): the machine has no Java
  local entities=150000 threads=1,2,4,8,16 rounds=2 heap=4g
  [ "$SMOKE" = 1 ] && { entities=1500 threads=1,2 rounds=1 heap=1g; }
  need orjson msgspec isal.isal_zlib neo4j typer || return 3
  export KGPROBE_NEO4J_RUNTIME="$WORK/neo4j-runtime"
  step "unpack the Java kit" 60 "${PY[@]}" benchmarks/device/java_kit.py unpack "$DEV/java" "$KGPROBE_NEO4J_RUNTIME"
  "$KGPROBE_NEO4J_RUNTIME/jre/bin/java" -version >> "$OUT/env.txt" 2>&1
  local files="$WORK/bulk-$entities"
  import_files "$entities" "$files" || return 3
  local pin=(--pin)  # the JVM on as many cores as threads; without taskset, threads alone
  command -v taskset > /dev/null || { pin=(); echo "run.sh: no taskset: the import runs unpinned" >&2; }
  step "neo4j-admin import by cores, then the schema" 330 "${PY[@]}" benchmarks/bench_neo4j_import.py \
    --files "$files" --threads "$threads" --rounds "$rounds" "${pin[@]}" --gc default --heap "$heap" \
    --schema --tmp "$WORK"
}

arcadedb() {
  # issue 37 for the default server: ArcadeDB's bulk importer, GraphImporter, pinned to 1..16
  # cores (the JVM, and what GraphImporter sizes by availableProcessors, see only those), two
  # rounds alternated; the dump and the import files are the neo4j step's, so the two importers
  # compare on one graph. The runtime is carried (java_kit.py --server arcadedb): no Java there
  local entities=150000 cores=1,2,4,8,16 rounds=2 heap=4g
  [ "$SMOKE" = 1 ] && { entities=1500 cores=1,2 rounds=1 heap=1g; }
  need orjson msgspec isal.isal_zlib neo4j typer || return 3
  command -v taskset > /dev/null || { echo "run.sh: no taskset: GraphImporter cannot be pinned" >&2; return 3; }
  local rt="$WORK/arcadedb-runtime" files="$WORK/bulk-$entities"
  step "unpack ArcadeDB's Java kit" 60 "${PY[@]}" benchmarks/device/java_kit.py unpack --server arcadedb \
    "$DEV/arcadedb" "$rt"
  "$rt/jre/bin/java" -version >> "$OUT/env.txt" 2>&1
  import_files "$entities" "$files" || return 3
  rm -rf "$files/arcadedb"  # GraphImporter's JSON lines: written (and timed) afresh
  step "GraphImporter by cores" 400 "${PY[@]}" benchmarks/bench_graphimporter_heap.py --files "$files" \
    --heaps "$heap" --cores "$cores" --rounds "$rounds" --runtime "$rt" --workers "$(nproc)"
}

what=${1:-}
case "$what" in
  engine|cpu|neo4j|parse|arcadedb) ;;
  *) echo "usage: bash benchmarks/device/run.sh engine|cpu|neo4j|parse|arcadedb" >&2; exit 2 ;;
esac
install "$what"
environment
"$what" 2>&1 | tee -a "$OUT/$what.log"
