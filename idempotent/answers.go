package idempotent

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/redis/go-redis/v9"
)

// answers keeps the stored answers this guard committed or replayed, in process, so that a
// request fenced by its record alone (fencedByRecord) sends Redis nothing on its path: a new
// key goes straight to its transaction, where the record's unique key is the fence, and a
// copy that comes back to this instance is answered from memory. A copy that reaches another
// instance finds no entry there; its transaction meets the committed record and replays it,
// and that instance keeps the answer from then on.
//
// Memory must forget what the purge forgets (I6), on every instance. The purge ends by
// counting up a shared epoch in Redis and waiting answersCheck (Guard.forgetAnswers); an
// instance answers from memory only while it has read that epoch within answersCheck, and
// drops everything it keeps when the epoch has moved. So once Purge returns, no instance
// answers a purged key from memory. An instance that cannot read the epoch — Redis
// unreachable — drops its memory and keeps nothing until it can: its copies are answered by
// the record, and the cache layer is reported as stepped aside, as the Redis cache's was.
// An eviction (idemops.Evict) forgets the same way.
type answers struct {
	lru      *expirable.LRU[string, cached]
	rdb      redis.UniversalClient
	epochKey string

	checked atomic.Int64 // UnixNano of the last read of the epoch, 0 when memory is not to be trusted
	gen     atomic.Int64 // counts the times memory was dropped

	mu       sync.Mutex // held while the epoch is read, by one request at a time
	epoch    string
	failedAt time.Time
}

// maxAnswers bounds the memory the answers take: a few kilobytes each at most (the body of
// an order), some tens of megabytes in all.
const maxAnswers = 16384

// answersCheck is how long a read of the epoch lets memory answer, and how long the purge
// waits after it counted the epoch up. While Redis cannot be reached, it is also how long an
// instance waits before it tries again, so that an outage costs one failed read per second
// and not one per request.
const answersCheck = time.Second

func newAnswers(rdb redis.UniversalClient, epochKey string, ttl time.Duration) *answers {
	return &answers{lru: expirable.NewLRU[string, cached](maxAnswers, nil, ttl), rdb: rdb, epochKey: epochKey}
}

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
	if time.Since(time.Unix(0, a.checked.Load())) < answersCheck {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if now.Sub(time.Unix(0, a.checked.Load())) < answersCheck {
		return nil // another request read it meanwhile
	}
	if now.Sub(a.failedAt) < answersCheck {
		return errRedisDown
	}
	epoch, err := a.rdb.Get(ctx, a.epochKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		a.drop()
		a.failedAt = now
		return errors.Join(errRedisDown, err)
	}
	if epoch != a.epoch {
		a.drop()
		a.epoch = epoch
	}
	a.checked.Store(now.UnixNano())
	return nil
}

// drop forgets every kept answer; a.mu is held.
func (a *answers) drop() {
	a.checked.Store(0)
	a.gen.Add(1)
	a.lru.Purge()
}

// forgetAnswers makes every instance drop the answers it keeps: it counts the shared epoch
// up, then waits until every instance's last read of the old epoch has lapsed (answers).
func (g *Guard) forgetAnswers(ctx context.Context) error {
	if g.rdb == nil {
		return nil
	}
	if err := g.rdb.Incr(ctx, g.answers.epochKey).Err(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(answersCheck):
		return nil
	}
}
