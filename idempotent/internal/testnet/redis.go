// Package testnet is the network of the kit's own tests: Redis clients with the options a
// service gives them in production, and a TCP proxy that breaks a MySQL connection on
// purpose. It is a package of the kit's module, which cannot import oncepay's internal
// packages; only the kit's tests import it.
package testnet

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The options of every client, as oncepay's internal/platform/redisx sets them: short
// timeouts, because Redis is a fast path, and when it stalls the idempotency layers must step
// aside quickly rather than hold a request.
const (
	dialTimeout = 500 * time.Millisecond
	ioTimeout   = 500 * time.Millisecond
	poolSize    = 64
)

// NewClient returns a client of one Redis server with short timeouts and no retries: when
// Redis is down the layers step aside at once instead of paying reconnect backoff.
func NewClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:          addr,
		DialTimeout:   dialTimeout,
		ReadTimeout:   ioTimeout,
		WriteTimeout:  ioTimeout,
		PoolSize:      poolSize,
		MaxRetries:    -1,
		DialerRetries: 1,
	})
}

// clusterRedirects is how many MOVED or ASK redirects a cluster command follows: two cover a
// MOVED followed by an ASK during a slot migration, and a stalled cluster costs at most three
// timeouts per command (go-redis's cluster loop also retries a network error).
const clusterRedirects = 2

// clusterStateReload bounds how old the cluster client's slot map may grow while commands
// run (go-redis's default is 60 s). A master killed -9 announces nothing; without this bound
// and reloadOnConnError a client keeps sending the dead master's slots to the dead address,
// and TestClusterFailover's instances never resume within its bound.
const clusterStateReload = 2 * time.Second

// NewClusterClient returns a Redis Cluster client seeded with addrs, with NewClient's options
// on every node; it reloads its slot map every clusterStateReload while in use and at once
// when a node cannot be reached, so that a promoted replica is found within about a second.
func NewClusterClient(addrs []string) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      addrs,
		DialTimeout:                dialTimeout,
		ReadTimeout:                ioTimeout,
		WriteTimeout:               ioTimeout,
		PoolSize:                   poolSize,
		MaxRetries:                 -1,
		DialerRetries:              1,
		MaxRedirects:               clusterRedirects,
		ClusterStateReloadInterval: clusterStateReload,
	})
	// No node exists before the first command, so the hook reaches every node client.
	c.OnNewNode(func(node *redis.Client) { node.AddHook(reloadOnConnError{cluster: c}) })
	return c
}

// reloadOnConnError asks the cluster client to reload its slot map when a command or
// pipeline to a node got no answer (refused, reset, timed out — not a reply of Redis).
type reloadOnConnError struct {
	cluster *redis.ClusterClient
}

func (h reloadOnConnError) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnConnError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.reloadOn(ctx, err)
		return err
	}
}

func (h reloadOnConnError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.reloadOn(ctx, err)
		return err
	}
}

func (h reloadOnConnError) reloadOn(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		h.cluster.ReloadState(context.WithoutCancel(ctx))
	}
}
