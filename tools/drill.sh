#!/usr/bin/env bash
# make drill: start an embedded oncepay with the lab mounted and a slow payment path, run every
# incident drill against it, write report.html, and stop the server. Extra arguments go to the
# drill (e.g. `./tools/drill.sh --only I4` or `--serial`). DRILL_REPORT names the HTML file.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$(date +%s.%N)

data=$(mktemp -d)
log="$data/server.log"
export ONCEPAY_DATA_DIR="$data"
# Ports of their own, so that a `make run` on the default ports can stay up beside the drill.
export ONCEPAY_HTTP_ADDR="${DRILL_HTTP_ADDR:-127.0.0.1:18080}"
export ONCEPAY_EMBEDDED_REDIS_ADDR="${DRILL_REDIS_ADDR:-127.0.0.1:16390}"
export ONCEPAY_EMBEDDED_KAFKA_ADDR="${DRILL_KAFKA_ADDR:-127.0.0.1:19099}"
# I8, I9: the embedded channel simulator, on a port of its own too. The drill finds it from the
# pay_url of the trades oncepay opens (or --sim).
export ONCEPAY_EMBEDDED_CHANNEL_ADDR="${DRILL_CHANNEL_ADDR:-127.0.0.1:18091}"
export ONCEPAY_LAB=true
# The drill's own notifications name a channel of their own, drill, which keeps its payments
# apart in reconciliation. oncepay refuses a report from a channel it is not configured with
# (400 unknown_channel), so drill is one of ONCEPAY_CHANNELS, beside the embedded simulator's
# defaults; with no URL of its own it is called at the simulator too.
export ONCEPAY_CHANNELS="${ONCEPAY_CHANNELS:-simpay,alipay,wechat,drill}"
# I4: every oncepay payment sleeps this long while it holds its lock. The drill's retry comes
# at +6 s, after a fixed 5 s lease has run out, so the delay must outlast both: then the
# retry meets a payment still at work, which the lab's lock (5 s, never renewed; its own work
# takes the article's 8 s) lets through and oncepay's must not. 7 s and not the article's
# 8 s, because the delay slows every payment of every scenario. It is slept under the lock but
# before the payment's transaction begins, so slowed payments run side by side even on SQLite.
export ONCEPAY_CHAOS_PAYMENT_DELAY="${ONCEPAY_CHAOS_PAYMENT_DELAY:-7s}"
# I4: oncepay's own lock gets the lab's 5 s lease (instead of the 30 s default, which a 7 s
# payment never outlives), so that what holds off the +6 s retry is the watchdog renewing
# the lease every 5/3 s, not a generous TTL.
export ONCEPAY_LOCK_TTL="${ONCEPAY_LOCK_TTL:-5s}"
# I5: orders expire 3 s after they are made (the drill waits TTL + 1 s before closing one), so
# the drill can watch a late close and a payment after close in seconds.
export ONCEPAY_ORDER_TTL="${ONCEPAY_ORDER_TTL:-3s}"
# I5: the close job runs only when the drill asks for it. A scheduled run would close the
# other scenarios' orders in the middle of their 7 s payments (they expire after 3 s).
export ONCEPAY_CLOSE_JOB_INTERVAL=1h
# I8: a call to the channel gives up after 1 s and is retried once (with the same number), so
# that a refund whose answer the simulator holds back (timeout_after_apply) is answered in about
# 2 s instead of 20 s with the defaults (5 s, 3 retries). The naive lab refund waits 1 s too.
export ONCEPAY_CHANNEL_TIMEOUT="${ONCEPAY_CHANNEL_TIMEOUT:-1s}"
export ONCEPAY_CHANNEL_RETRIES="${ONCEPAY_CHANNEL_RETRIES:-1}"
# I8, I9: reconcile-payments and resume-refunds run only when the drill asks, like the close
# job: a scheduled reconcile-payments would settle I9's dropped payment before the lab's naive
# close could show what happens without it.
export ONCEPAY_RECONCILE_JOB_INTERVAL=1h
export ONCEPAY_REFUND_JOB_INTERVAL=1h
# I16: the receiver's lost 2xx is retried after the first pause of the webhook schedule — a
# second instead of the production 10 s — and the webhook loop polls every 100 ms. I16 and I17
# register the drill's receiver on loopback, which the embedded database's dev mode allows
# (ONCEPAY_WEBHOOK_DEV).
export ONCEPAY_WEBHOOK_SCHEDULE="${ONCEPAY_WEBHOOK_SCHEDULE:-1s,2s,5s}"
export ONCEPAY_WEBHOOK_INTERVAL="${ONCEPAY_WEBHOOK_INTERVAL:-100ms}"

./bin/oncepay-lab >"$data/stdout.log" 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$data"' EXIT

url="http://$ONCEPAY_HTTP_ADDR"
for _ in $(seq 1 400); do # 20 s
  if curl -fs "$url/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 $server 2>/dev/null; then echo "drill: the server did not start:"; tail -20 "$log"; exit 1; fi
  sleep 0.05
done

ready=$(date +%s.%N)

status=0
./bin/drill --url "$url" --kafka "$ONCEPAY_EMBEDDED_KAFKA_ADDR" --lab on --html "${DRILL_REPORT:-report.html}" "$@" || status=$?
# The time of the whole drill, and the machine's load beside it: on a shared machine the same
# drill takes twice as long under a load of 4 as on a quiet one.
awk -v began="$began" -v ready="$ready" -v now="$(date +%s.%N)" -v la="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)" \
  'BEGIN { printf "drill.sh: server ready in %.1fs; server and drill %.1fs in all; load average %s\n", ready - began, now - began, la }' >&2
exit $status
