package redisx_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oncepay/oncepay/idempotent/idemtest"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/testsupport/netfault"
)

// TestNewUniversal: one address is a plain client on its database, several a cluster client
// that follows redirects although it never retries, and a cluster on a database other than 0
// is refused.
func TestNewUniversal(t *testing.T) {
	one, err := redisx.NewUniversal([]string{"127.0.0.1:1"}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	// go-redis normalizes MaxRetries -1 (none) to 0 on a plain client's options.
	if c, ok := one.(*redis.Client); !ok || c.Options().DB != 3 || c.Options().MaxRetries != 0 {
		t.Errorf("one address: %T, want a *redis.Client on db 3 without retries", one)
	}

	several, err := redisx.NewUniversal([]string{"127.0.0.1:1", "127.0.0.1:2"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer several.Close()
	c, ok := several.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("two addresses: %T, want a *redis.ClusterClient", several)
	}
	if o := c.Options(); o.MaxRedirects < 1 || o.MaxRetries != -1 {
		t.Errorf("cluster MaxRedirects %d MaxRetries %d: want redirects followed (>= 1) and no retries (-1)", o.MaxRedirects, o.MaxRetries)
	}
	// A master killed -9 sends no MOVED: the slot map must not wait for go-redis's 60 s
	// default to find its promoted replica (TestClusterFailover in idempotent/ measures it).
	if o := c.Options(); o.ClusterStateReloadInterval <= 0 || o.ClusterStateReloadInterval > 5*time.Second {
		t.Errorf("cluster ClusterStateReloadInterval %s, want a few seconds at most", o.ClusterStateReloadInterval)
	}

	if _, err := redisx.NewUniversal([]string{"127.0.0.1:1", "127.0.0.1:2"}, 1); err == nil {
		t.Error("a cluster on database 1: no error, want one (a cluster has only database 0)")
	}
	if _, err := redisx.NewUniversal(nil, 0); err == nil {
		t.Error("no address: no error, want one")
	}
}

// TestOpenCluster opens a real Redis Cluster from its address list: Addrs and DB report it,
// Ping reaches every master, and a key round-trips wherever its slot lives.
func TestOpenCluster(t *testing.T) {
	addrs := idemtest.RedisCluster(t)
	conn, err := redisx.Open(addrs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !slices.Equal(conn.Addrs(), addrs) || conn.DB() != 0 || conn.Embedded != nil {
		t.Errorf("Addrs %v DB %d embedded %v, want %v, 0, none", conn.Addrs(), conn.DB(), conn.Embedded != nil, addrs)
	}
	ctx := context.Background()
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := conn.Client.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if v, err := conn.Client.Get(ctx, k).Result(); err != nil || v != k {
			t.Fatalf("GET %s = %q, %v", k, v, err)
		}
	}
}

// TestRoutesPutAProxyBeforeEveryNode: with SetRoutes a cluster client dials every node — the
// seeds and the addresses CLUSTER SLOTS announces — through the address routed to it (the
// chaos run's per-instance proxies). Cutting the proxies cuts the client off, which a client
// that dialled the announced addresses directly would not notice.
func TestRoutesPutAProxyBeforeEveryNode(t *testing.T) {
	addrs := idemtest.RedisCluster(t)
	n := netfault.New()
	t.Cleanup(n.Close)
	to := map[string]string{}
	var proxies []*netfault.Proxy
	for _, a := range addrs {
		p, err := n.Proxy("redis-"+a, a)
		if err != nil {
			t.Fatal(err)
		}
		to[a] = p.Addr()
		proxies = append(proxies, p)
	}
	redisx.SetRoutes(to)
	t.Cleanup(func() { redisx.SetRoutes(nil) })
	conn, err := redisx.Open(addrs, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for _, k := range keys {
		if err := conn.Client.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s through the proxies: %v", k, err)
		}
	}
	var heals []netfault.Heal
	for _, p := range proxies {
		h, err := p.Partition()
		if err != nil {
			t.Fatal(err)
		}
		heals = append(heals, h)
	}
	for _, k := range keys[:2] {
		if err := conn.Client.Get(ctx, k).Err(); err == nil {
			t.Fatalf("GET %s answered with every proxy cut: the client went around them", k)
		}
	}
	for _, h := range heals {
		h()
	}
	for _, k := range keys {
		if v, err := conn.Client.Get(ctx, k).Result(); err != nil || v != k {
			t.Fatalf("GET %s after healing = %q, %v", k, v, err)
		}
	}
}
