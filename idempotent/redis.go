package idempotent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"
)

// The Redis keys of one idempotency key share the hash tag {scope:biz_type:biz_key}, so that
// they live in one Redis Cluster slot and one Lua script may touch them together. Every script
// receives all the keys it touches as KEYS (a key built inside Lua could not be routed by a
// cluster), and no command names the keys of two idempotency keys (see Guard.forget).
func (g *Guard) redisKey(k Key, suffix string) string {
	return g.cfg.KeyPrefix + "idem:{" + k.String() + "}:" + suffix
}

func (g *Guard) cacheKey(k Key) string  { return g.redisKey(k, "resp") }
func (g *Guard) leaseKey(k Key) string  { return g.redisKey(k, "lock") }
func (g *Guard) markerKey(k Key) string { return g.redisKey(k, "msg") }
func (g *Guard) logKey(k Key) string    { return g.redisKey(k, "log") }
func (g *Guard) tokenKey(token string) string {
	return g.cfg.KeyPrefix + "idem:token:" + token
}

// cached is a finished outcome in the replay cache.
type cached struct {
	Fingerprint string
	Response    Response
}

// encode writes c in the cache's compact form — the fingerprint, the status, the headers one
// "Name: value" a line, an empty line, then the body as it is — so that a replay costs no JSON
// and no base64: it is the hot path of every duplicate.
func (c *cached) encode() []byte {
	var b bytes.Buffer
	b.Grow(len(c.Fingerprint) + len(c.Response.Body) + 64)
	b.WriteString(c.Fingerprint)
	b.WriteByte('\n')
	b.WriteString(strconv.Itoa(c.Response.Status))
	b.WriteByte('\n')
	for k, v := range c.Response.Header {
		b.WriteString(k)
		b.WriteString(": ")
		b.WriteString(v)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.Write(c.Response.Body)
	return b.Bytes()
}

// decodeCached reads what encode wrote; ok is false for anything else.
func decodeCached(raw []byte) (c cached, ok bool) {
	line := func() (string, bool) {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return "", false
		}
		l := string(raw[:i])
		raw = raw[i+1:]
		return l, true
	}
	var status string
	if c.Fingerprint, ok = line(); !ok {
		return cached{}, false
	}
	if status, ok = line(); !ok {
		return cached{}, false
	}
	n, err := strconv.Atoi(status)
	if err != nil {
		return cached{}, false
	}
	c.Response.Status = n
	for {
		h, ok := line()
		if !ok {
			return cached{}, false
		}
		if h == "" {
			break
		}
		name, value, found := strings.Cut(h, ": ")
		if !found {
			return cached{}, false
		}
		if c.Response.Header == nil {
			c.Response.Header = map[string]string{}
		}
		c.Response.Header[name] = value
	}
	c.Response.Body = bytes.Clone(raw)
	return c, true
}

// claimScript is layers 2 and 3 in one round trip: the cached outcome if there is one,
// otherwise the lease taken with SET NX PX and a random owner (ARGV[1]); ARGV[3] = "0" skips
// the lease (NoLock), ARGV[4] = "0" skips the cache (NoCache). The attempt is logged by the
// guard afterwards, off the request's path (attemptLog).
// Answers: {1, outcome} cached, {2} lease taken, {3} lease busy, {0} neither asked.
var claimScript = redis.NewScript(`
if ARGV[4] == '1' then
  local v = redis.call('GET', KEYS[1])
  if v then return {1, v} end
end
if ARGV[3] == '1' then
  if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2} end
  return {3}
end
return {0}
`)

// releaseScript fills the cache with a committed outcome (ARGV[2], unless empty, for ARGV[3]
// ms) and deletes the lease only if it is still ours (compare-and-delete).
var releaseScript = redis.NewScript(`
if ARGV[2] ~= '' then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then return redis.call('DEL', KEYS[2]) end
return 0
`)

// renewScript extends the lease only if it is still ours.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

// claim runs layers 2 and 3: it returns the cached outcome of k, or the lease of k (nil when
// the lock layer is off), or errLockBusy.
func (g *Guard) claim(ctx context.Context, req Request) (*lease, *cached, error) {
	k := req.Key
	if g.rdb == nil || (g.cfg.Lab.NoLock && g.cfg.Lab.NoCache) {
		return nil, nil, nil
	}
	if g.cfg.Lab.RedsyncLock {
		return g.claimRedsync(ctx, k)
	}
	owner := randomToken()
	reply, err := claimScript.Run(ctx, g.rdb, []string{g.cacheKey(k), g.leaseKey(k)},
		owner, g.cfg.LockTTL.Milliseconds(), flag(!g.cfg.Lab.NoLock), flag(!g.cfg.Lab.NoCache)).Slice()
	if err != nil {
		return nil, nil, errors.Join(errRedisDown, err)
	}
	code, _ := reply[0].(int64)
	switch code {
	case 1:
		raw, _ := reply[1].(string)
		c, ok := decodeCached([]byte(raw))
		if !ok {
			return nil, nil, nil // unreadable: let the dedup record answer
		}
		return nil, &c, nil
	case 2:
		return g.newLease(ctx, k, owner), nil, nil
	case 3:
		return nil, nil, errLockBusy
	}
	return nil, nil, nil
}

// claimRedsync is claim with a cache read and a redsync mutex: two round trips instead of
// one, kept to compare the two in the bench.
func (g *Guard) claimRedsync(ctx context.Context, k Key) (*lease, *cached, error) {
	if !g.cfg.Lab.NoCache {
		if c, err := g.cacheGet(ctx, k); c != nil || err != nil {
			return nil, c, err
		}
	}
	if g.cfg.Lab.NoLock {
		return nil, nil, nil
	}
	l, err := g.lockRedsync(ctx, g.leaseKey(k), k)
	return l, nil, err
}

// cacheGet returns the replay cache's outcome of k, or nil: the first round trip of a request
// fenced by its record (Guard.fencedByRecord).
func (g *Guard) cacheGet(ctx context.Context, k Key) (*cached, error) {
	raw, err := g.rdb.Get(ctx, g.cacheKey(k)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil:
		return nil, errors.Join(errRedisDown, err)
	}
	if c, ok := decodeCached(raw); ok {
		return &c, nil
	}
	return nil, nil // unreadable: let the dedup record answer
}

// cachePut stores a committed outcome for CacheTTL; failures are only counted, never fatal.
func (g *Guard) cachePut(ctx context.Context, k Key, c *cached) {
	if g.rdb == nil {
		return
	}
	if err := g.rdb.Set(ctx, g.cacheKey(k), c.encode(), g.cfg.CacheTTL).Err(); err != nil {
		g.metrics.redisErrors.WithLabelValues(layerCache).Inc()
	}
}

// errRedisDown marks a Redis failure that the layer could not step around.
var errRedisDown = errors.New("redis unavailable")

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func randomToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// The lease and its watchdog: the lock a claim took, renewed while the work runs, and its
// release.

// lease is a held lock and its watchdog (I4). Its context is cancelled the moment the lock is
// lost, so work still running under it rolls back instead of committing without the lock.
//
// The watchdog is a timer, not a goroutine: it fires every TTL/3, renews the lease with a
// compare-and-expire script and re-arms itself. redsync has no auto-renewal; this is the
// Redisson-style watchdog the incident asks for.
type lease struct {
	g      *Guard
	key    Key
	ctx    context.Context
	cancel context.CancelCauseFunc

	extend func(ctx context.Context) (bool, error)
	unlock func(ctx context.Context, fill *cached)

	mu       sync.Mutex
	timer    *time.Timer
	released bool
}

// newLease wraps a lease taken by claimScript with owner.
func (g *Guard) newLease(ctx context.Context, k Key, owner string) *lease {
	name := g.leaseKey(k)
	l := g.startLease(ctx, k)
	l.extend = func(ctx context.Context) (bool, error) {
		n, err := renewScript.Run(ctx, g.rdb, []string{name}, owner, g.cfg.LockTTL.Milliseconds()).Int()
		return n == 1, err
	}
	l.unlock = func(ctx context.Context, fill *cached) {
		value, ttl := "", int64(0)
		if fill != nil {
			value, ttl = string(fill.encode()), g.cfg.CacheTTL.Milliseconds()
		}
		if err := releaseScript.Run(ctx, g.rdb, []string{g.cacheKey(k), name}, owner, value, ttl).Err(); err != nil {
			g.metrics.redisErrors.WithLabelValues(layerLock).Inc()
		}
	}
	l.arm()
	return l
}

// lockRedsync takes the redsync mutex name once, without waiting: a busy lock means the
// work is in progress elsewhere.
func (g *Guard) lockRedsync(ctx context.Context, name string, k Key) (*lease, error) {
	m := g.rs.NewMutex(name,
		redsync.WithExpiry(g.cfg.LockTTL),
		redsync.WithTries(1),
		redsync.WithTimeoutFactor(0.5),
	)
	if err := m.TryLockContext(ctx); err != nil {
		var taken *redsync.ErrTaken
		if errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed) {
			return nil, errLockBusy
		}
		return nil, errors.Join(errRedisDown, err)
	}
	l := g.startLease(ctx, k)
	l.extend = m.ExtendContext
	l.unlock = func(ctx context.Context, fill *cached) {
		if fill != nil {
			g.cachePut(ctx, k, fill)
		}
		_, _ = m.UnlockContext(ctx)
	}
	l.arm()
	return l, nil
}

func (g *Guard) startLease(ctx context.Context, k Key) *lease {
	workCtx, cancel := context.WithCancelCause(ctx)
	return &lease{g: g, key: k, ctx: workCtx, cancel: cancel}
}

// arm schedules the next renewal, unless the watchdog is off.
func (l *lease) arm() {
	if l.g.cfg.Lab.NoWatchdog {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.released {
		l.timer = time.AfterFunc(l.g.cfg.LockTTL/3, l.renew)
	}
}

// renew extends the lease once; one failed renewal cancels the work.
func (l *lease) renew() {
	ttl := l.g.cfg.LockTTL
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), ttl/3)
	ok, err := l.extend(ctx)
	cancel()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return
	}
	if ok {
		l.g.metrics.lockExtensions.WithLabelValues("ok").Inc()
		l.arm()
		return
	}
	l.g.metrics.lockExtensions.WithLabelValues("failed").Inc()
	l.g.metrics.lockLost.Inc()
	slog.WarnContext(l.ctx, "idempotency lock lost; cancelling the work",
		"biz_type", l.key.BizType, "biz_key", l.key.BizKey, "scope", l.key.Scope, "err", err)
	l.cancel(ErrLockLost)
}

// release stops the watchdog, fills the cache with fill (if any) and deletes the lock if it
// is still ours. It is safe to call on every path.
func (l *lease) release(ctx context.Context, fill *cached) {
	l.mu.Lock()
	l.released = true
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	l.unlock(ctx, fill)
	l.cancel(nil)
}

// runLocked runs fn while holding the cluster-wide redsync lock name (idemops.RunLocked).
func (g *Guard) runLocked(ctx context.Context, name string, fn func(ctx context.Context) error) (ok bool, err error) {
	if g.rdb == nil {
		return true, fn(ctx) // no Redis: the job's own preconditions keep it correct
	}
	k := Key{Scope: "jobs", BizType: "job", BizKey: name}
	l, err := g.lockRedsync(ctx, g.leaseKey(k), k)
	switch {
	case errors.Is(err, errLockBusy):
		return false, nil
	case err != nil:
		if rerr := g.redisFailed(layerLock, err); rerr != nil {
			return false, rerr
		}
		return true, fn(ctx) // degraded: run on the database preconditions alone
	}
	defer l.release(context.WithoutCancel(ctx), nil)
	return true, fn(l.ctx)
}

// The message marker: Message, the guard of a consumed message, filters copies with a Redis
// marker (SET NX EX) before the dedup record.

// errMessageInFlight means another consumer is processing a copy of this message right now;
// the caller must not acknowledge it, and the broker redelivers it later. It is ErrKeyInUse
// to errors.Is.
var errMessageInFlight = &Error{Code: ErrKeyInUse.Code, Detail: "a copy of this message is being processed; do not acknowledge it"}

// releaseMarkerScript deletes a "processing" marker only if this consumer set it.
var releaseMarkerScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Message processes a consumed message exactly once (000 §4.4). Redis SET NX EX is the first
// filter: a copy whose marker says "done" is a duplicate and may be acknowledged at once.
// Otherwise the message goes through Do, whose dedup record in the consumer's transaction is
// the backstop — and the same record an HTTP copy of the same business fact converges on (I1).
//
// The caller acknowledges when err is nil (executed or replayed) and also on ErrKeyReused (a
// deterministic refusal); on any other error it must not, so that the message is redelivered:
// ErrKeyInUse while another consumer processes a copy of it.
// A work outcome that is not stored (see storable) is such an error.
func (g *Guard) Message(ctx context.Context, req Request, work Work) (Result, error) {
	if g.rdb == nil {
		return g.messageWithoutMarker(ctx, req, work)
	}
	marker := g.markerKey(req.Key)
	owner := fmt.Sprintf("processing:%.16s:%s", req.Fingerprint, randomSuffix())
	set, err := g.rdb.SetNX(ctx, marker, owner, g.cfg.LockTTL).Result()
	switch {
	case err != nil:
		if err := g.redisFailed(layerMessage, err); err != nil {
			return Result{Outcome: Unavailable, Layer: layerMessage}, err
		}
	case !set:
		v, gerr := g.rdb.Get(ctx, marker).Result()
		if gerr == nil && strings.HasPrefix(v, "done") {
			res := Result{Outcome: Replayed, Layer: layerMessage}
			g.observe(ctx, req.Key, res, nil, time.Now())
			return res, nil
		}
		if gerr == nil {
			return Result{Outcome: InProgress, Layer: layerMessage}, errMessageInFlight
		}
		// The marker vanished between the two calls: let the backstop decide.
	}

	res, err := g.Do(ctx, req, work)
	if err == nil && !storable(res.Response.Status) {
		// Rolled back and not stored (5xx, 401 …): nothing happened, so this copy must be
		// redelivered, neither acknowledged nor marked done.
		err = fmt.Errorf("the work answered %d: nothing stored, redeliver", res.Response.Status)
	}
	bg := context.WithoutCancel(ctx)
	if err == nil {
		_ = g.rdb.Set(bg, marker, "done", g.cfg.MessageTTL).Err()
	} else if set {
		_ = releaseMarkerScript.Run(bg, g.rdb, []string{marker}, owner).Err()
	}
	return res, err
}

// messageWithoutMarker is Message on a guard without Redis: the dedup record alone.
func (g *Guard) messageWithoutMarker(ctx context.Context, req Request, work Work) (Result, error) {
	res, err := g.Do(ctx, req, work)
	if err == nil && !storable(res.Response.Status) {
		err = fmt.Errorf("the work answered %d: nothing stored, redeliver", res.Response.Status)
	}
	return res, err
}

func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
