package idempotent

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Attempt is one answered attempt at a key, from the key's attempt log: the diagnosis of
// seed 000 §5.4 made answerable. The same request id on several attempts means one request
// was retried; different request ids on one key mean several requests raced or were
// redelivered; milliseconds between them mean concurrency, seconds or more a retry.
type Attempt struct {
	At        time.Time     `json:"at"`
	RequestID string        `json:"request_id"`
	Via       string        `json:"via"`
	Outcome   string        `json:"outcome"`
	Layer     string        `json:"layer"`
	Status    int           `json:"status"`
	Duration  time.Duration `json:"-"`
	// DurationMS is Duration in milliseconds, for JSON.
	DurationMS float64 `json:"duration_ms"`
}

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
		layer: string(res.Layer), status: res.Response.Status, duration: time.Since(start)}
}

// args are the releaseScript arguments of a, after owner, value and cache TTL.
func (a *attempt) args(ttl time.Duration) []any {
	return []any{a.at.UnixMilli(), a.rid, a.via, ttl.Milliseconds(),
		a.outcome, a.layer, strconv.Itoa(a.status), strconv.FormatFloat(float64(a.duration.Microseconds())/1000, 'f', 3, 64)}
}

// logAlone appends a to the attempt log of k in a round trip of its own: for attempts that
// held no lease (lock off, redsync mode).
func (g *Guard) logAlone(ctx context.Context, k Key, a *attempt) {
	pipe := g.rdb.Pipeline()
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: g.logKey(k), MaxLen: 64, Approx: true, Values: []any{
		"t", a.at.UnixMilli(), "rid", a.rid, "via", a.via, "outcome", a.outcome, "layer", a.layer,
		"status", a.status, "ms", strconv.FormatFloat(float64(a.duration.Microseconds())/1000, 'f', 3, 64)}})
	pipe.PExpire(ctx, g.logKey(k), g.cfg.CacheTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		g.metrics.redisErrors.WithLabelValues(string(LayerCache)).Inc()
	}
}

// Attempts returns the logged attempts at k, oldest first: every attempt answered while
// Redis was reachable, for as long as the replay cache keeps the key (at most the last 64 or
// so). Attempts answered while Redis was down are only in the logs.
func (g *Guard) Attempts(ctx context.Context, k Key) ([]Attempt, error) {
	msgs, err := g.rdb.XRange(ctx, g.logKey(k), "-", "+").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]Attempt, 0, len(msgs))
	for _, m := range msgs {
		str := func(f string) string { s, _ := m.Values[f].(string); return s }
		ms, _ := strconv.ParseInt(str("t"), 10, 64)
		status, _ := strconv.Atoi(str("status"))
		d, _ := strconv.ParseFloat(str("ms"), 64)
		out = append(out, Attempt{
			At: time.UnixMilli(ms).UTC(), RequestID: str("rid"), Via: str("via"), Outcome: str("outcome"),
			Layer: str("layer"), Status: status, Duration: time.Duration(d * float64(time.Millisecond)), DurationMS: d,
		})
	}
	return out, nil
}
