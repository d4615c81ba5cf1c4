# device_call.sh -- the common start of a device call script (sourced, not run): unpacks the
# carried build/core312.so.xz into gpucmp/, sets PYTHONPATH, records the card, and gives
# stamp (a timed line in $OUT/checks.txt) and left N (seconds for the next step: at most N,
# within DEADLINE_S of the start, default 588). Outputs go to $L = $OUT, raw logs to $L/raw.
# The scripts of earlier sessions carry their own copy of these lines: they are records of
# what ran and stay as they ran.
set -uo pipefail
export PYTHONUNBUFFERED=1
L=$OUT; mkdir -p "$L/raw"
T0=$(date +%s); DEADLINE=$((T0 + ${DEADLINE_S:-588}))
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$L/checks.txt"; }
left() { local l=$((DEADLINE - $(date +%s) - 3)); [ "$l" -gt "$1" ] && l=$1; [ "$l" -lt 1 ] && l=1; echo "$l"; }
python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('build/core312.so.xz'), open('gpucmp/_core.cpython-312-x86_64-linux-gnu.so','wb'))" || exit 1
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$L/checks.txt"
