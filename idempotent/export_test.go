package idempotent

import "time"

// CacheKey exposes the replay-cache key of k, so that tests can check what Purge drops.
func (g *Guard) CacheKey(k Key) string { return g.cacheKey(k) }

// MarkerKey exposes the consumer marker key of k.
func (g *Guard) MarkerKey(k Key) string { return g.markerKey(k) }

// LeaseKey exposes the Redis key of the lock of k.
func (g *Guard) LeaseKey(k Key) string { return g.leaseKey(k) }

// TokenKey exposes the Redis key of a one-time token, so that tests can expire it.
func (g *Guard) TokenKey(token string) string { return g.tokenKey(token) }

// LogKey exposes the Redis key of the attempt log of k.
func (g *Guard) LogKey(k Key) string { return g.logKey(k) }

// Canonical exposes the canonical form the fingerprint hashes.
var Canonical = canonical

// Storable exposes the rule of which statuses are stored.
var Storable = storable

// TokenPrefix is the prefix of an issued token.
const TokenPrefix = tokenPrefix

// DrainAttemptLog waits until every attempt g has queued for its log has been sent.
func (g *Guard) DrainAttemptLog() {
	for {
		g.log.mu.Lock()
		idle := !g.log.sending && len(g.log.queue) == 0
		g.log.mu.Unlock()
		if idle {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Layer is the type of Result.Layer, and the layers' names, for the tests' tables.
type Layer = string

const (
	LayerToken   = layerToken
	LayerCache   = layerCache
	LayerLock    = layerLock
	LayerDedup   = layerDedup
	LayerMessage = layerMessage
	LayerWork    = layerWork
)

// StatusCompleted is Record.Status of a committed outcome.
const StatusCompleted = statusCompleted

// ErrDatabaseBusy is the ErrUnavailable of a database that kept aborting the transaction.
var ErrDatabaseBusy = errDatabaseBusy

// IsToken reports whether key is a server-issued one-time token.
var IsToken = isToken

// DropAnswers drops the answers g keeps in memory, as a purge or an eviction makes every
// instance do, so that a test can see the record answer a copy.
func (g *Guard) DropAnswers() {
	g.answers.mu.Lock()
	defer g.answers.mu.Unlock()
	g.answers.drop()
}
