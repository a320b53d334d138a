package idempotent

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/internal/labkit"
)

// Config tunes the layers and plugs the guard into its service. Every field is optional; the
// zero value of each takes the default it names.
type Config struct {
	// LockTTL is the lease of the lock layer; the watchdog renews it every LockTTL/3. Default 30s.
	LockTTL time.Duration
	// TokenTTL is how long an issued one-time token stays usable. Default 10m.
	TokenTTL time.Duration
	// Retention is how long dedup records are kept (expires_at). Default 720h.
	Retention time.Duration
	// CacheTTL is how long a finished outcome stays in the replay cache; it must stay within
	// Retention. Default min(24h, Retention).
	CacheTTL time.Duration
	// MessageTTL is how long the consumer's "done" marker lives. Default min(72h, Retention).
	MessageTTL time.Duration
	// KeyPrefix starts every Redis key the guard writes, each of which then goes on with
	// "idem:", so that several deployments can share one Redis. Default none. It must not
	// contain '{' or '}' (the hash tag is ours).
	KeyPrefix string

	// RejectWithoutRedis answers ErrUnavailable while Redis is unreachable instead of letting
	// the Redis layers step aside.
	RejectWithoutRedis bool

	// RetryFor bounds how long the guard keeps running again a transaction the database
	// aborted (dberr.Aborted: a deadlock, a Galera certification conflict) or could not serve
	// (dberr.Unavailable: a Galera node not ready), with a backoff that doubles from 10 ms to
	// 250 ms and its jitter. Past it the attempt is answered ErrUnavailable, a 503 to
	// retry, with nothing stored. On a multi-master cluster a conflict on a hot row is
	// routine, not a bug: four quick reruns within ~200 ms, as the guard once did, still
	// lost to a busy row and answered 500. Default 3s.
	RetryFor time.Duration

	// Now is the wall clock that stamps the dedup records and the purge's cutoff. Default
	// time.Now; a service with a clock seam of its own passes that. A token's expiry never
	// reads it: Redis keeps the expiry, on Redis's clock (IssueToken).
	Now func() time.Time

	// Classify tells the guard what a database error means (package idempotent/dberr).
	// Default: dberr.Classify, which recognises the record's duplicate key on every
	// dialect; mysqlerr, sqliteerr and pgerr classify deadlocks and lock timeouts too.
	Classify func(err error) dberr.Class
	// Reject turns an error returned by the work into the answer to store for it, when the
	// error is a deterministic business refusal (out of stock, illegal state): the
	// transaction is rolled back and the answer is stored alone, so every copy gets it again.
	// ok=false, or nil Reject, stores nothing and returns the error. A Request may override it.
	Reject func(ctx context.Context, err error) (resp Response, ok bool)
	// NewID returns the id of a new dedup record. Default: a random positive int63.
	NewID func() int64
	// RequestID returns the request id carried by ctx, kept on the record for diagnosis.
	RequestID func(ctx context.Context) string
	// Registerer receives the guard's metrics; nil registers nothing.
	Registerer prometheus.Registerer

	// lab weakens or swaps parts of the guard for the bench and the training lab; only
	// package idemlab sets it (idemlab.With).
	lab labkit.Switches
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
	if c.RetryFor <= 0 {
		c.RetryFor = 3 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Classify == nil {
		c.Classify = dberr.Classify
	}
	if c.NewID == nil {
		c.NewID = randomID
	}
	if c.RequestID == nil {
		c.RequestID = func(context.Context) string { return "" }
	}
	return c
}

func randomID() int64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:])>>1) | 1
}

// Guard runs writes exactly once. It is safe for concurrent use.
type Guard struct {
	db        *gorm.DB
	insertSQL string
	rdb       redis.UniversalClient
	rs        *redsync.Redsync
	cfg       settings
	metrics   *metrics
	log       *attemptLog
	flights   flights
	answers   *answers
}

// New returns a guard whose dedup records live in db (table idempotency_records, see
// Record) and whose token, lock and cache layers live in rdb.
//
// rdb may be nil: the guard then runs on the database alone. The dedup record's unique key is
// the fence, as it is while Redis is down, but nothing is degraded, since nothing is missing:
// a copy asks the record first; a copy in flight at this guard waits for the first one's
// answer (flights), one at another instance on the record's row until the first commits; and
// there is no replay cache, no attempt log and no one-time token (a tok_ key is answered
// ErrUnavailable). A request with work outside the transaction
// before it (Before: a call a replay must never repeat) needs the lease and is refused with
// ErrUnavailable; idemops.RunLocked runs its job on the job's own preconditions; Message has no
// marker; idemops.Evict and Purge work on the records alone.
func New(db *gorm.DB, rdb redis.UniversalClient, cfg Config) *Guard {
	g := &Guard{
		db:        db,
		insertSQL: insertSQL(db.Dialector.Name()),
		cfg:       newSettings(cfg),
		metrics:   newMetrics(cfg.Registerer),
	}
	if !isNilClient(rdb) {
		g.rdb, g.rs = rdb, redsync.New(goredis.NewPool(rdb))
	}
	g.log = &attemptLog{g: g}
	g.answers = newAnswers(g.rdb, g.cfg.KeyPrefix+"idem:answers-epoch", g.cfg.CacheTTL)
	return g
}

// isNilClient reports whether rdb is nil, or a nil client of go-redis's own types.
func isNilClient(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// Request is one attempt at a write.
type Request struct {
	// Key names the write.
	Key Key
	// Fingerprint describes the request (see Fingerprint); a key reused with another
	// fingerprint is refused with ErrKeyReused.
	Fingerprint string
	// Via names the path the copy came by ("http", "kafka", "job"), for the attempt log.
	Via string
	// Reject overrides Config.Reject for this request.
	Reject func(ctx context.Context, err error) (Response, bool)
	// Refused, when set, tells a refusal of the work that must not be stored — a channel
	// report with an amount that does not match, so that the corrected copy still applies —
	// from a failure: such an attempt ends Rejected, not Failed, in its answer and its attempt
	// log. Nothing is stored either way. A refusal answers only a key with no committed
	// record: were the work run for a key whose answer the replay cache had lost, the record
	// answers instead (a replay, or the key reused).
	Refused func(err error) bool
	// Before, when set, is the part of the work that must run outside the transaction — a
	// call to another system, such as closing a trade at the payment channel before a cancel
	// — and after the key is claimed, under its lease (I12: a side effect before the key). It
	// runs only for an attempt that will execute: never for a replay (the committed record is
	// asked first, whatever the cache says), a copy in flight (409), a key reused (422) or a
	// token refused (400). Without a lease — Redis unreachable in degrade mode — an attempt
	// with a Before is refused ErrUnavailable, since its outside work would run unguarded.
	// An error from it ends the attempt as the work's would: a refusal Reject renders is
	// stored and replayed, anything else stores nothing.
	Before func(ctx context.Context) error
	// After, when set, runs once the attempt's transaction committed and before its lease is
	// released, for the attempt that executed only, never a replay: the follow-up that needs
	// the committed row (submitting a committed refund to the channel). Its failure does not
	// change the stored answer; the follow-up must be resumable from the committed state.
	After func(ctx context.Context, res Result)
}

// Work is the business change, the whole transaction of one use case in one function. It
// runs inside the guard's transaction and must reach the database through tx only, so that
// its writes commit or roll back together with the dedup record (I3), and it places that
// record itself: record(resp) writes the finished record with the answer to store, in tx,
// where the work calls it — after its new, uncontended rows and before its contended writes
// (stock, balances, a hot status row), so that a duplicate is refused before any hot row is
// locked, and the hot rows stay locked for the fewest round trips (bench/results/dedup-placement.md).
//
// A work that returns nil has called record exactly once. An error that record returns must
// be returned (wrapped or not): a duplicate key means that another attempt got there, and the
// guard answers with that attempt's outcome. Any other error rolls everything back: a
// business refusal that Reject renders is stored alone after the rollback, anything else
// stores nothing, so that a retry runs again.
//
// record sends its INSERT through tx.Statement.ConnPool. A work that sends its statements
// together — its new rows, the record and its contended rows in one multi-statement round
// trip — may hold them there (a ConnPool that queues what is executed on it until the work
// sends the batch): the record then travels at the place the work called it, and its
// failure comes back in the error the work returns. A duplicate key in that error is told
// apart by reading the record: the key's committed record answers the attempt (a replay); no
// record means the duplicate was one of the work's own unique keys, a refusal like any other.
//
// A Response with a 4xx status recorded with a nil error commits with the work's writes: use
// it when a refusal must leave a trace (an anomaly recorded for refund). A status that is
// not storable (5xx, 401, …) makes record return an error: the work returns it, everything
// rolls back, and the response is answered without being stored.
type Work func(ctx context.Context, tx *gorm.DB, record func(Response) error) error

// Respond is the Work of fn, a change that only answers at the end: its writes, then the
// record of its answer. Use cases with contended rows place the record themselves (Work).
func Respond(fn func(ctx context.Context, tx *gorm.DB) (Response, error)) Work {
	return func(ctx context.Context, tx *gorm.DB, record func(Response) error) error {
		resp, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		return record(resp)
	}
}

// Do runs work at most once for req.Key and answers every attempt: the first executes, later
// ones get the stored outcome (Replayed), a concurrent one gets ErrKeyInUse (InProgress), a
// different request under the same key gets ErrKeyReused (Mismatch), and a tok_ key that is
// not a live token of the scope gets ErrTokenInvalid. Errors from work are returned as they
// are, with nothing stored, so that a retry runs again.
func (g *Guard) Do(ctx context.Context, req Request, work Work) (res Result, err error) {
	if g.cfg.Lab.Unguarded {
		return g.unguarded(ctx, req, work)
	}
	start := time.Now()
	var degraded []string // the layers that stepped aside with Redis unreachable
	defer func() {
		if res.Degraded == nil {
			res.Degraded = degraded
		}
		g.observe(ctx, req.Key, res, err, start)
	}()

	// Layer 1, token (I7): a tok_ key must be a live token of this scope.
	if isToken(req.Key.BizKey) {
		if g.rdb == nil {
			return Result{Outcome: Unavailable, Layer: layerToken}, &Error{Code: ErrUnavailable.Code, Detail: "one-time tokens live in Redis, and this service runs its idempotency on the database alone"}
		}
		res, err, done := g.checkToken(ctx, req)
		if done {
			return res, err
		}
		degraded = res.Degraded
	}

	// Layers 2 and 3. A request with work outside the transaction (Before, After) asks the
	// replay cache in Redis and takes the lease (I4) in one round trip: one attempt at a time
	// runs the outside call, and the watchdog cancels the work if the lease is lost. A request
	// without one sends Redis nothing: it asks this guard's own answers, the record's unique
	// key is its fence, and its copies wait for the first (below).
	workCtx := ctx
	fenced := g.fencedByRecord(req)
	var (
		l      *lease
		cached *cached
		gen    int64
		cerr   error
	)
	if fenced {
		cached, gen, cerr = g.answers.get(ctx, req.Key)
	} else {
		l, cached, cerr = g.claim(ctx, req)
	}
	switch {
	case errors.Is(cerr, errLockBusy):
		return g.logged(ctx, req, Result{Outcome: InProgress, Layer: layerLock}, ErrKeyInUse, start, http.StatusConflict)
	case cerr != nil:
		if err := g.redisFailed(layerCache, cerr); err != nil {
			return Result{Outcome: Unavailable, Layer: layerCache}, err
		}
		degraded = append(degraded, layerCache, layerLock)
	case cached != nil && cached.Fingerprint != req.Fingerprint:
		return g.logged(ctx, req, Result{Outcome: Mismatch, Layer: layerCache}, ErrKeyReused, start, cached.Response.Status)
	case cached != nil:
		return g.logged(ctx, req, Result{Response: cached.Response, Outcome: Replayed, Layer: layerCache}, nil, start, cached.Response.Status)
	case l != nil:
		workCtx = l.ctx
	}
	at := attempted{redisUp: cerr == nil, gen: gen}
	if req.Before != nil && l == nil && !g.cfg.Lab.NoLock {
		err := &Error{Code: ErrUnavailable.Code, Detail: "the request's work outside the transaction must run under its idempotency lease, and redis is unavailable"}
		if g.rdb == nil {
			err.Detail = "the request's work outside the transaction must run under its idempotency lease, which needs Redis"
		}
		g.finish(ctx, req, l, Result{}, err, start, at)
		return Result{Outcome: Unavailable, Layer: layerLock}, err
	}

	// With no replay cache to ask (turned off, or Redis down), a duplicate would run the
	// work only to have its record refused at the end: ask the record first. So does a
	// request with work outside the transaction, which a replay must never repeat.
	noCache := (g.cfg.Lab.NoCache || cerr != nil || g.rdb == nil) && !g.cfg.Lab.RecordFirst
	if noCache || req.Before != nil {
		if res, found, err := g.fromRecord(ctx, req); found || err != nil {
			g.finish(ctx, req, l, res, err, start, at)
			return res, err
		}
	}

	defer func() {
		if p := recover(); p != nil {
			// A panicking work must not hold the lease.
			g.finish(ctx, req, l, Result{}, errPanicked, start, at)
			panic(p)
		}
	}()

	if l != nil && g.cfg.Lab.ForgetLease != nil && g.cfg.Lab.ForgetLease(workCtx, req.Key) {
		_ = g.rdb.Del(ctx, g.leaseKey(req.Key)).Err() // the failover of I15, modelled
	}
	if g.cfg.Lab.BeforeWork != nil {
		if err := g.cfg.Lab.BeforeWork(workCtx, req.Key); err != nil {
			g.finish(ctx, req, l, Result{}, err, start, at)
			return Result{}, err
		}
	}

	// The work outside the transaction, under the lease (I12).
	if req.Before != nil {
		if berr := req.Before(workCtx); berr != nil {
			res, err = g.refused(workCtx, req, berr)
			g.finish(ctx, req, l, res, err, start, at)
			return res, err
		}
	}

	// Layer 4, the dedup record (I3): in the work's own transaction. Without a lease the
	// copies of this request at this guard wait for the first one's answer (flights), holding
	// no database connection; a copy at another instance waits on the first one's uncommitted
	// record, then replays it: at most one connection per instance and key.
	if l == nil && (fenced || g.rdb == nil || cerr != nil) {
		name := answerName(req.Key) + "\x00" + req.Fingerprint
		first := false
		res, err = g.flights.do(workCtx, name, func() (Result, error) {
			first = true
			return g.runOnce(workCtx, req, work)
		})
		if !first {
			// The first copy's answer was read under its generation, not this copy's: it
			// keeps it, and a drop between the two must not be undone here.
			at.gen = -1
		}
	} else {
		res, err = g.runOnce(workCtx, req, work)
	}
	if err == nil && res.Outcome == Executed && res.Rejection == nil && req.After != nil {
		req.After(workCtx, res)
	}
	g.finish(ctx, req, l, res, err, start, at)
	return res, err
}

// fencedByRecord reports whether req is fenced by its dedup record alone, with no lease: it
// has no work outside the transaction, which its record could not undo or fence. Such a
// request sends Redis nothing on its path, where a leased one runs the claim and release
// scripts: its replays come from this guard's answers (answers) or, at another instance, from
// the committed record its transaction meets; its copies wait for the first one's answer
// instead of being refused ErrKeyInUse. Only its attempt log goes to Redis, in batches off
// the path. The bench's and the lab's switches model the leased designs, and keep the lease.
func (g *Guard) fencedByRecord(req Request) bool {
	return req.Before == nil && req.After == nil && g.rdb != nil && !g.cfg.Lab.set()
}

// errPanicked stands for the error of an attempt whose work panicked, in its attempt log.
var errPanicked = errors.New("the work panicked")

// attempted is what the guard learned before the work: whether Redis answered, and the
// generation of this guard's answers that a fenced request keeps its answer under.
type attempted struct {
	redisUp bool
	gen     int64
}

// finish releases the lease, fills the replay cache with a committed outcome and logs the
// attempt, in one round trip where the lease allows it; a fenced request keeps its answer in
// this guard's memory instead. at.redisUp is false when the claim or the read of the answers'
// epoch found Redis unreachable: then nothing is kept or sent.
func (g *Guard) finish(ctx context.Context, req Request, l *lease, res Result, err error, start time.Time, at attempted) {
	var fill *cached
	if !g.cfg.Lab.NoCache && storable(res.Response.Status) &&
		(res.Outcome == Executed || (res.Outcome == Replayed && res.Layer == layerDedup)) {
		fill = &cached{Fingerprint: req.Fingerprint, Response: res.Response.replayable()}
	}
	bg := context.WithoutCancel(ctx)
	switch {
	case l != nil:
		l.release(bg, fill)
	case !at.redisUp || g.rdb == nil || (g.cfg.Lab.NoLock && g.cfg.Lab.NoCache):
		return
	case g.fencedByRecord(req):
		if fill != nil {
			g.answers.keep(req.Key, fill, at.gen)
		}
	case fill != nil:
		g.cachePut(bg, req.Key, fill)
	}
	g.log.add(req.Key, g.newAttempt(ctx, req, res, err, start))
}

// logged returns res and err, an answer from the claim alone (a replay from the cache, a key
// reused, a copy in flight), once the attempt is queued for the key's log with status: the
// stored answer's, or the 409 of a copy in flight.
func (g *Guard) logged(ctx context.Context, req Request, res Result, err error, start time.Time, status int) (Result, error) {
	a := g.newAttempt(ctx, req, res, err, start)
	a.status = status
	g.log.add(req.Key, a)
	return res, err
}

// redisFailed decides what a Redis failure in a layer means: nil lets the layer step aside
// (degrade), an error refuses the request (reject).
func (g *Guard) redisFailed(layer string, err error) error {
	g.metrics.redisErrors.WithLabelValues(layer).Inc()
	if g.cfg.RejectWithoutRedis {
		return &Error{Code: ErrUnavailable.Code, Detail: "redis is unavailable (" + layer + " layer) and the guard rejects without it"}
	}
	return nil
}

// errNotStored rolls back a transaction whose outcome must not be stored (5xx, 401, …).
var errNotStored = errors.New("outcome not storable")

// runOnce runs the dedup transaction, again when the database aborted it (a deadlock, a
// Galera certification conflict) or could not serve it (a Galera node not ready): such a
// transaction left nothing behind, so running it again is safe — and were its commit in
// truth applied, the rerun's record would meet the committed one as a duplicate and replay
// it. The reruns back off, doubling from 10 ms to 250 ms with jitter, for Config.RetryFor at
// most; a transaction still refused then, or one whose statement waited out the lock wait
// timeout, is answered errDatabaseBusy (503 to retry), with nothing stored — never as an
// unexpected error (500).
func (g *Guard) runOnce(ctx context.Context, req Request, work Work) (Result, error) {
	start := time.Now()
	backoff := 10 * time.Millisecond
	var lost lostCommits
	for attempt := 1; ; attempt++ {
		res, err := g.tryOnce(ctx, req, work, &lost)
		if err == nil {
			return res, nil
		}
		class := g.cfg.Classify(err)
		if errors.Is(err, ErrStale) {
			class = dberr.Aborted
		}
		switch {
		case class == dberr.LockWait:
			return g.busy(attempt, start, err)
		case class != dberr.Aborted && class != dberr.Unavailable && class != dberr.ConnectionLost:
			return res, err
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		if time.Since(start)+sleep > g.cfg.RetryFor {
			return g.busy(attempt, start, err)
		}
		g.metrics.retries.Inc()
		select {
		case <-ctx.Done():
			return Result{}, errors.Join(err, context.Cause(ctx))
		case <-time.After(sleep):
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// busy answers an attempt whose transaction the database kept refusing: errDatabaseBusy,
// which carries the code unavailable, wrapping the database's last error for the log.
func (g *Guard) busy(attempts int, start time.Time, err error) (Result, error) {
	g.metrics.busy.Inc()
	return Result{Outcome: Unavailable, Layer: layerWork},
		fmt.Errorf("%w (%d attempts in %s): %w", errDatabaseBusy, attempts, time.Since(start).Round(time.Millisecond), err)
}

// Errors of a work that did not keep Work's rules; each rolls the transaction back.
var (
	errNotRecorded   = errors.New("idempotent: the work returned nil without calling record")
	errRecordedTwice = errors.New("idempotent: the work called record twice")
	errRecordFailed  = errors.New("idempotent: the record's statement failed")
)

// lostCommit is an earlier attempt of one Do whose COMMIT lost its answer while its record
// was not to be found yet: the server may still have been committing it. Its record's id
// tells a later attempt that meets the record whether the commit was this call's own.
type lostCommit struct {
	id   int64    // the record's id
	resp Response // the answer that attempt recorded
}

// lostCommits are the lost COMMITs of one Do, in the order they were lost.
type lostCommits []lostCommit

// answer is the answer of the lost commit whose record has id, if it is one of them.
func (l lostCommits) answer(id int64) (Response, bool) {
	for _, c := range l {
		if c.id == id {
			return c.resp, true
		}
	}
	return Response{}, false
}

// tryOnce is the transaction that makes the write exactly-once: begin, the work — which
// writes the finished dedup record where it calls record — and commit. With RecordFirst the
// record is inserted PROCESSING before the work and completed where the work calls record.
// lost holds the lost COMMITs of the call's earlier attempts that were not resolved (runOnce).
func (g *Guard) tryOnce(ctx context.Context, req Request, work Work, lost *lostCommits) (Result, error) {
	rec := g.newRecord(ctx, req)
	var (
		resp      Response
		recorded  bool
		recordErr error // the record's own statement failed: a duplicate key, say
		workDone  bool  // the work returned, recorded: what fails after this is the COMMIT
	)
	err := g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if g.cfg.Lab.RecordFirst {
			if err := g.insertRecord(ctx, tx, rec); err != nil {
				recordErr = err
				return err
			}
		}
		record := func(r Response) error {
			if recorded {
				return errRecordedTwice
			}
			recorded, resp = true, r
			if !storable(r.Status) {
				return errNotStored
			}
			rec.finish(r, g.cfg.Now())
			var err error
			if g.cfg.Lab.RecordFirst {
				err = tx.Model(rec).Select("status", "response_status", "response_headers", "response_body", "updated_at").Updates(rec).Error
			} else {
				err = g.insertRecord(ctx, tx, rec)
			}
			if err != nil {
				recordErr = err
				return errors.Join(errRecordFailed, err)
			}
			return nil
		}
		if err := work(ctx, tx, record); err != nil {
			return err
		}
		if !recorded {
			return errNotRecorded
		}
		workDone = true
		return nil
	})
	if err != nil && workDone && recordErr == nil && g.cfg.Classify(err) == dberr.ConnectionLost {
		return g.resolveCommit(ctx, req, rec.ID, resp, err, lost)
	}
	switch {
	case err == nil:
		return Result{Response: resp, Outcome: Executed, Layer: layerWork}, nil
	case errors.Is(err, errNotStored):
		return Result{Response: resp, Outcome: Executed, Layer: layerWork}, nil
	case recordErr != nil:
		return g.afterRecordFailed(ctx, req, recordErr, *lost)
	case recorded && g.cfg.Classify(err) == dberr.DuplicateKey:
		return g.afterDuplicate(ctx, req, err, *lost)
	}
	return g.refused(ctx, req, err)
}

// afterDuplicate answers an attempt whose work returned a duplicate key after it called
// record, when record itself reported no error: the work sent its statements together
// (the record's INSERT held with its other rows, in one round trip), so the duplicate may be
// the record's — another attempt committed the key — or one of the work's own unique keys.
// The record tells: a committed record of the key answers as it says (a replay, a key reused,
// or this call's own lost commit); no record means the work's own key refused the write, a
// refusal like any other (Reject may store it).
func (g *Guard) afterDuplicate(ctx context.Context, req Request, err error, lost lostCommits) (Result, error) {
	res, recID, found, ferr := g.fromRecordID(context.WithoutCancel(ctx), req)
	switch {
	case ferr != nil && !found:
		// Whose the duplicate was is unknown until the record can be read: the error is the
		// read's, so that runOnce runs the transaction again while the database is out of
		// reach (and the rerun meets the record again) — never the duplicate's, which would
		// reach the caller as an unexpected error.
		return Result{}, fmt.Errorf("idempotent: the record of a duplicate key (%v) could not be read: %w", err, ferr)
	case !found:
		return g.refused(ctx, req, err)
	}
	if resp, own := lost.answer(recID); own {
		return Result{Response: resp, Outcome: Executed, Layer: layerWork}, nil
	}
	return res, ferr
}

// resolveCommit answers an attempt whose COMMIT lost its answer with its connection (the
// commit_answer_lost fault of the chaos run; docs/incidents.md, I3): the transaction committed
// or it did not, and only the record, read on another connection, can tell. Found with this attempt's id (id),
// the commit was applied and the attempt executed; found otherwise, it is answered as the
// record says. Not found (or the database still out of reach), the error goes back to
// runOnce, which runs the transaction again, and the attempt is remembered in lost: the
// server may still be committing it (it had the COMMIT, not yet applied, when the record was
// read), and then the rerun's record meets it as a duplicate — afterRecordFailed knows it by
// its id and answers executed with this attempt's answer. Never a second effect either way.
func (g *Guard) resolveCommit(ctx context.Context, req Request, id int64, resp Response, err error, lost *lostCommits) (Result, error) {
	g.metrics.indefinite.Inc()
	res, recID, found, ferr := g.fromRecordID(context.WithoutCancel(ctx), req)
	if !found {
		*lost = append(*lost, lostCommit{id: id, resp: resp})
		if ferr != nil {
			// The lost COMMIT's error leads: runOnce classifies it and runs the transaction again.
			return Result{}, fmt.Errorf("%w (and its record could not be read: %v)", err, ferr)
		}
		return Result{}, err
	}
	if recID == id {
		return Result{Response: resp, Outcome: Executed, Layer: layerWork}, nil
	}
	return res, ferr
}

// refused answers an attempt whose work (or Before) returned err, its transaction rolled
// back: a lost lease says so, a business refusal Reject renders is stored alone, anything
// else is returned with nothing stored.
func (g *Guard) refused(ctx context.Context, req Request, err error) (Result, error) {
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, ErrLockLost) {
		return Result{}, errors.Join(err, cause)
	}
	if resp, ok := g.reject(ctx, req, err); ok {
		return g.storeRejection(ctx, req, resp, err)
	}
	if req.Refused != nil && req.Refused(err) {
		// A refusal that is not stored answers only a key with no committed record. The work
		// may have run without the replay cache's answer — an entry Redis lost, a restart
		// that emptied it — and then a copy of a committed request, or its key reused with
		// another body, is the record's to answer: never the work's refusal, on which the
		// caller may act (a channel report's anomaly), as nothing may happen before the key.
		switch res, found, ferr := g.fromRecord(context.WithoutCancel(ctx), req); {
		case found:
			return res, ferr
		case ferr != nil:
			return Result{}, ferr
		}
		return Result{Outcome: Rejected, Layer: layerWork}, err
	}
	return Result{}, err
}

// afterRecordFailed answers an attempt whose dedup record could not be written: another
// attempt holds or committed the key (I3, I10: the stale writer's whole transaction is gone),
// or an earlier attempt of this same call did, whose COMMIT lost its answer (lost).
func (g *Guard) afterRecordFailed(ctx context.Context, req Request, err error, lost lostCommits) (Result, error) {
	switch g.cfg.Classify(err) {
	case dberr.DuplicateKey:
		res, recID, found, ferr := g.fromRecordID(context.WithoutCancel(ctx), req)
		if !found && ferr == nil {
			return Result{Outcome: InProgress, Layer: layerDedup}, ErrKeyInUse
		}
		if resp, own := lost.answer(recID); found && own {
			return Result{Response: resp, Outcome: Executed, Layer: layerWork}, nil
		}
		return res, ferr
	case dberr.LockWait:
		// The first attempt still holds the key after the lock wait timeout: it is in
		// progress; running the insert again would only wait again.
		return Result{Outcome: InProgress, Layer: layerDedup}, ErrKeyInUse
	}
	return Result{}, err
}

// reject renders a work error as a storable business refusal, if it is one: as Reject
// renders it, else as the 409 of an error the work marked with Conflict.
func (g *Guard) reject(ctx context.Context, req Request, err error) (Response, bool) {
	render := req.Reject
	if render == nil {
		render = g.cfg.Reject
	}
	if render != nil {
		if resp, ok := render(ctx, err); ok && storable(resp.Status) {
			return resp, true
		}
	}
	return g.conflictResponse(ctx, err)
}

// storeRejection stores a business refusal alone, after its transaction rolled back: the
// refusal changed nothing, so its record commits with nothing else. A copy that committed
// first wins and is answered instead.
func (g *Guard) storeRejection(ctx context.Context, req Request, resp Response, cause error) (Result, error) {
	rec := g.newRecord(ctx, req)
	rec.finish(resp, g.cfg.Now())
	if err := g.insertRecord(ctx, g.db, rec); err != nil {
		return g.afterRecordFailed(ctx, req, err, nil)
	}
	return Result{Response: resp, Outcome: Executed, Layer: layerWork, Rejection: cause}, nil
}

// fromRecord answers from the committed record of req.Key, if there is one.
func (g *Guard) fromRecord(ctx context.Context, req Request) (Result, bool, error) {
	res, _, found, err := g.fromRecordID(ctx, req)
	return res, found, err
}

// fromRecordID is fromRecord that also returns the id of the record it read (0 when none):
// the id of an attempt's own record tells its commit from another's.
func (g *Guard) fromRecordID(ctx context.Context, req Request) (Result, int64, bool, error) {
	rec, found, err := loadRecord(ctx, g.db, req.Key)
	switch {
	case err != nil || !found:
		return Result{}, 0, false, err
	case rec.Fingerprint != req.Fingerprint:
		return Result{Outcome: Mismatch, Layer: layerDedup}, rec.ID, true, ErrKeyReused
	case rec.Status != statusCompleted:
		return Result{Outcome: InProgress, Layer: layerDedup}, rec.ID, true, ErrKeyInUse
	}
	return Result{Response: rec.response(), Outcome: Replayed, Layer: layerDedup}, rec.ID, true, nil
}

// observe counts the outcome and writes the log line of an attempt that lets a person answer
// the articles' diagnosis from the logs (request_id, biz_type, biz_key, outcome): at Info for
// an attempt that ran the work or was refused, at Warn for an error. A copy — a replay, a
// copy in flight — is logged at Debug only: a storm of copies would otherwise write a line
// each, a sixth of a replay's cost, while the outcome counter and the key's attempt log
// (Attempts) already say how many came and when.
func (g *Guard) observe(ctx context.Context, k Key, res Result, err error, start time.Time) {
	outcome := res.Outcome
	if outcome == "" {
		outcome = "error"
	}
	g.metrics.outcomes.WithLabelValues(k.BizType, res.Layer, string(outcome)).Inc()
	level := slog.LevelInfo
	switch outcome {
	case "error":
		level = slog.LevelWarn
	case Replayed, InProgress:
		level = slog.LevelDebug
	}
	if !slog.Default().Enabled(ctx, level) {
		return
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

// The record: a row of idempotency_records, written in the work's transaction; its unique
// index is the guarantee (I3).

// Record statuses (Record.Status).
const (
	statusProcessing = "PROCESSING"
	statusCompleted  = "COMPLETED"
)

// Record is a row of idempotency_records: the dedup table (I3). Its unique index on
// (scope, biz_type, biz_key) is the guarantee; request_id is kept for diagnosis and is not
// unique, because every copy of a request may carry its own. Schema holds its DDL.
type Record struct {
	ID          int64
	Scope       string
	BizType     string
	BizKey      string
	RequestID   string
	Fingerprint string
	// Status is "COMPLETED" for a committed outcome. A record is only ever written
	// COMPLETED, unless idemlab's RecordFirst inserts it "PROCESSING" and completes it in
	// the same transaction.
	Status          string
	ResponseStatus  int
	ResponseHeaders string
	ResponseBody    []byte
	CreatedAt       time.Time
	UpdatedAt       time.Time
	ExpiresAt       time.Time
}

// TableName is the table of Record.
func (Record) TableName() string { return "idempotency_records" }

// Schema is the DDL of idempotency_records for MySQL 8 / MariaDB ("mysql"), SQLite ("sqlite")
// and PostgreSQL ("postgres"), keyed by gorm's dialector name: the one definition of the
// table; oncepay's migrations must produce exactly it (a test holds them equal). Statements
// are separated by ";\n". Keys compare byte for byte — VARBINARY on MySQL, which neither folds
// case nor pads trailing spaces; a deterministic collation on PostgreSQL — so CaseKey and
// casekey are two keys, as in Redis. (On PostgreSQL a key must be valid UTF-8 without NUL.)
var Schema = map[string]string{
	"mysql": `CREATE TABLE idempotency_records (
  id                BIGINT       NOT NULL PRIMARY KEY,
  scope             VARBINARY(128) NOT NULL,
  biz_type          VARBINARY(64)  NOT NULL,
  biz_key           VARBINARY(255) NOT NULL,
  request_id        VARCHAR(128) NOT NULL,
  fingerprint       CHAR(64)     NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  response_status   INT          NOT NULL DEFAULT 0,
  response_headers  TEXT         NULL,
  response_body     MEDIUMBLOB   NULL,
  created_at        DATETIME(6)  NOT NULL,
  updated_at        DATETIME(6)  NOT NULL,
  expires_at        DATETIME(6)  NOT NULL,
  UNIQUE KEY uk_idempotency_key (scope, biz_type, biz_key),
  KEY idx_idempotency_created (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
	"sqlite": `CREATE TABLE idempotency_records (
  id                INTEGER      NOT NULL PRIMARY KEY,
  scope             VARCHAR(128) NOT NULL,
  biz_type          VARCHAR(64)  NOT NULL,
  biz_key           VARCHAR(255) NOT NULL,
  request_id        VARCHAR(128) NOT NULL,
  fingerprint       CHAR(64)     NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  response_status   INT          NOT NULL DEFAULT 0,
  response_headers  TEXT         NULL,
  response_body     BLOB         NULL,
  created_at        DATETIME     NOT NULL,
  updated_at        DATETIME     NOT NULL,
  expires_at        DATETIME     NOT NULL
);
CREATE UNIQUE INDEX uk_idempotency_key ON idempotency_records (scope, biz_type, biz_key);
CREATE INDEX idx_idempotency_created ON idempotency_records (created_at)`,
	"postgres": `CREATE TABLE idempotency_records (
  id                BIGINT       NOT NULL PRIMARY KEY,
  scope             VARCHAR(128) NOT NULL,
  biz_type          VARCHAR(64)  NOT NULL,
  biz_key           VARCHAR(255) NOT NULL,
  request_id        VARCHAR(128) NOT NULL,
  fingerprint       CHAR(64)     NOT NULL,
  status            VARCHAR(16)  NOT NULL,
  response_status   INT          NOT NULL DEFAULT 0,
  response_headers  TEXT         NULL,
  response_body     BYTEA        NULL,
  created_at        TIMESTAMP(6) NOT NULL,
  updated_at        TIMESTAMP(6) NOT NULL,
  expires_at        TIMESTAMP(6) NOT NULL,
  CONSTRAINT uk_idempotency_key UNIQUE (scope, biz_type, biz_key)
);
CREATE INDEX idx_idempotency_created ON idempotency_records (created_at)`,
}

// CreateSchema creates idempotency_records in db (Schema, in db's dialect) unless it exists:
// for a service without migrations of its own. A service with migrations puts Schema in them.
func CreateSchema(db *gorm.DB) error {
	if db.Migrator().HasTable(Record{}.TableName()) {
		return nil
	}
	ddl, ok := Schema[db.Dialector.Name()]
	if !ok {
		return fmt.Errorf("idempotent: no schema for the %s dialect; create idempotency_records like Schema's", db.Dialector.Name())
	}
	for _, stmt := range strings.Split(ddl, ";\n") {
		if err := db.Exec(stmt).Error; err != nil {
			return fmt.Errorf("idempotent: create idempotency_records: %w", err)
		}
	}
	return nil
}

func (g *Guard) newRecord(ctx context.Context, req Request) *Record {
	now := g.cfg.Now().UTC()
	return &Record{
		ID: g.cfg.NewID(), Scope: req.Key.Scope, BizType: req.Key.BizType, BizKey: req.Key.BizKey,
		RequestID: g.cfg.RequestID(ctx), Fingerprint: req.Fingerprint, Status: statusProcessing,
		CreatedAt: now, UpdatedAt: now, ExpiresAt: now.Add(g.cfg.Retention),
	}
}

// finish puts the outcome on the record, its headers cut to those replayed (replayable).
func (r *Record) finish(resp Response, now time.Time) {
	resp = resp.replayable()
	headers, _ := json.Marshal(resp.Header)
	r.Status = statusCompleted
	r.ResponseStatus = resp.Status
	r.ResponseHeaders = string(headers)
	r.ResponseBody = resp.Body
	r.UpdatedAt = now.UTC()
}

func (r Record) response() Response {
	resp := Response{Status: r.ResponseStatus, Body: r.ResponseBody}
	if r.ResponseHeaders != "" {
		_ = json.Unmarshal([]byte(r.ResponseHeaders), &resp.Header)
	}
	return resp
}

// insertSQL is the record's INSERT in the placeholder style of the database's dialect ("?",
// or "$1…" on PostgreSQL), written out: it runs on every new key, and gorm's reflection over
// the struct cost more than the statement's round trip on a loaded machine.
func insertSQL(dialect string) string {
	marks := strings.TrimSuffix(strings.Repeat("?,", 13), ",")
	if dialect == "postgres" {
		n := make([]string, 13)
		for i := range n {
			n[i] = "$" + strconv.Itoa(i+1)
		}
		marks = strings.Join(n, ",")
	}
	return "INSERT INTO idempotency_records (id, scope, biz_type, biz_key, request_id, fingerprint, status, " +
		"response_status, response_headers, response_body, created_at, updated_at, expires_at) VALUES (" + marks + ")"
}

// insertRecord inserts rec on db (a transaction, or the pool for a record stored alone). Its
// statement bypasses gorm, so the dialect's own translation of the error is applied here: a
// duplicate key is gorm.ErrDuplicatedKey (which the default Classify knows) whatever the
// gorm.Config, with the driver's error kept in the chain for a Classify of the caller's.
func (g *Guard) insertRecord(ctx context.Context, db *gorm.DB, rec *Record) error {
	_, err := db.Statement.ConnPool.ExecContext(ctx, g.insertSQL,
		rec.ID, rec.Scope, rec.BizType, rec.BizKey, rec.RequestID, rec.Fingerprint, rec.Status,
		rec.ResponseStatus, rec.ResponseHeaders, rec.ResponseBody, rec.CreatedAt, rec.UpdatedAt, rec.ExpiresAt)
	if t, ok := db.Dialector.(gorm.ErrorTranslator); ok && err != nil {
		if translated := t.Translate(err); translated != err {
			return fmt.Errorf("%w: %w", translated, err)
		}
	}
	return err
}

// loadRecord reads the committed record of key, outside any transaction.
func loadRecord(ctx context.Context, db *gorm.DB, k Key) (Record, bool, error) {
	var row recordRow // its times read whatever the driver's parseTime (recordRow)
	err := db.WithContext(ctx).
		Where("scope = ? AND biz_type = ? AND biz_key = ?", k.Scope, k.BizType, k.BizKey).
		Take(&row).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Record{}, false, nil
	}
	return row.record(), err == nil, err
}

// Lookup returns the committed record of k, for operators and diagnosis.
func (g *Guard) Lookup(ctx context.Context, k Key) (Record, bool, error) {
	return loadRecord(ctx, g.db, k)
}

// inFlight reports whether an attempt at k holds its lease right now (idemops.InFlight).
func (g *Guard) inFlight(ctx context.Context, k Key) (bool, time.Duration, error) {
	if g.rdb == nil {
		return false, 0, nil // no lease to ask: a copy in flight is an uncommitted row
	}
	ttl, err := g.rdb.PTTL(ctx, g.leaseKey(k)).Result()
	if err != nil {
		return false, 0, err
	}
	return ttl > 0, max(ttl, 0), nil
}

// The guard's inputs: the key, its validation, and the request's fingerprint.

// Key names one write. Scope is whose key it is (a user id, or a payment channel for
// notifications), BizType what kind of write it is, and BizKey the key itself: a client's
// Idempotency-Key, or a business key such as the channel's trade_no. The key must come from
// business meaning, never from a device id or an IP (000 §2.2).
type Key struct {
	Scope   string
	BizType string
	BizKey  string
}

func (k Key) String() string { return k.Scope + ":" + k.BizType + ":" + k.BizKey }

// Fingerprint is the SHA-256 of method, request path and the canonical form of a JSON body,
// in hex. Key order and whitespace do not change it; any other difference does. A body that
// is not JSON is hashed as it is.
func Fingerprint(method, route string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", strings.ToUpper(method), route)
	h.Write(canonical(body))
	return hex.EncodeToString(h.Sum(nil))
}

// canonical returns body re-encoded with sorted keys and no insignificant whitespace. Numbers
// keep their exact text. A body that is not valid JSON is returned unchanged.
func canonical(body []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return body
	}
	var buf bytes.Buffer
	writeCanonical(&buf, v)
	return buf.Bytes()
}

func writeCanonical(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			buf.WriteByte(':')
			writeCanonical(buf, t[k])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonical(buf, e)
		}
		buf.WriteByte(']')
	default:
		b, _ := json.Marshal(t)
		buf.Write(b)
	}
}

// ValidKey reports whether a client-supplied Idempotency-Key is usable: 1..255 visible ASCII
// characters.
func ValidKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}
