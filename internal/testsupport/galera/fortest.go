package galera

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// EnvTest turns the Galera tests on: ONCEPAY_TEST_GALERA=1 (make test-galera) runs them and
// fails each loudly when the cluster cannot start; unset, they are skipped, so that `make test`
// stays within its time and a machine without galera-4 passes it.
const EnvTest = "ONCEPAY_TEST_GALERA"

// EnvPort moves the test cluster's ports (default 4401: MySQL 4401–4403, replication
// 4411–4413, IST 4421–4423, SST 4431–4433), for two runs on one machine.
const EnvPort = "ONCEPAY_TEST_GALERA_PORT"

// ForTest starts a three-node cluster for t in a directory of its own, stopped (by pid) when
// the test ends, or skips t unless ONCEPAY_TEST_GALERA=1.
func ForTest(t testing.TB, args ...string) *Cluster {
	t.Helper()
	if os.Getenv(EnvTest) != "1" {
		t.Skipf("set %s=1 to run the Galera tests on a private 3-node cluster (make test-galera; needs galera-4)", EnvTest)
	}
	port := 4401
	if p := os.Getenv(EnvPort); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil {
			t.Fatalf("%s=%q: %v", EnvPort, p, err)
		}
	}
	if err := portsFree(3, port, port+10, port+20, port+30); err != nil {
		t.Fatalf("%s=1 but the cluster cannot start: %v", EnvTest, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := Start(ctx, Options{Dir: t.TempDir(), Port: port, Name: "oncepay-test", Args: args})
	if err != nil {
		t.Fatalf("%s=1 but the Galera cluster did not start: %v", EnvTest, err)
	}
	t.Cleanup(c.Stop)
	t.Logf("galera: 3 nodes synced in %s (MySQL ports %d–%d)", time.Since(start).Round(time.Millisecond), port, port+2)
	return c
}

// portsFree checks that none of the ports base..base+nodes-1 of each base is taken (a cluster
// left by a killed run).
func portsFree(nodes int, bases ...int) error {
	for _, base := range bases {
		for i := range nodes {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				return fmt.Errorf("port %d is taken: %w", base+i, err)
			}
			l.Close()
		}
	}
	return nil
}

// PairForTest starts a primary and a replica for t (ports 4441 and 4442, or
// ONCEPAY_TEST_GALERA_PORT+40 and +41), stopped when the test ends; it is gated like ForTest.
func PairForTest(t testing.TB, semiSync bool) *Pair {
	t.Helper()
	if os.Getenv(EnvTest) != "1" {
		t.Skipf("set %s=1 to run the replication tests on a private primary and replica (make test-galera)", EnvTest)
	}
	port := 4441
	if p := os.Getenv(EnvPort); p != "" {
		base, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvPort, p, err)
		}
		port = base + 40
	}
	if err := portsFree(2, port); err != nil {
		t.Fatalf("%s=1 but the primary and replica cannot start: %v", EnvTest, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := StartPair(ctx, PairOptions{Dir: t.TempDir(), Port: port, SemiSync: semiSync})
	if err != nil {
		t.Fatalf("%s=1 but the primary and replica did not start: %v", EnvTest, err)
	}
	t.Cleanup(p.Stop)
	return p
}
