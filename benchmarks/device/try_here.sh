#!/usr/bin/env bash
# Try the device kit on this machine before a lent GPU machine's minutes are spent on it: an
# interpreter that sees only the distributions the GPU image holds (image_packages.txt, linked
# from .venv into a bare virtual environment by image_site.py), the wheels pack.sh downloads for this machine's Python installed as
# run.sh installs them, then both steps of run.sh at smoke size on the CPU. A module the image
# lacks and wheels.txt forgets fails here, not there. Usage, from the repo root:
#   bash benchmarks/device/try_here.sh        # output in /tmp/kgprobe-device-try/out
#   KIT=java bash benchmarks/device/try_here.sh   # the Java kit: `run.sh neo4j` and `run.sh parse` instead
#   KIT=arcadedb bash benchmarks/device/try_here.sh   # ArcadeDB's Java kit: `run.sh arcadedb`
# Then pack for the device (DEVICE_PYTHON=3.12, the default) before the call (the try re-packs
# the kit's .device or .device-java for this machine's Python):
#   bash benchmarks/device/pack.sh; KIT=java bash benchmarks/device/pack.sh; KIT=arcadedb bash benchmarks/device/pack.sh
# The .venv's versions are newer than the image's; a few distributions the image holds are not in
# .venv (image_site.STAND_INS says which ones this emulation adds from .venv instead).
set -euo pipefail
cd "$(dirname "$0")/../.."
TRY=${TRY:-/tmp/kgprobe-device-try}
rm -rf "$TRY" && mkdir -p "$TRY/image" "$TRY/out"
BARE=$(.venv/bin/python benchmarks/device/image_site.py "$TRY/image")
KIT=${KIT:-gpu}
steps="engine cpu"
[ "$KIT" = java ] && steps="neo4j parse"
[ "$KIT" = arcadedb ] && steps="arcadedb"
DEVICE_PYTHON=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
  KIT=$KIT WHL_DIR="$TRY/whl" SET_FACTS=${SET_FACTS:-20} bash benchmarks/device/pack.sh "${1:-../shared/data/bear/BEAR}"
# run.sh reads .whl (.whl-java for the Java kit): point it at this machine's wheels for the
# try, then put the link back
link=.whl
[ "$KIT" != gpu ] && link=.whl-java
had_whl=0
if [ -L "$link" ]; then rm -f "$link"; elif [ -e "$link" ]; then mv "$link" "$TRY/whl.saved"; had_whl=1; fi
ln -s "$TRY/whl" "$link"
restore() { rm -f "$link"; [ "$had_whl" = 1 ] && mv "$TRY/whl.saved" "$link"; return 0; }
trap restore EXIT
for what in $steps; do
  OUT="$TRY/out" SITE="$TRY/site" WORK="$TRY/work" DEVICE_SMOKE=1 PYTHONPATH="$TRY/image/site" \
    PYTHON="$BARE" PIP=".venv/bin/python -m pip" \
    bash benchmarks/device/run.sh "$what"
done
if grep -h "^=== .*: exit [^0]" "$TRY/out/"*.log; then
  echo "try_here: a step failed (above); logs in $TRY/out" >&2
  exit 1
fi
echo "try_here: every step ran; logs in $TRY/out"
