// Package redisx connects oncepay to Redis: a real server when an address is configured, a
// Redis Cluster when several are, an in-process miniredis listening on a TCP port otherwise,
// so that `make run` needs nothing.
package redisx

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Conn is a Redis client and, when Redis is embedded, the server behind it.
type Conn struct {
	// Client is the go-redis client every layer uses: a *redis.Client for one address, a
	// *redis.ClusterClient for several. The layers see only redis.UniversalClient, so that
	// the same code runs on both; what keeps it correct on a cluster is that every script and
	// pipeline touches the keys of one hash tag only (see idempotent).
	Client redis.UniversalClient
	// Embedded is the in-process server, or nil when Redis is external.
	Embedded *miniredis.Miniredis
}

// Open connects to Redis at addrs (ONCEPAY_REDIS_ADDR): one address is a plain client on its
// logical database db (ONCEPAY_REDIS_DB), several are the seed nodes of a Redis Cluster, which
// has only database 0. With no address it starts an embedded Redis on embeddedAddr and uses
// its database db.
func Open(addrs []string, embeddedAddr string, db int) (*Conn, error) {
	if len(addrs) > 1 {
		c, err := NewUniversal(addrs, db)
		if err != nil {
			return nil, err
		}
		return &Conn{Client: c}, nil
	}
	c := &Conn{}
	addr := ""
	if len(addrs) == 1 {
		addr = addrs[0]
	} else {
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

// NewUniversal returns NewClient for one address and NewClusterClient for several; a cluster
// with a database other than 0 is an error, because a Redis Cluster has only database 0.
func NewUniversal(addrs []string, db int) (redis.UniversalClient, error) {
	switch {
	case len(addrs) == 0:
		return nil, errors.New("redis: no address")
	case len(addrs) == 1:
		return NewClient(addrs[0], db), nil
	case db != 0:
		return nil, fmt.Errorf("redis: database %d on a cluster of %d addresses: a Redis Cluster has only database 0", db, len(addrs))
	}
	return NewClusterClient(addrs), nil
}

// The options every client shares: short timeouts, because Redis is a fast path, and when it
// stalls the idempotency layers must step aside quickly rather than hold a request.
const (
	dialTimeout = 500 * time.Millisecond
	ioTimeout   = 500 * time.Millisecond
	poolSize    = 64
)

// routes maps Redis addresses to the addresses to dial instead (SetRoutes); nil dials every
// address as it is.
var routes atomic.Pointer[map[string]string]

// SetRoutes makes every client this package builds from now on dial to[addr] where it would
// dial addr: the chaos run puts a proxy of each instance's own in front of every node of a
// Redis Cluster, whose clients dial the addresses the nodes announce in CLUSTER SLOTS, never an
// address they were given. Production leaves it unset.
func SetRoutes(to map[string]string) {
	m := maps.Clone(to)
	routes.Store(&m)
}

// dial is the clients' dialer: the address through routes, with go-redis's own defaults.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if m := routes.Load(); m != nil {
		if to, ok := (*m)[addr]; ok {
			addr = to
		}
	}
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 5 * time.Minute}
	return d.DialContext(ctx, network, addr)
}

// NewClient returns a client of one Redis server with short timeouts and no retries.
func NewClient(addr string, db int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		DB:           db,
		Dialer:       dial,
		DialTimeout:  dialTimeout,
		ReadTimeout:  ioTimeout,
		WriteTimeout: ioTimeout,
		PoolSize:     poolSize,
		// No retries: when Redis is down the layers step aside at once (degrade) instead of
		// paying reconnect backoff on every call.
		MaxRetries:    -1,
		DialerRetries: 1,
	})
}

// clusterRedirects is how many MOVED or ASK redirects a cluster command follows.
//
// go-redis counts redirects apart from retries: MaxRetries (-1 here, as on NewClient) is the
// per-node client's, while the cluster client's own loop runs up to MaxRedirects+1 attempts,
// and MaxRedirects -1 would stop it from following any redirect — every command after a slot
// moved (failover, resharding) would fail. That same loop also retries a network error or a
// timeout, first on the same node, then after marking it failing; so the bound is a trade:
// two redirects cover a MOVED followed by an ASK during a slot migration, and a stalled
// cluster costs at most three timeouts (1.5 s) per command before the layers step aside.
const clusterRedirects = 2

// clusterStateReload bounds how old the cluster client's slot map may grow while commands
// run: go-redis reloads it when a command finds it older than this (its default is 60 s).
//
// A failover is announced to a client only by a MOVED from the node that lost the slots; a
// master killed -9 sends nothing, so a client that waits for a MOVED keeps sending the dead
// master's slots to the dead address. The lease is an optimisation and the dedup record stays
// the fence (I15), but a shard without its lease and replay cache for a minute is a minute of
// every copy racing in the database, and of 503s with ONCEPAY_REDIS_FAILURE_MODE=reject.
// idempotent's TestClusterFailover (3 masters + 3 replicas, a master killed -9 while three
// instances claim keys of its shard, the replica promoted 2.3–2.9 s after the kill) measured
// how long after the promotion each instance's claims came back: never within the test's 4 s
// without this bound or reloadOnConnError (go-redis waits up to 60 s); 0.4–0.7 s with this
// bound alone; 20–260 ms with both.
const clusterStateReload = 2 * time.Second

// NewClusterClient returns a Redis Cluster client seeded with addrs, with the short timeouts
// of NewClient on every node; it follows MOVED and ASK redirects (see clusterRedirects) and
// reloads its slot map every clusterStateReload while in use and at once when a node cannot
// be reached (reloadOnConnError), so that a promoted replica is found within about a second
// of its promotion.
func NewClusterClient(addrs []string) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      addrs,
		Dialer:                     dial,
		DialTimeout:                dialTimeout,
		ReadTimeout:                ioTimeout,
		WriteTimeout:               ioTimeout,
		PoolSize:                   poolSize, // per node
		MaxRetries:                 -1,
		DialerRetries:              1,
		MaxRedirects:               clusterRedirects,
		ClusterStateReloadInterval: clusterStateReload,
	})
	// No node exists before the first command, so the hook reaches every node client.
	c.OnNewNode(func(node *redis.Client) { node.AddHook(reloadOnConnError{cluster: c}) })
	return c
}

// reloadOnConnError is a hook on every node of a cluster client: when a command or pipeline
// to the node fails for want of an answer — the connection refused, reset or timed out, not
// a reply of Redis — it asks the cluster client to reload its slot map (ReloadState, which
// runs in the background and merges the requests of many failing commands into one CLUSTER
// SLOTS). The cluster client's own retry of the command (the second of its attempts, see
// clusterRedirects) may then already reach the replica that took over the dead node's slots.
type reloadOnConnError struct {
	cluster *redis.ClusterClient
}

// DialHook passes dials through: a refused dial surfaces as the command's error.
func (h reloadOnConnError) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook reloads the slot map after a command that got no answer.
func (h reloadOnConnError) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.reloadOn(ctx, err)
		return err
	}
}

// ProcessPipelineHook reloads the slot map after a pipeline that got no answer.
func (h reloadOnConnError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.reloadOn(ctx, err)
		return err
	}
}

func (h reloadOnConnError) reloadOn(ctx context.Context, err error) {
	if connError(ctx, err) {
		h.cluster.ReloadState(context.WithoutCancel(ctx))
	}
}

// connError reports whether err means the node did not answer: neither success, nor a reply
// of Redis (redis.Nil, a script's error, MOVED …), nor the caller's own context ending.
func connError(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// Addrs returns the addresses c's client was opened with: one, or a cluster's seed nodes.
func (c *Conn) Addrs() []string {
	switch cl := c.Client.(type) {
	case *redis.Client:
		return []string{cl.Options().Addr}
	case *redis.ClusterClient:
		return append([]string(nil), cl.Options().Addrs...)
	}
	return nil
}

// DB returns the logical database c's client uses; always 0 on a cluster.
func (c *Conn) DB() int {
	if cl, ok := c.Client.(*redis.Client); ok {
		return cl.Options().DB
	}
	return 0
}

// Ping checks that Redis answers: on a cluster, every master, because each one holds a share
// of the keys and a request may need any of them.
func (c *Conn) Ping(ctx context.Context) error {
	if cl, ok := c.Client.(*redis.ClusterClient); ok {
		return cl.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return node.Ping(ctx).Err()
		})
	}
	return c.Client.Ping(ctx).Err()
}

// Close closes the client and stops the embedded server, if any.
func (c *Conn) Close() error {
	err := c.Client.Close()
	if c.Embedded != nil {
		c.Embedded.Close()
	}
	return err
}
