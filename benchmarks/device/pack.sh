#!/usr/bin/env bash
# Prepare, on this machine, what the device checks (benchmarks/device/run.sh) carry to a lent
# GPU machine, which reaches no package index and no model hub:
#   .whl/     wheels of the distributions in benchmarks/device/wheels.txt, for its Python;
#   .device/  the default model's tokenizer (tok/), BEAR (bear/: bench_scoring's P19 prompts take
#             their 100 candidates from every relation's file; P19's alone has 5), the commit (code.txt) and
#             a probe set of the demo graph (probe-set.parquet: SET_FACTS facts, default 3000,
#             temp+sem, n = 5, 256 per batch), exported through a throwaway managed server.
# Both paths are git-ignored; name them in the device call's carry. Usage, from the repo root:
#   bash benchmarks/device/pack.sh [BEAR_DIR]          # BEAR_DIR default ../shared/data/bear/BEAR
#   KIT=java bash benchmarks/device/pack.sh            # for `run.sh neo4j` and `run.sh parse`:
#             .device-java/java/ holds a Java runtime and Neo4j's classes
#             (benchmarks/device/java_kit.py, ~45 MiB, checked here), .whl-java only what
#             `kgprobe ingest --bulk` needs (no FAISS, no harness), so that both fit one call.
#   KIT=arcadedb bash benchmarks/device/pack.sh        # for `run.sh arcadedb`: .device-arcadedb/
#             arcadedb/ holds a Java 25 runtime and the classes GraphImporter loads (~27 MiB,
#             checked here; needs the managed server's wheel and a JDK 21+), with .whl-java's wheels.
# The kits live side by side (.whl + .device, .whl-java + .device-java, .whl-java +
# .device-arcadedb): pack them before a session, and each call carries its own pair.
# DEVICE_PYTHON (default 3.12, the GPU image's) picks the wheels' Python; 3.11 here lets the
# kit be tried on this machine (benchmarks/device/try_here.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
PYVER=${DEVICE_PYTHON:-3.12}
BEAR=${1:-../shared/data/bear/BEAR}
LIMIT=$((60 * 1024 * 1024))  # the device call's 64 MiB, less the working tree's few MiB

KIT=${KIT:-gpu}
case "$KIT" in gpu|java|arcadedb) ;; *) echo "pack: KIT is gpu, java or arcadedb" >&2; exit 2 ;; esac
DEV=.device WHL=${WHL_DIR:-.whl} WHEELS=gpu
[ "$KIT" = java ] && { DEV=.device-java WHL=${WHL_DIR:-.whl-java} WHEELS=java; }
[ "$KIT" = arcadedb ] && { DEV=.device-arcadedb WHL=${WHL_DIR:-.whl-java} WHEELS=java; }

rm -rf "$WHL" && mkdir -p "$WHL" "$DEV"
# the Java kits' wheels: no FAISS, no harness (image_site.JAVA_KIT_LEAVES)
mapfile -t specs < <("$PY" benchmarks/device/image_site.py --specs --kit "$WHEELS")
[ "${#specs[@]}" -gt 0 ] || exit 2
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 \
  -d "$WHL" "${specs[@]}"

if [ "$KIT" = java ]; then
  rm -rf "$DEV/java"
  "$PY" benchmarks/device/java_kit.py pack "$DEV/java"
elif [ "$KIT" = arcadedb ]; then
  rm -rf "$DEV/arcadedb"
  "$PY" benchmarks/device/java_kit.py pack --server arcadedb "$DEV/arcadedb"
else
rm -rf .device/java .device/tok && "$PY" - <<'PYEOF'  # java/: an older pack put the Java kit here
from kgprobe.probing.models import load_model
load_model("smollm2-135m", device="cpu").tokenizer.save_pretrained(".device/tok")
PYEOF
rm -rf .device/bear .device/P19.jsonl && mkdir -p .device/bear && cp "$BEAR"/*.jsonl .device/bear/
# the probe loop's facts, gathered here (the GPU machine has no Java for a graph server); a set
# records the scoring code it was exported for, so it is packed with the code that scores it
rm -f .device/probe-set.parquet
"$PY" benchmarks/bench_probe.py --server arcadedb --export-set .device/probe-set.parquet \
  --sample "${SET_FACTS:-3000}" --strategy temp+sem -n 5 --batch-facts 256 | tail -1
fi
# the code measured: the working tree travels without .git
{ git log -1 --format='code %H %s'; git status --short | sed 's/^/  changed: /'; } > "$DEV/code.txt"

size=$(du -cb "$WHL" "$DEV" | tail -1 | cut -f1)
what="tokenizer, BEAR and the probe set"
[ "$KIT" = java ] && what="the Java kit"
[ "$KIT" = arcadedb ] && what="ArcadeDB's Java kit"
echo "pack ($KIT): ${#specs[@]} wheels in $WHL, $what in $DEV: $((size / 1024 / 1024)) MiB (carry [\"$WHL\", \"$DEV\"])"
if [ "$size" -gt "$LIMIT" ]; then
  echo "pack: over the device call's transfer limit ($((LIMIT / 1024 / 1024)) MiB with the tree)" >&2
  exit 1
fi
