package idempotent

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent/internal/opskit"
)

// attempt is a log entry being written.
type attempt struct {
	at             time.Time
	rid, via       string
	outcome, layer string
	status         int
	duration       time.Duration
}

func (g *Guard) newAttempt(ctx context.Context, req Request, res Result, err error, start time.Time) *attempt {
	outcome := string(res.Outcome)
	switch {
	case outcome == "" && err != nil:
		outcome = string(Failed)
	case outcome == "":
		outcome = string(Executed)
	}
	return &attempt{at: start, rid: g.cfg.RequestID(ctx), via: req.Via, outcome: outcome,
		layer: res.Layer, status: res.Response.Status, duration: time.Since(start)}
}

// attemptLog appends attempts to their keys' logs off the request's path. The log is for a
// person diagnosing a key (idemops.Attempts, the admin lookup): it must say how many copies came and
// when, but no copy should wait for it — an XADD in the claim's script was a fifth of a
// replay's cost. add queues an entry and returns; one goroutine at a time sends what is
// queued in one pipeline and exits once the queue is empty, so an idle guard runs nothing.
// Past maxQueuedAttempts (Redis slow or down) entries are dropped and counted.
type attemptLog struct {
	g       *Guard
	mu      sync.Mutex
	queue   []queuedAttempt
	sending bool
}

type queuedAttempt struct {
	key Key
	a   *attempt
}

// maxQueuedAttempts bounds the memory the log takes while Redis does not keep up.
const maxQueuedAttempts = 8192

// attemptLogGather is how long a queued attempt waits for others before it is sent.
const attemptLogGather = 5 * time.Millisecond

func (l *attemptLog) add(k Key, a *attempt) {
	if l.g.rdb == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) >= maxQueuedAttempts {
		l.g.metrics.attemptsDropped.Inc()
		return
	}
	l.queue = append(l.queue, queuedAttempt{key: k, a: a})
	if !l.sending {
		l.sending = true
		go l.drain()
	}
}

// drain sends the queue until it finds it empty. It lets the queue gather for a moment
// first: a storm's copies then share a pipeline instead of sending one each.
func (l *attemptLog) drain() {
	time.Sleep(attemptLogGather)
	for {
		l.mu.Lock()
		batch := l.queue
		l.queue = nil
		if len(batch) == 0 {
			l.sending = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l.send(batch)
	}
}

// flush sends what is queued now, for a reader of the log who must see every attempt this
// guard has answered.
func (l *attemptLog) flush() {
	l.mu.Lock()
	batch := l.queue
	l.queue = nil
	l.mu.Unlock()
	l.send(batch)
}

// send appends batch to the logs in one pipeline: each log a stream capped near 64 entries
// that lives as long as the replay cache.
func (l *attemptLog) send(batch []queuedAttempt) {
	if len(batch) == 0 {
		return
	}
	g := l.g
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pipe := g.rdb.Pipeline()
	for _, q := range batch {
		a := q.a
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: g.logKey(q.key), MaxLen: 64, Approx: true, Values: []any{
			"t", a.at.UnixMilli(), "rid", a.rid, "via", a.via, "outcome", a.outcome, "layer", a.layer,
			"status", a.status, "ms", strconv.FormatFloat(float64(a.duration.Microseconds())/1000, 'f', 3, 64)}})
		pipe.PExpire(ctx, g.logKey(q.key), g.cfg.CacheTTL)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		g.metrics.redisErrors.WithLabelValues(layerCache).Inc()
	}
}

// attempts returns the logged attempts at k, oldest first (idemops.Attempts).
func (g *Guard) attempts(ctx context.Context, k Key) ([]opskit.Attempt, error) {
	if g.rdb == nil {
		return nil, nil
	}
	g.log.flush()
	msgs, err := g.rdb.XRange(ctx, g.logKey(k), "-", "+").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]opskit.Attempt, 0, len(msgs))
	for _, m := range msgs {
		str := func(f string) string { s, _ := m.Values[f].(string); return s }
		ms, _ := strconv.ParseInt(str("t"), 10, 64)
		status, _ := strconv.Atoi(str("status"))
		d, _ := strconv.ParseFloat(str("ms"), 64)
		out = append(out, opskit.Attempt{
			At: time.UnixMilli(ms).UTC(), RequestID: str("rid"), Via: str("via"), Outcome: str("outcome"),
			Layer: str("layer"), Status: status, Duration: time.Duration(d * float64(time.Millisecond)), DurationMS: d,
		})
	}
	// Two pipelines (the background one and a flush) may have crossed: order by time.
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}
