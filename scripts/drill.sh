#!/usr/bin/env bash
# make drill: start an embedded oncepay with the lab mounted and a slow payment path, run every
# incident drill against it, write report.html, and stop the server.
set -euo pipefail
cd "$(dirname "$0")/.."

data=$(mktemp -d)
log="$data/server.log"
export ONCEPAY_DATA_DIR="$data"
export ONCEPAY_HTTP_ADDR="${DRILL_HTTP_ADDR:-127.0.0.1:18080}"
export ONCEPAY_EMBEDDED_REDIS_ADDR="${DRILL_REDIS_ADDR:-127.0.0.1:16390}"
export ONCEPAY_EMBEDDED_KAFKA_ADDR="${DRILL_KAFKA_ADDR:-127.0.0.1:19099}"
export ONCEPAY_LAB=true
# I4: the lab's fixed 5 s lock must run out while a payment is still working.
export ONCEPAY_CHAOS_PAYMENT_DELAY="${ONCEPAY_CHAOS_PAYMENT_DELAY:-6s}"
# I5: orders expire quickly so the drill can watch a late close; the close job runs on demand.
export ONCEPAY_ORDER_TTL="${ONCEPAY_ORDER_TTL:-3s}"
export ONCEPAY_CLOSE_JOB_INTERVAL=1h

./bin/oncepay >"$data/stdout.log" 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$data"' EXIT

url="http://$ONCEPAY_HTTP_ADDR"
for _ in $(seq 1 100); do
  if curl -fs "$url/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 $server 2>/dev/null; then echo "drill: the server did not start:"; tail -20 "$log"; exit 1; fi
  sleep 0.2
done

./bin/drill --url "$url" --kafka "$ONCEPAY_EMBEDDED_KAFKA_ADDR" --lab on --html "${DRILL_REPORT:-report.html}" "$@"
