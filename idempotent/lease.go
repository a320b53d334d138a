package idempotent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
)

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
