package idemtest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterNodes is the size of the cluster RedisCluster starts: the smallest Redis Cluster
// with every slot served, three masters and no replicas.
const clusterNodes = 3

// RedisCluster starts a real Redis Cluster of three masters for one test and returns their
// addresses, the form ONCEPAY_REDIS_ADDR takes for a cluster. Each node is a redis-server
// process on free ports of 127.0.0.1 (client and cluster bus), with its state in a temporary
// directory and no persistence; redis-cli --cluster create assigns the 16384 slots, and
// RedisCluster returns once every node reports cluster_state:ok. The processes are killed, by
// their pids, when the test ends.
//
// miniredis has no cluster mode, so without redis-server on PATH the test is skipped; with
// CI=true it fails instead, because CI must run the cluster tests.
func RedisCluster(tb testing.TB) []string {
	tb.Helper()
	server, serr := exec.LookPath("redis-server")
	cli, cerr := exec.LookPath("redis-cli")
	if serr != nil || cerr != nil {
		if InCI() {
			tb.Fatalf("redis-server and redis-cli must be on PATH when CI=true: the Redis Cluster tests need them (%v, %v)", serr, cerr)
		}
		tb.Skip("needs redis-server and redis-cli on PATH for a real Redis Cluster")
	}
	dir := tb.TempDir()
	ports := freePorts(tb, 2*clusterNodes)
	addrs := make([]string, clusterNodes)
	for i := range addrs {
		port, bus := ports[2*i], ports[2*i+1]
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		startClusterNode(tb, server, dir, port, bus)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range addrs {
		waitListening(ctx, tb, a)
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create %v: %v\n%s", addrs, err, out)
	}
	for _, a := range addrs {
		waitRedis(ctx, tb, a, clusterOK(ctx))
	}
	return addrs
}

// startClusterNode starts one cluster-enabled redis-server on port, with its cluster bus on
// bus, and kills it when the test ends. Its output goes to node-<port>.log in dir.
func startClusterNode(tb testing.TB, server, dir string, port, bus int) {
	tb.Helper()
	p := strconv.Itoa(port)
	logFile, err := os.Create(filepath.Join(dir, "node-"+p+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(server,
		"--port", p, "--cluster-port", strconv.Itoa(bus), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+p+".conf",
		"--dir", dir, "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		tb.Fatalf("start redis-server on port %d: %v", port, err)
	}
	pid := cmd.Process.Pid
	tb.Cleanup(func() {
		_ = cmd.Process.Kill() // this process only, by its pid
		_ = cmd.Wait()
		_ = logFile.Close()
		if tb.Failed() {
			if out, err := os.ReadFile(logFile.Name()); err == nil {
				tb.Logf("redis-server pid %d on port %d:\n%s", pid, port, tail(out, 20))
			}
		}
	})
}

// freePorts returns n distinct TCP ports of 127.0.0.1 that were free a moment ago; all are
// held open together, so that none is handed out twice.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	ports := make([]int, n)
	lns := make([]net.Listener, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("find a free port: %v", err)
		}
		lns[i] = ln
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}

// waitListening waits until something accepts TCP connections on addr, with plain dials so
// that go-redis does not log a refused dial for every poll while the server starts.
func waitListening(ctx context.Context, tb testing.TB, addr string) {
	tb.Helper()
	for {
		conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("redis cluster node %s does not listen: %v", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitRedis polls the node at addr with check until it passes or ctx ends.
func waitRedis(ctx context.Context, tb testing.TB, addr string, check func(*redis.Client) error) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	for {
		err := check(c)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("redis cluster node %s is not ready: %v", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterOK checks that a node reports cluster_state:ok, that is that it sees every slot served.
func clusterOK(ctx context.Context) func(*redis.Client) error {
	return func(c *redis.Client) error {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "cluster_state:ok" {
				return nil
			}
		}
		return fmt.Errorf("cluster not ok yet: %q", firstLine(info))
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// SlotMasters returns the address of the master that serves each of the 16384 slots of the
// cluster c, from CLUSTER SHARDS: tests use it to check that their keys land on every master,
// and to look at a key on the node that holds it.
func SlotMasters(tb testing.TB, c *redis.ClusterClient) *[16384]string {
	tb.Helper()
	shards, err := c.ClusterShards(context.Background()).Result()
	if err != nil {
		tb.Fatalf("CLUSTER SHARDS: %v", err)
	}
	var owner [16384]string
	for _, s := range shards {
		for _, n := range s.Nodes {
			if n.Role != "master" {
				continue
			}
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			for _, r := range s.Slots {
				for slot := r.Start; slot <= r.End; slot++ {
					owner[slot] = addr
				}
			}
		}
	}
	for slot, addr := range owner {
		if addr == "" {
			tb.Fatalf("slot %d is served by no master", slot)
		}
	}
	return &owner
}
