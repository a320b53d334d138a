#!/usr/bin/env bash
# tools/chaos-loop.sh [N]: run `make chaos-short` N times in a row (default 20) and report how many
# runs had violations. Each run writes to chaos-out/loop/<i>; a failing run's summary, with
# every violation printed in full, is kept there and echoed. Extra CHAOS_FLAGS pass through.
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
base=chaos-out/loop
mkdir -p "$base"
make tools >/dev/null
failed=0
total=0
for i in $(seq 1 "$n"); do
  out="$base/$i"
  start=$(date +%s)
  ./bin/chaos -mode short -out "$out" ${CHAOS_FLAGS:-} >"$base/$i.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  v=$(grep -Eo '^[0-9]+ violations' "$base/$i.log" | tail -1 | cut -d' ' -f1)
  d=$(grep -Eo '^[0-9]+ deliveries' "$base/$i.log" | tail -1 | cut -d' ' -f1)
  total=$((total + ${v:-0}))
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    echo "run $i: exit $rc, ${v:-?} violations, ${d:-?} deliveries, ${secs}s — $base/$i.log"
    grep -A80 '^VIOLATION' "$base/$i.log" | head -200
  else
    echo "run $i: ${v:-0} violations, ${d:-?} deliveries, ${secs}s"
  fi
done
echo "chaos-loop: $failed of $n runs failed; $total violations in all"
[ "$failed" -eq 0 ]
