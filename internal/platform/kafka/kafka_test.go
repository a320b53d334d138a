package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/kafka"
)

// TestPingAsksTheBroker: a ping reports a broker that went away as down at once, and the same
// broker back on its port and data directory as up at the first ping, which no cached metadata
// or dead pooled connection may answer in its place (/readyz relies on it, internal/app/health.go).
func TestPingAsksTheBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	c, err := kafka.Open(ctx, nil, kafka.EmbeddedOptions{Addr: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	addr := c.Brokers[0]
	for i := range 3 {
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("ping %d of a running broker: %v", i, err)
		}
	}
	c.Close()
	client := &kafka.Cluster{Brokers: []string{addr}}
	if err := client.Ping(ctx); err == nil {
		t.Fatal("ping of a broker that was closed: nil, want an error (an answer from cached metadata)")
	}
	again, err := kafka.Open(ctx, nil, kafka.EmbeddedOptions{Addr: addr, DataDir: dir})
	if err != nil {
		t.Fatalf("reopen on %s: %v", addr, err)
	}
	defer again.Close()
	if err := client.Ping(ctx); err != nil {
		t.Fatalf("first ping of the broker back on %s: %v", addr, err)
	}
}
