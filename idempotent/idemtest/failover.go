package idemtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNodeTimeout is the cluster-node-timeout of the nodes RedisClusterWithReplicas
// starts: a master that answers no ping for this long is failed by the others and its replica
// takes over, within about twice this in all (detection, then the replica's election delay).
const ClusterNodeTimeout = 1000 * time.Millisecond

// Cluster is a real Redis Cluster of three masters, each with one replica, that a test can
// fail over: kill a master (its replica is promoted), start it again (it rejoins as a replica
// of the node that took its slots) or force a replica to take over (CLUSTER FAILOVER FORCE).
type Cluster struct {
	tb     testing.TB
	server string
	dir    string

	mu    sync.Mutex
	nodes map[string]*clusterNode // by address
	addrs []string                // every node, in start order
}

// clusterNode is one redis-server process of a Cluster, which can be killed and started
// again on the same port and the same nodes.conf.
type clusterNode struct {
	addr      string
	port, bus int
	cmd       *exec.Cmd
	logFile   *os.File
}

// RedisClusterWithReplicas starts a Redis Cluster of three masters and three replicas for one
// test (redis-cli --cluster create … --cluster-replicas 1) on free ports of 127.0.0.1, with
// ClusterNodeTimeout and no persistence, and returns once every node reports
// cluster_state:ok and every master has its replica. A replica may always fail over
// (cluster-replica-validity-factor 0), as the tests kill masters moments after writes. The
// processes are killed, by their pids, when the test ends. Without redis-server the test is
// skipped, and fails in CI (see RedisCluster).
func RedisClusterWithReplicas(tb testing.TB) *Cluster {
	tb.Helper()
	server, serr := exec.LookPath("redis-server")
	cli, cerr := exec.LookPath("redis-cli")
	if serr != nil || cerr != nil {
		if InCI() {
			tb.Fatalf("redis-server and redis-cli must be on PATH when CI=true: the Redis Cluster tests need them (%v, %v)", serr, cerr)
		}
		tb.Skip("needs redis-server and redis-cli on PATH for a real Redis Cluster")
	}
	c := &Cluster{tb: tb, server: server, dir: tb.TempDir(), nodes: map[string]*clusterNode{}}
	ports := freePorts(tb, 4*clusterNodes)
	for i := range 2 * clusterNodes {
		n := &clusterNode{port: ports[2*i], bus: ports[2*i+1]}
		n.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
		c.nodes[n.addr] = n
		c.addrs = append(c.addrs, n.addr)
		c.start(n)
	}
	tb.Cleanup(c.stopAll)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range c.addrs {
		waitListening(ctx, tb, a)
	}
	args := append(append([]string{"--cluster", "create"}, c.addrs...), "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create %v: %v\n%s", c.addrs, err, out)
	}
	c.WaitHealthy(ctx)
	return c
}

// Addrs returns the address of every node, masters and replicas: the seed list of a client.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// start launches n's redis-server; it returns without waiting for it to listen.
func (c *Cluster) start(n *clusterNode) {
	c.tb.Helper()
	p := strconv.Itoa(n.port)
	logFile, err := os.OpenFile(filepath.Join(c.dir, "node-"+p+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.tb.Fatal(err)
	}
	cmd := exec.Command(c.server,
		"--port", p, "--cluster-port", strconv.Itoa(n.bus), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes-"+p+".conf",
		"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout.Milliseconds())),
		"--cluster-replica-validity-factor", "0",
		"--dir", c.dir, "--save", "", "--appendonly", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		c.tb.Fatalf("start redis-server on port %d: %v", n.port, err)
	}
	c.mu.Lock()
	n.cmd, n.logFile = cmd, logFile
	c.mu.Unlock()
}

// Kill kills the node at addr with SIGKILL (kill -9, by its pid) and waits for it to be gone.
func (c *Cluster) Kill(addr string) {
	c.tb.Helper()
	c.mu.Lock()
	n := c.nodes[addr]
	cmd, logFile := n.cmd, n.logFile
	n.cmd, n.logFile = nil, nil
	c.mu.Unlock()
	if cmd == nil {
		c.tb.Fatalf("kill %s: not running", addr)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	_ = logFile.Close()
}

// Restart starts the killed node at addr again, on its port and its nodes.conf, and waits
// until it listens: it rejoins the cluster by itself, as a replica of whichever node holds
// its former slots, and loads that node's data by a full resynchronisation.
func (c *Cluster) Restart(addr string) {
	c.tb.Helper()
	c.start(c.nodes[addr])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitListening(ctx, c.tb, addr)
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.cmd != nil {
			_ = n.cmd.Process.Kill() // this process only, by its pid
			_ = n.cmd.Wait()
			_ = n.logFile.Close()
			n.cmd = nil
		}
	}
	if c.tb.Failed() {
		for _, a := range c.addrs {
			if out, err := os.ReadFile(filepath.Join(c.dir, "node-"+strconv.Itoa(c.nodes[a].port)+".log")); err == nil {
				c.tb.Logf("redis-server on %s:\n%s", a, tail(out, 15))
			}
		}
	}
}

// Node is one line of CLUSTER NODES as a test needs it.
type Node struct {
	Addr string
	ID   string
	// Master reports the node's role; MasterID is the master a replica follows.
	Master   bool
	MasterID string
	// Failed reports the flags fail or fail?: the node is, or is thought, down.
	Failed bool
	// Slots are the node's slot ranges as CLUSTER NODES prints them ("0-5460").
	Slots []string
}

// Nodes returns the cluster as the node at addr sees it (CLUSTER NODES).
func (c *Cluster) Nodes(ctx context.Context, addr string) ([]Node, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, MaxRetries: -1})
	defer cl.Close()
	out, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var nodes []Node
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		n := Node{Addr: addr, ID: f[0], Master: strings.Contains(f[2], "master"), Failed: strings.Contains(f[2], "fail"), Slots: f[8:]}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// ReplicaOf returns the address of the replica that follows the master at master, as a
// running node sees the cluster.
func (c *Cluster) ReplicaOf(ctx context.Context, master string) string {
	c.tb.Helper()
	nodes := c.mustNodes(ctx, master)
	var id string
	for _, n := range nodes {
		if n.Addr == master {
			id = n.ID
		}
	}
	for _, n := range nodes {
		if n.MasterID == id && !n.Master {
			return n.Addr
		}
	}
	c.tb.Fatalf("master %s has no replica: %+v", master, nodes)
	return ""
}

// Masters returns the addresses of the masters that serve slots, as addr sees the cluster.
func (c *Cluster) Masters(ctx context.Context, addr string) []string {
	c.tb.Helper()
	var out []string
	for _, n := range c.mustNodes(ctx, addr) {
		if n.Master && !n.Failed && len(n.Slots) > 0 {
			out = append(out, n.Addr)
		}
	}
	return out
}

func (c *Cluster) mustNodes(ctx context.Context, addr string) []Node {
	c.tb.Helper()
	nodes, err := c.Nodes(ctx, addr)
	if err != nil {
		c.tb.Fatalf("CLUSTER NODES on %s: %v", addr, err)
	}
	return nodes
}

// WaitMaster waits until the node at addr is a master serving slots, and returns when it saw
// so. After Kill of a master, WaitMaster of its replica returns the moment of the promotion
// (to the 10 ms of its polling).
func (c *Cluster) WaitMaster(ctx context.Context, addr string) time.Time {
	c.tb.Helper()
	for {
		cl := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, MaxRetries: -1})
		role, err := cl.Do(ctx, "ROLE").Slice()
		_ = cl.Close()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return time.Now()
		}
		select {
		case <-ctx.Done():
			c.tb.Fatalf("%s did not become a master: ROLE %v, %v", addr, role, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// FailoverForce sends CLUSTER FAILOVER FORCE to the replica at replica: it takes its master's
// slots at once, without the master's agreement (the master is told afterwards and becomes
// its replica), and whatever the master had not yet replicated is lost.
func (c *Cluster) FailoverForce(ctx context.Context, replica string) {
	c.tb.Helper()
	cl := redis.NewClient(&redis.Options{Addr: replica, MaxRetries: -1})
	defer cl.Close()
	if err := cl.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err(); err != nil {
		c.tb.Fatalf("CLUSTER FAILOVER FORCE on %s: %v", replica, err)
	}
}

// WaitHealthy waits until every running node reports cluster_state:ok, three masters serve
// every slot and each has a replica that is in sync (master_link_status:up).
func (c *Cluster) WaitHealthy(ctx context.Context) {
	c.tb.Helper()
	c.mu.Lock()
	var running []string
	for _, a := range c.addrs {
		if c.nodes[a].cmd != nil {
			running = append(running, a)
		}
	}
	c.mu.Unlock()
	for _, a := range running {
		waitRedis(ctx, c.tb, a, clusterOK(ctx))
	}
	waitRedis(ctx, c.tb, running[0], func(cl *redis.Client) error { return c.healthy(ctx, running) })
}

// healthy checks that three masters serve slots and that every running replica's link to its
// master is up.
func (c *Cluster) healthy(ctx context.Context, running []string) error {
	nodes, err := c.Nodes(ctx, running[0])
	if err != nil {
		return err
	}
	masters, replicas := 0, 0
	for _, n := range nodes {
		switch {
		case n.Failed:
			return fmt.Errorf("%s is flagged failed", n.Addr)
		case n.Master && len(n.Slots) > 0:
			masters++
		case !n.Master:
			replicas++
		}
	}
	if masters != clusterNodes || replicas != len(running)-clusterNodes {
		return fmt.Errorf("%d masters with slots and %d replicas, want %d and %d", masters, replicas, clusterNodes, len(running)-clusterNodes)
	}
	for _, n := range nodes {
		if n.Master {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		info, err := cl.Info(ctx, "replication").Result()
		_ = cl.Close()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica %s is not in sync yet", n.Addr)
		}
	}
	return nil
}
