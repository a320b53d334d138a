#!/usr/bin/env bash
# make drill: start an embedded oncepay with the lab mounted and a slow payment path, run every
# incident drill against it, write report.html, and stop the server. Extra arguments go to the
# drill (e.g. `./scripts/drill.sh --only I4` or `--serial`). DRILL_REPORT names the HTML file.
set -euo pipefail
cd "$(dirname "$0")/.."

data=$(mktemp -d)
log="$data/server.log"
export ONCEPAY_DATA_DIR="$data"
# Ports of their own, so that a `make run` on the default ports can stay up beside the drill.
export ONCEPAY_HTTP_ADDR="${DRILL_HTTP_ADDR:-127.0.0.1:18080}"
export ONCEPAY_EMBEDDED_REDIS_ADDR="${DRILL_REDIS_ADDR:-127.0.0.1:16390}"
export ONCEPAY_EMBEDDED_KAFKA_ADDR="${DRILL_KAFKA_ADDR:-127.0.0.1:19099}"
export ONCEPAY_LAB=true
# I4: every oncepay payment sleeps this long while it holds its lock. The drill's retry comes
# at +5.5 s, after a fixed 5 s lease has run out, so the delay must outlast both: then the
# retry meets a payment still at work, which the lab's lock (5 s, never renewed; its own work
# takes the article's 8 s) lets through and oncepay's must not. 6 s and not the article's
# 8 s, because the delay slows every payment of every scenario. It is slept under the lock but
# before the payment's transaction begins, so slowed payments run side by side even on SQLite.
export ONCEPAY_CHAOS_PAYMENT_DELAY="${ONCEPAY_CHAOS_PAYMENT_DELAY:-6s}"
# I4: oncepay's own lock gets the lab's 5 s lease (instead of the 30 s default, which a 6 s
# payment never outlives), so that what holds off the +5.5 s retry is the watchdog renewing
# the lease every 5/3 s, not a generous TTL.
export ONCEPAY_LOCK_TTL="${ONCEPAY_LOCK_TTL:-5s}"
# I5: orders expire 3 s after they are made (the drill waits TTL + 1 s before closing one), so
# the drill can watch a late close and a payment after close in seconds.
export ONCEPAY_ORDER_TTL="${ONCEPAY_ORDER_TTL:-3s}"
# I5: the close job runs only when the drill asks for it. A scheduled run would close the
# other scenarios' orders in the middle of their 6 s payments (they expire after 3 s).
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
