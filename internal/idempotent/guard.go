package idempotent

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/database"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/requestid"
)

// Config tunes the layers. The zero value of each duration takes the default given.
type Config struct {
	// LockTTL is the lock lease; the watchdog renews it every LockTTL/3. Default 30s.
	LockTTL time.Duration
	// TokenTTL is how long an issued one-time token stays usable. Default 10m.
	TokenTTL time.Duration
	// Retention is how long dedup records are kept (expires_at). Default 720h.
	Retention time.Duration
	// CacheTTL is how long a finished outcome stays in the replay cache; it must stay within
	// Retention. Default min(24h, Retention).
	CacheTTL time.Duration
	// MessageTTL is how long the consumer's "done" marker lives. Default 72h (within Retention).
	MessageTTL time.Duration
	// RejectWithoutRedis answers 503 while Redis is unreachable instead of letting the Redis
	// layers step aside (ONCEPAY_REDIS_FAILURE_MODE=reject).
	RejectWithoutRedis bool
	// NoLock turns the lock layer off; tests and drills use it to show that the dedup
	// record alone still gives exactly-once.
	NoLock bool
	// NoWatchdog keeps the lock but never renews it: the articles' fixed-TTL lock (I4).
	NoWatchdog bool
	// NoCache turns the replay cache off.
	NoCache bool
	// BeforeWork, when set, runs after the lock is taken and before the dedup transaction
	// begins; an error from it ends the attempt with nothing stored. oncepay uses it for
	// ONCEPAY_CHAOS_PAYMENT_DELAY: a slow upstream held under the lock (I4) without holding a
	// database transaction open.
	BeforeWork func(ctx context.Context, k Key) error
}

func (c Config) withDefaults() Config {
	if c.LockTTL <= 0 {
		c.LockTTL = 30 * time.Second
	}
	if c.TokenTTL <= 0 {
		c.TokenTTL = 10 * time.Minute
	}
	if c.Retention <= 0 {
		c.Retention = 720 * time.Hour
	}
	if c.CacheTTL <= 0 {
		c.CacheTTL = min(24*time.Hour, c.Retention)
	}
	if c.MessageTTL <= 0 {
		c.MessageTTL = min(72*time.Hour, c.Retention)
	}
	return c
}

// Guard runs writes exactly once. It is safe for concurrent use.
type Guard struct {
	db      *gorm.DB
	rdb     redis.UniversalClient
	rs      *redsync.Redsync
	ids     *ids.Generator
	cfg     Config
	metrics *metrics
}

// New returns a guard whose dedup records live in db and whose token, lock and cache layers
// live in rdb. Its metrics are registered with reg.
func New(db *gorm.DB, rdb redis.UniversalClient, gen *ids.Generator, cfg Config, reg prometheus.Registerer) *Guard {
	return &Guard{
		db:      db,
		rdb:     rdb,
		rs:      redsync.New(goredis.NewPool(rdb)),
		ids:     gen,
		cfg:     cfg.withDefaults(),
		metrics: newMetrics(reg),
	}
}

// Request is one attempt at a write.
type Request struct {
	// Key names the write.
	Key Key
	// Fingerprint describes the request (see Fingerprint); a key reused with another
	// fingerprint is refused with idempotency_key_reused.
	Fingerprint string
}

// Work is the business change. It runs inside the dedup transaction: ctx carries it, and the
// work must reach the database through database.Conn(ctx, db) or database.Transaction(ctx,
// db, …) so that its writes commit or roll back together with the dedup record (I3).
type Work func(ctx context.Context) (Response, error)

// Do runs work at most once for req.Key and answers every attempt: the first executes, later
// ones get the stored outcome (Replayed), a concurrent one gets ErrKeyInUse (InProgress), a
// different request under the same key gets ErrKeyReused (Mismatch), and a tok_ key that is
// not a live token of the scope gets ErrTokenInvalid. Errors from work are returned as they
// are, with nothing stored, so that a retry runs again.
func (g *Guard) Do(ctx context.Context, req Request, work Work) (res Result, err error) {
	start := time.Now()
	defer func() { g.observe(ctx, req.Key, res, err, start) }()

	// Layer 1, token (I7): a tok_ key must be a live token of this scope.
	if IsToken(req.Key.BizKey) {
		state, terr := g.consumeToken(ctx, req.Key.Scope, req.Key.BizKey)
		if terr != nil {
			if err := g.redisFailed(LayerToken, terr); err != nil {
				return Result{Outcome: Unavailable, Layer: LayerToken}, err
			}
		} else if state == tokenInvalid {
			// A token used long ago may have expired while its record remains.
			if res, found, err := g.fromRecord(ctx, req); found || err != nil {
				return res, err
			}
			return Result{Outcome: TokenInvalid, Layer: LayerToken}, ErrTokenInvalid
		}
	}

	// Layer 2, replay cache: a finished outcome answers without the database.
	if !g.cfg.NoCache {
		c, ok, cerr := g.cacheGet(ctx, req.Key)
		switch {
		case cerr != nil:
			if err := g.redisFailed(LayerCache, cerr); err != nil {
				return Result{Outcome: Unavailable, Layer: LayerCache}, err
			}
		case ok && c.Fingerprint != req.Fingerprint:
			return Result{Outcome: Mismatch, Layer: LayerCache}, ErrKeyReused
		case ok:
			return Result{Response: c.Response, Outcome: Replayed, Layer: LayerCache}, nil
		}
	}

	// Layer 3, lock (I4): one attempt at a time per key; the watchdog keeps the lease alive
	// and cancels the work if it is lost.
	workCtx := ctx
	if !g.cfg.NoLock {
		l, lerr := g.acquireLock(ctx, req.Key)
		switch {
		case errors.Is(lerr, errLockBusy):
			return Result{Outcome: InProgress, Layer: LayerLock}, ErrKeyInUse
		case lerr != nil:
			if err := g.redisFailed(LayerLock, lerr); err != nil {
				return Result{Outcome: Unavailable, Layer: LayerLock}, err
			}
		default:
			defer l.release()
			workCtx = l.ctx
		}
	}

	if g.cfg.BeforeWork != nil {
		if err := g.cfg.BeforeWork(workCtx, req.Key); err != nil {
			return Result{}, err
		}
	}

	// Layer 4, dedup record (I3): inserted first, in the work's own transaction.
	res, err = g.runOnce(workCtx, req, work)
	if err == nil && res.Outcome == Executed && Storable(res.Response.Status) && !g.cfg.NoCache {
		g.cachePut(context.WithoutCancel(ctx), req.Key, req.Fingerprint, res.Response)
	}
	return res, err
}

// redisFailed decides what a Redis failure in a layer means: nil lets the layer step aside
// (degrade), an error refuses the request (reject).
func (g *Guard) redisFailed(layer Layer, err error) error {
	g.metrics.redisErrors.WithLabelValues(string(layer)).Inc()
	if g.cfg.RejectWithoutRedis {
		return apperr.ErrUnavailable.Withf("redis is unavailable (%s layer) and ONCEPAY_REDIS_FAILURE_MODE=reject", layer)
	}
	return nil
}

// errNotStored rolls back a transaction whose outcome must not be stored (5xx, 401, …).
var errNotStored = errors.New("outcome not storable")

// errInsertWaited rolls back a transaction whose dedup insert timed out behind another attempt.
var errInsertWaited = errors.New("dedup insert waited out the lock wait timeout")

// runOnce runs the dedup transaction, again when the database aborted it (deadlock, lock
// wait timeout): an aborted transaction left nothing behind, so running it again is safe.
func (g *Guard) runOnce(ctx context.Context, req Request, work Work) (Result, error) {
	for attempt := 1; ; attempt++ {
		res, err := g.tryOnce(ctx, req, work)
		if err == nil || !database.IsRetryable(err) || attempt == 4 {
			return res, err
		}
		g.metrics.retries.Inc()
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(time.Duration(attempt*10+rand.IntN(20)) * time.Millisecond):
		}
	}
}

// tryOnce is the transaction that makes the write exactly-once, in the order a reader should
// see it: insert the dedup record, run the work, store its outcome, commit.
func (g *Guard) tryOnce(ctx context.Context, req Request, work Work) (Result, error) {
	now := time.Now().UTC()
	rec := &Record{
		ID: g.ids.Next(), Scope: req.Key.Scope, BizType: req.Key.BizType, BizKey: req.Key.BizKey,
		RequestID: requestid.From(ctx), Fingerprint: req.Fingerprint, Status: StatusProcessing,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(g.cfg.Retention),
	}
	var (
		resp      Response
		duplicate bool
	)
	err := g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := insertRecord(ctx, tx, rec); err != nil {
			duplicate = errors.Is(err, database.ErrDuplicateKey)
			if database.IsLockWaitTimeout(err) {
				// The first attempt still holds the key after innodb_lock_wait_timeout:
				// it is in progress; running the insert again would only wait again.
				return errInsertWaited
			}
			return err
		}
		var err error
		if resp, err = work(database.WithTx(ctx, tx)); err != nil {
			return err
		}
		if !Storable(resp.Status) {
			return errNotStored
		}
		return completeRecord(ctx, tx, rec.ID, resp)
	})
	switch {
	case errors.Is(err, errInsertWaited):
		return Result{Outcome: InProgress, Layer: LayerDedup}, ErrKeyInUse
	case duplicate:
		// Another attempt committed this key (or is committing it): answer from its record.
		res, found, err := g.fromRecord(context.WithoutCancel(ctx), req)
		if !found && err == nil {
			return Result{Outcome: InProgress, Layer: LayerDedup}, ErrKeyInUse
		}
		return res, err
	case errors.Is(err, errNotStored):
		return Result{Response: resp, Outcome: Executed, Layer: LayerWork}, nil
	case err != nil:
		if cause := context.Cause(ctx); cause != nil && errors.Is(cause, ErrLockLost) {
			err = errors.Join(err, cause)
		}
		return Result{}, database.Translate(err)
	}
	return Result{Response: resp, Outcome: Executed, Layer: LayerWork}, nil
}

// fromRecord answers from the committed record of req.Key, if there is one.
func (g *Guard) fromRecord(ctx context.Context, req Request) (Result, bool, error) {
	rec, found, err := loadRecord(ctx, g.db, req.Key)
	switch {
	case err != nil || !found:
		return Result{}, false, err
	case rec.Fingerprint != req.Fingerprint:
		return Result{Outcome: Mismatch, Layer: LayerDedup}, true, ErrKeyReused
	case rec.Status != StatusCompleted:
		return Result{Outcome: InProgress, Layer: LayerDedup}, true, ErrKeyInUse
	}
	resp := rec.response()
	if !g.cfg.NoCache {
		g.cachePut(ctx, req.Key, req.Fingerprint, resp)
	}
	return Result{Response: resp, Outcome: Replayed, Layer: LayerDedup}, true, nil
}

// observe counts the outcome and writes the one log line per attempt that lets a person
// answer the articles' diagnosis from the logs (request_id, biz_type, biz_key, outcome).
func (g *Guard) observe(ctx context.Context, k Key, res Result, err error, start time.Time) {
	outcome := res.Outcome
	if outcome == "" {
		outcome = "error"
	}
	g.metrics.outcomes.WithLabelValues(k.BizType, string(res.Layer), string(outcome)).Inc()
	level := slog.LevelInfo
	if outcome == "error" {
		level = slog.LevelWarn
	}
	slog.Log(ctx, level, "idempotency",
		"biz_type", k.BizType, "biz_key", k.BizKey, "scope", k.Scope,
		"outcome", outcome, "layer", res.Layer, "status", res.Response.Status,
		"duration_ms", float64(time.Since(start).Microseconds())/1000, "err", errString(err))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// redisFailedHard is for operations that cannot step aside (issuing a token): the request
// gets 503 in either failure mode.
func (g *Guard) redisFailedHard(err error) error {
	g.metrics.redisErrors.WithLabelValues(string(LayerToken)).Inc()
	return apperr.ErrUnavailable.Withf("redis is unavailable: cannot issue a token (%v)", err)
}
