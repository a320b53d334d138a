// Package redisx connects oncepay to Redis: a real server when an address is configured, an
// in-process miniredis listening on a TCP port otherwise, so that `make run` needs nothing.
package redisx

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Conn is a Redis client and, when Redis is embedded, the server behind it.
type Conn struct {
	// Client is the go-redis client every layer uses.
	Client *redis.Client
	// Embedded is the in-process server, or nil when Redis is external.
	Embedded *miniredis.Miniredis
}

// Open connects to the logical database db (ONCEPAY_REDIS_DB) of addr, or starts an embedded
// Redis on embeddedAddr when addr is empty and uses its database db.
func Open(addr, embeddedAddr string, db int) (*Conn, error) {
	c := &Conn{}
	if addr == "" {
		m := miniredis.NewMiniRedis()
		// TTLs must run on the wall clock like a real Redis: tokens expire, a dead holder's
		// lock lapses, cached replays age out.
		m.ClockTTL(true)
		if err := m.StartAddr(embeddedAddr); err != nil {
			return nil, fmt.Errorf("start embedded redis on %s (set ONCEPAY_EMBEDDED_REDIS_ADDR to another port): %w", embeddedAddr, err)
		}
		c.Embedded = m
		addr = m.Addr()
	}
	c.Client = NewClient(addr, db)
	return c, nil
}

// NewClient returns a client with short timeouts: Redis is a fast path, and when it stalls
// the idempotency layers must step aside quickly rather than hold a request.
func NewClient(addr string, db int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		DB:           db,
		DialTimeout:  500 * time.Millisecond,
		ReadTimeout:  500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
		PoolSize:     64,
		// No retries: when Redis is down the layers step aside at once (degrade) instead of
		// paying reconnect backoff on every call.
		MaxRetries:    -1,
		DialerRetries: 1,
	})
}

// Ping checks that Redis answers.
func (c *Conn) Ping(ctx context.Context) error { return c.Client.Ping(ctx).Err() }

// Close closes the client and stops the embedded server, if any.
func (c *Conn) Close() error {
	err := c.Client.Close()
	if c.Embedded != nil {
		c.Embedded.Close()
	}
	return err
}
