package chaos

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis Cluster of -redis-cluster: three masters, each with a replica, so that the run
// can fail a master over mid-traffic — the failover of incident I15, in which a promoted
// replica that never saw a lease grants it again. Two faults do it:
const (
	// faultKillRedisMaster kills a master with kill -9; its replica is promoted once the
	// others have failed it (clusterNodeTimeout), and the killed node, started again, rejoins
	// as the replica of the node that took its slots.
	faultKillRedisMaster = "kill_redis_master"
	// faultFailoverForce has a replica take its master's slots at once with CLUSTER FAILOVER
	// FORCE, without the master's agreement: whatever the master had not yet replicated is
	// lost, and the old master becomes its replica.
	faultFailoverForce = "redis_failover_force"
)

// redisClusterFaults join the rotation with -redis-cluster.
var redisClusterFaults = []string{faultKillRedisMaster, faultFailoverForce}

// clusterNodeTimeout is the cluster-node-timeout of the run's Redis Cluster: a master that
// answers no ping for this long is failed by the others and its replica takes over, about
// twice this after the kill.
const clusterNodeTimeout = 1000 * time.Millisecond

// startRedisCluster starts six cluster-enabled redis-servers on free ports, with no
// persistence, and joins them with redis-cli --cluster create --cluster-replicas 1 into
// three masters and three replicas.
func (w *world) startRedisCluster(ctx context.Context) error {
	for i := range 6 {
		port, err := freePort()
		if err != nil {
			return err
		}
		args := []string{"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", w.dir, "--daemonize", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout.Milliseconds())),
			// A replica may always take over, however long ago it last heard its master.
			"--cluster-replica-validity-factor", "0"}
		s := &server{name: fmt.Sprintf("redis-%d", i+1), args: args, logf: filepath.Join(w.dir, fmt.Sprintf("redis-%d.log", i+1))}
		s.ready = func(ctx context.Context) error { return w.redisNodeReady(ctx, s) }
		w.redis = append(w.redis, s)
		if err := s.start(ctx); err != nil {
			return err
		}
	}
	args := []string{"--cluster", "create"}
	for _, s := range w.redis {
		args = append(args, s.addr())
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w\n%s", err, tail(string(out), 2000))
	}
	// From now on a node is ready only when it sees the cluster whole: a node restarted by a
	// fault must have rejoined (from its nodes.conf) before the run goes on.
	w.clustered = true
	for _, s := range w.redis {
		if err := waitFor(ctx, 30*time.Second, s.ready); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// redisNodeReady is a cluster node's readiness: a ping before the nodes are joined, then
// cluster_state:ok and, for a replica, its link to its master up (it holds the master's data).
func (w *world) redisNodeReady(ctx context.Context, s *server) error {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	if !w.clustered {
		return c.Ping(ctx).Err()
	}
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("cluster state is not ok yet")
	}
	repl, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
		return errors.New("the replica is not in sync with its master yet")
	}
	return nil
}

// redisRole returns "master" or "slave" for the node s, as it answers ROLE.
func redisRole(ctx context.Context, s *server) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second})
	defer c.Close()
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(role) == 0 {
		return "", errors.New("ROLE answered nothing")
	}
	r, _ := role[0].(string)
	return r, nil
}

// redisNodes returns the running nodes of role ("master" or "slave").
func (w *world) redisNodes(ctx context.Context, role string) []*server {
	var out []*server
	for _, s := range w.redis {
		if !s.running() {
			continue
		}
		if r, err := redisRole(ctx, s); err == nil && r == role {
			out = append(out, s)
		}
	}
	return out
}

// replicaOf returns the running replica that follows master, as master's own CLUSTER NODES
// tells.
func (w *world) replicaOf(ctx context.Context, master *server) (*server, error) {
	c := redis.NewClient(&redis.Options{Addr: master.addr(), MaxRetries: -1})
	defer c.Close()
	out, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var masterID string
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, line := range lines {
		if f := strings.Fields(line); len(f) > 2 && strings.Contains(f[2], "myself") {
			masterID = f[0]
		}
	}
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != masterID {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, s := range w.redis {
			if s.addr() == addr && s.running() {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("%s has no running replica", master.name)
}

// waitRole waits until s answers ROLE with role and returns how long it took.
func waitRole(ctx context.Context, s *server, role string, d time.Duration) (time.Duration, error) {
	start := time.Now()
	err := waitFor(ctx, d, func(ctx context.Context) error {
		r, err := redisRole(ctx, s)
		if err == nil && r != role {
			err = fmt.Errorf("%s is %s, not %s", s.name, r, role)
		}
		return err
	})
	return time.Since(start), err
}

// injectRedisCluster runs one of redisClusterFaults to its end: the cluster has three
// masters again, each with a replica in sync. heal is the context of the repair.
func (f *faulter) injectRedisCluster(ctx, heal context.Context, kind string) {
	switch kind {
	case faultKillRedisMaster:
		masters := f.w.redisNodes(heal, "master")
		if len(masters) == 0 {
			f.record(kind, "no master to kill", errors.New("no running master"))
			return
		}
		m := masters[mrand.IntN(len(masters))]
		replica, err := f.w.replicaOf(heal, m)
		if err != nil {
			f.record(kind, "no replica to promote", err)
			return
		}
		m.kill()
		f.record(kind, fmt.Sprintf("kill -9 %s, a master; %s is its replica", m.name, replica.name), nil)
		took, err := waitRole(heal, replica, "master", 30*time.Second)
		f.record(kind+"_promoted", fmt.Sprintf("%s promoted to master %s after the kill", replica.name, took.Round(time.Millisecond)), err)
		sleepCtx(ctx, time.Duration(500+mrand.IntN(1500))*time.Millisecond)
		err = m.start(heal) // ready once the cluster is ok and it is in sync as a replica
		f.record(kind+"_healed", m.name+" restarted empty, rejoined as a replica of "+replica.name, err)
	case faultFailoverForce:
		replicas := f.w.redisNodes(heal, "slave")
		if len(replicas) == 0 {
			f.record(kind, "no replica to promote", errors.New("no running replica"))
			return
		}
		r := replicas[mrand.IntN(len(replicas))]
		c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1})
		err := c.Do(heal, "CLUSTER", "FAILOVER", "FORCE").Err()
		c.Close()
		f.record(kind, "CLUSTER FAILOVER FORCE on "+r.name, err)
		if err != nil {
			return
		}
		took, err := waitRole(heal, r, "master", 30*time.Second)
		f.record(kind+"_healed", fmt.Sprintf("%s is master %s after CLUSTER FAILOVER FORCE", r.name, took.Round(time.Millisecond)), err)
	}
}
