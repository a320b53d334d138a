// The answers a guard gives the copies of a key by itself, without asking the database
// again: to the copies in flight while the first one runs (flights), to the copies that come
// after it (answers, kept in memory), and what it logs of every copy (the attempt log). A
// write fenced by its record meets this file and guard.go only; redis.go holds the lease, the
// Redis replay cache and the message marker of the other writes.

package idempotent

import (
	"context"
	"errors"
	"maps"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent/internal/opskit"
)

// answers keeps the stored answers this guard committed or replayed, in process, so that a
// request fenced by its record alone (fencedByRecord) sends Redis nothing on its path: a new
// key goes straight to its transaction, where the record's unique key is the fence, and a
// copy that comes back to this instance is answered from memory. A copy that reaches another
// instance finds no entry there; its transaction meets the committed record and replays it,
// and that instance keeps the answer from then on.
//
// Memory must forget what the purge forgets (I6), on every instance. The purge ends by
// setting a shared epoch in Redis to a new value and waiting answersCheck
// (Guard.forgetAnswers); an instance answers from memory only while it has read that epoch
// within answersCheck, and drops everything it keeps when the epoch has moved. So once Purge
// returns, no instance answers a purged key from memory. An instance that cannot read the epoch — Redis
// unreachable — drops its memory and keeps nothing until it can: its copies are answered by
// the record, and the cache layer is reported as stepped aside, as the Redis cache's was.
// An eviction (idemops.Evict) forgets the same way.
type answers struct {
	lru      *expirable.LRU[string, cached]
	rdb      redis.UniversalClient
	epochKey string

	// start is the origin of checked, read on the monotonic clock, so that a step of the wall
	// clock neither stretches nor shortens the second a read of the epoch is trusted for.
	start   time.Time
	checked atomic.Int64 // time since start of the last read of the epoch, 0 when memory is not to be trusted
	gen     atomic.Int64 // counts the times memory was dropped

	mu       sync.Mutex // held while the epoch is read, by one request at a time
	epoch    string
	failedAt time.Time
}

// maxAnswers bounds how many answers an instance keeps. Their size is the answers' own: an
// order's is under a kilobyte, so oncepay's take some megabytes; a service whose answers are
// large keeps as many of them.
const maxAnswers = 16384

// epochRead bounds the read of the epoch, which one request makes for every request of the
// instance: it runs on a context of its own, so that the request's cancellation — a client
// gone away — is not taken for Redis being down.
const epochRead = answersCheck

// answersCheck is how long a read of the epoch lets memory answer, and how long the purge
// waits after it set the epoch. While Redis cannot be reached, it is also how long an
// instance waits before it tries again, so that an outage costs one failed read per second
// and not one per request.
const answersCheck = time.Second

func newAnswers(rdb redis.UniversalClient, epochKey string, ttl time.Duration) *answers {
	return &answers{lru: expirable.NewLRU[string, cached](maxAnswers, nil, ttl), rdb: rdb, epochKey: epochKey, start: time.Now()}
}

// answerName names k in memory, and with a fingerprint its flight.
func answerName(k Key) string {
	return k.Scope + "\x00" + k.BizType + "\x00" + k.BizKey
}

// get returns the answer kept for k, if memory may answer, its headers a copy of their own,
// and the generation to keep a new answer under (keep). An error says that the epoch could
// not be read: nothing is kept or answered until it can.
func (a *answers) get(ctx context.Context, k Key) (*cached, int64, error) {
	if err := a.current(ctx); err != nil {
		return nil, 0, err
	}
	gen := a.gen.Load()
	c, ok := a.lru.Get(answerName(k))
	if !ok {
		return nil, gen, nil
	}
	c.Response.Header = maps.Clone(c.Response.Header)
	return &c, gen, nil
}

// keep remembers c for k when memory was not dropped since gen: an answer read from a
// record that a purge has since deleted must not outlive the drop.
func (a *answers) keep(k Key, c *cached, gen int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen.Load() == gen && a.checked.Load() != 0 {
		a.lru.Add(answerName(k), *c)
	}
}

// current reads the epoch when the last read is answersCheck old, and drops memory when it
// moved or cannot be read.
func (a *answers) current(ctx context.Context) error {
	if a.fresh() {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fresh() {
		return nil // another request read it meanwhile
	}
	now := time.Now()
	if now.Sub(a.failedAt) < answersCheck {
		return errRedisDown
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), epochRead)
	defer cancel()
	epoch, err := a.rdb.Get(rctx, a.epochKey).Result()
	switch {
	case errors.Is(err, redis.Nil):
		epoch = "" // never set, or lost with Redis's data: a change like any other
	case err != nil:
		a.drop()
		a.failedAt = now
		return errors.Join(errRedisDown, err)
	}
	if epoch != a.epoch {
		a.drop()
		a.epoch = epoch
	}
	a.checked.Store(int64(now.Sub(a.start)) + 1)
	return nil
}

// fresh reports whether the last read of the epoch is less than answersCheck old.
func (a *answers) fresh() bool {
	checked := a.checked.Load()
	return checked != 0 && time.Since(a.start)-time.Duration(checked-1) < answersCheck
}

// drop forgets every kept answer; a.mu is held.
func (a *answers) drop() {
	a.checked.Store(0)
	a.gen.Add(1)
	a.lru.Purge()
}

// forgetAnswers makes every instance drop the answers it keeps: it sets the shared epoch to
// a value never used before, then waits until every instance's last read of the old one has
// lapsed (answers). A random value and not a counter: a counter that Redis lost (a restart
// without persistence, a flush) would count up again to a value an instance still holds.
func (g *Guard) forgetAnswers(ctx context.Context) error {
	if g.rdb == nil {
		return nil
	}
	if err := g.rdb.Set(ctx, g.answers.epochKey, randomToken(), 0).Err(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(answersCheck):
		return nil
	}
}

// flights lets the copies of one request that reach one guard while a first copy's
// transaction runs wait for its answer, instead of each running a transaction of its own. It
// serves the attempts that hold no lease — every write fenced by its record, and any write of
// a guard without Redis or with Redis down — whose fence is the record's unique key: there
// every concurrent copy would wait on the first's
// uncommitted record holding a database connection, and a storm of one key would take the
// whole pool. With flights an instance holds at most one connection per key and request.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one first copy's attempt; done is closed once res and err are set.
type flight struct {
	done chan struct{}
	res  Result
	err  error
}

// do runs attempt as the first copy of name, or waits for the first copy's answer. A copy
// that waited is answered the first one's stored outcome as a replay. When the first copy
// ended without a stored outcome (an error, a copy in flight elsewhere) the copy runs again
// itself: the error was the first copy's — its context, its connection — not the request's.
func (f *flights) do(ctx context.Context, name string, attempt func() (Result, error)) (Result, error) {
	for {
		f.mu.Lock()
		if f.m == nil {
			f.m = map[string]*flight{}
		}
		first, waiting := f.m[name]
		if !waiting {
			first = &flight{done: make(chan struct{})}
			f.m[name] = first
		}
		f.mu.Unlock()

		if !waiting {
			return f.run(name, first, attempt)
		}
		select {
		case <-first.done:
		case <-ctx.Done():
			return Result{}, context.Cause(ctx)
		}
		if first.err == nil && storable(first.res.Response.Status) &&
			(first.res.Outcome == Executed || first.res.Outcome == Replayed) {
			return Result{Response: first.res.Response, Outcome: Replayed, Layer: layerDedup}, nil
		}
	}
}

// run is do's first copy: it answers the waiting copies however attempt ends, a panic
// included.
func (f *flights) run(name string, fl *flight, attempt func() (Result, error)) (Result, error) {
	fl.err = errPanicked
	defer func() {
		f.mu.Lock()
		delete(f.m, name)
		f.mu.Unlock()
		close(fl.done)
	}()
	fl.res, fl.err = attempt()
	return fl.res, fl.err
}

// The attempt log: every copy of a key, appended to the key's log in Redis off the request's
// path, for a person diagnosing it (idemops.Attempts).

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
	sendMu  sync.Mutex // held while a batch is taken and sent, so that flush waits for it
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
		l.sendMu.Lock()
		l.mu.Lock()
		batch := l.queue
		l.queue = nil
		if len(batch) == 0 {
			l.sending = false
			l.mu.Unlock()
			l.sendMu.Unlock()
			return
		}
		l.mu.Unlock()
		l.send(batch)
		l.sendMu.Unlock()
	}
}

// flush sends what is queued now and waits for a batch already on its way, for a reader of
// the log who must see every attempt this guard has answered.
func (l *attemptLog) flush() {
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
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
