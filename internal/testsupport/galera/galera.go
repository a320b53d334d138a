// Package galera starts a private MariaDB Galera cluster on this machine for tests, the chaos
// run and the drills: n mariadbd processes joined by Debian's galera-4
// (/usr/lib/galera/libgalera_smm.so), each with its own data directory under one directory and
// its own ports on 127.0.0.1, the first bootstrapping the cluster (--wsrep-new-cluster) and
// the others joining it by a snapshot (rsync SST). A node can be killed -9 and started again
// (it rejoins by IST, or SST), and isolated from the others (gmcast.isolate) and healed. Every
// process is one this package started and is stopped by its pid, never by name: other
// servers on the machine are left alone.
//
//	c, err := galera.Start(ctx, galera.Options{Dir: t.TempDir()})
//	defer c.Stop()
//	dsn := c.DSN(1, "oncepay") // node 2
package galera

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	// The MySQL driver, for the cluster's own connections.
	_ "github.com/go-sql-driver/mysql"
)

// Provider is the Galera library Debian's galera-4 installs.
const Provider = "/usr/lib/galera/libgalera_smm.so"

// Available reports why a cluster cannot be started here, or nil: the Galera library,
// mariadbd and mariadb-install-db must be installed (apt-get install galera-4 mariadb-server
// rsync).
func Available() error {
	if _, err := os.Stat(Provider); err != nil {
		return fmt.Errorf("galera-4 is not installed (%s: %w): apt-get install galera-4", Provider, err)
	}
	for _, tool := range []string{"mariadbd", "mariadb-install-db", "rsync"} {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("%s is not on PATH: apt-get install mariadb-server rsync", tool)
		}
	}
	return nil
}

// lookPath finds tool on PATH or in /usr/sbin, where Debian puts mariadbd.
func lookPath(tool string) (string, error) {
	if p, err := exec.LookPath(tool); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", tool)
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// Options describe a cluster.
type Options struct {
	// Dir holds every node's data directory, socket and logs.
	Dir string
	// Nodes is the number of nodes; default 3.
	Nodes int
	// Port is node 1's MySQL port; node i listens on Port+i-1, its Galera replication on
	// Port+10+i-1, its IST on Port+20+i-1 and its SST on Port+30+i-1. Default 4401.
	Port int
	// Name is wsrep_cluster_name; default "oncepay".
	Name string
	// Args are more mariadbd options for every node, e.g. "--wsrep-sync-wait=1".
	Args []string
}

func (o Options) withDefaults() Options {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Port <= 0 {
		o.Port = 4401
	}
	if o.Name == "" {
		o.Name = "oncepay"
	}
	return o
}

// Cluster is a running cluster.
type Cluster struct {
	opts  Options
	nodes []*Node
}

// Node is one mariadbd of the cluster.
type Node struct {
	// N is the node's number, 1..Nodes.
	N int
	// Port is its MySQL port; GaleraPort, ISTPort and SSTPort its cluster ports.
	Port, GaleraPort, ISTPort, SSTPort int
	// Root is the node's own directory: its data directory Dir, its socket, its error log
	// ErrorLog and the process's output Out.
	Root, Dir, ErrorLog, Out string

	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// exits counts the times the process ended without Kill or Stop ending it.
	exits int
}

// Start initialises every node's data directory and starts the nodes one after another,
// each joined and synced before the next starts. On error it stops what it started.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := traversable(opts.Dir); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	var gcomm []string
	for i := range opts.Nodes {
		gcomm = append(gcomm, fmt.Sprintf("127.0.0.1:%d", opts.Port+10+i))
	}
	for i := range opts.Nodes {
		n := &Node{N: i + 1, Port: opts.Port + i, GaleraPort: opts.Port + 10 + i, ISTPort: opts.Port + 20 + i, SSTPort: opts.Port + 30 + i}
		n.Root = filepath.Join(opts.Dir, fmt.Sprintf("node%d", n.N))
		n.Dir = filepath.Join(n.Root, "data")
		n.ErrorLog = filepath.Join(n.Root, "mariadb.err")
		if err := install(ctx, n.Root, n.Dir); err != nil {
			return nil, err
		}
		n.args = c.args(n, strings.Join(gcomm, ","))
		c.nodes = append(c.nodes, n)
	}
	for i, n := range c.nodes {
		args := n.args
		if i == 0 {
			args = append(slicesClone(args), "--wsrep-new-cluster")
		}
		if err := n.start(ctx, args); err != nil {
			return nil, err
		}
		if err := c.WaitSynced(ctx, n.N, 3*time.Minute); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// install makes root, a node's own directory (its data directory, socket and logs), owned by
// the user the node runs as, and runs mariadb-install-db into dir. Grant tables are skipped
// at run time: the nodes listen on loopback only and live for one run.
func install(ctx context.Context, root, dir string) error {
	tool, err := lookPath("mariadb-install-db")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	if err := chownToRunUser(root); err != nil {
		return err
	}
	// A tmpdir of its own, as the server gets (privateArgs): the bootstrap server of an install
	// otherwise works in /tmp, where another install running at the same time (I14's two pairs
	// in the drill) deletes its temporary tables, and where the shared server keeps its own.
	cmd := exec.CommandContext(ctx, tool, "--no-defaults", "--datadir="+dir, "--user="+runUser(),
		"--auth-root-authentication-method=normal", "--skip-test-db", "--tmpdir="+root)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db %s: %w\n%s", dir, err, tail(string(out), 2000))
	}
	return nil
}

// runUser is the user the nodes run as. Run by root, mariadbd runs as Debian's mysql user
// (nobody without it): the rsync daemon of a joiner's snapshot transfer (SST), which the node
// starts, would otherwise switch from root to nobody and be refused its own data directory.
func runUser() string {
	if os.Geteuid() != 0 {
		return currentUser()
	}
	if _, err := user.Lookup("mysql"); err == nil {
		return "mysql"
	}
	return "nobody"
}

// chownToRunUser gives dir to runUser when it is not the current user.
func chownToRunUser(dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(runUser())
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

// traversable lets runUser reach dir: every directory from dir up to the system's temporary
// directory that lacks the others' search bit gets it (a test's or a run's own 0700
// temporary directories). Nothing is made readable or writable.
func traversable(dir string) error {
	if os.Geteuid() != 0 {
		return os.MkdirAll(dir, 0o755)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	for d := abs; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				return err
			}
		}
	}
	return nil
}

// privateArgs is the start of the command line of every private server of this package:
// its own data directory, port, socket, pid file, error log and tmpdir, on 127.0.0.1, with no
// grants to check.
func (n *Node) privateArgs(mariadbd string) []string {
	return []string{mariadbd, "--no-defaults",
		"--datadir=" + n.Dir,
		fmt.Sprintf("--port=%d", n.Port),
		"--socket=" + filepath.Join(n.Root, "mariadb.sock"),
		"--pid-file=" + filepath.Join(n.Root, "mariadb.pid"),
		// A tmpdir of its own: at start-up a server deletes the temporary files it finds
		// in its tmpdir, and the default, /tmp, holds the shared server's.
		"--tmpdir=" + n.Root,
		"--bind-address=127.0.0.1",
		"--user=" + runUser(),
		"--skip-grant-tables",
		"--log-error=" + n.ErrorLog,
		"--innodb-buffer-pool-size=64M",
	}
}

// args is node n's mariadbd command line, without --wsrep-new-cluster.
func (c *Cluster) args(n *Node, gcomm string) []string {
	mariadbd, _ := lookPath("mariadbd")
	provider := fmt.Sprintf("gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=128M;"+
		"evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.install_timeout=PT6S", n.GaleraPort, n.ISTPort)
	args := append(n.privateArgs(mariadbd),
		"--innodb-log-file-size=48M",
		"--max-connections=500",
		"--binlog-format=ROW",
		"--default-storage-engine=InnoDB",
		"--innodb-autoinc-lock-mode=2",
		"--wsrep-on=ON",
		"--wsrep-provider="+Provider,
		"--wsrep-cluster-name="+c.opts.Name,
		"--wsrep-cluster-address=gcomm://"+gcomm,
		fmt.Sprintf("--wsrep-node-name=node%d", n.N),
		fmt.Sprintf("--wsrep-node-address=127.0.0.1:%d", n.GaleraPort),
		fmt.Sprintf("--wsrep-node-incoming-address=127.0.0.1:%d", n.Port),
		fmt.Sprintf("--wsrep-sst-receive-address=127.0.0.1:%d", n.SSTPort),
		"--wsrep-sst-method=rsync",
		"--wsrep-provider-options="+provider,
		"--wsrep-slave-threads=2",
	)
	return append(args, c.opts.Args...)
}

// currentUser is the user mariadbd runs as (it refuses root unless told).
func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Geteuid() == 0 {
		return "root"
	}
	return strconv.Itoa(os.Geteuid())
}

// start launches the node's process with args and waits until it answers on its port (not
// until it is synced: see Cluster.WaitSynced).
func (n *Node) start(ctx context.Context, args []string) error {
	if n.Out == "" {
		n.Out = filepath.Join(n.Root, "mariadbd.out")
	}
	logf, err := os.OpenFile(n.Out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A process group of its own: a Ctrl-C reaches the caller, which stops the nodes in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start galera node %d: %w", n.N, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		n.mu.Lock()
		if n.cmd == cmd {
			n.exits++
			n.cmd = nil
		}
		n.mu.Unlock()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		db, err := sql.Open("mysql", n.dsn("", "timeout=1s"))
		if err == nil {
			err = db.PingContext(ctx)
			db.Close()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("galera node %d does not answer after 3 minutes (log %s): %w\n%s", n.N, n.ErrorLog, err, n.logTail())
		}
		select {
		case <-done:
			return fmt.Errorf("galera node %d exited at start-up (log %s):\n%s", n.N, n.ErrorLog, n.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) logTail() string {
	b, _ := os.ReadFile(n.ErrorLog)
	return tail(string(b), 3000)
}

// dsn is a go-sql-driver DSN of the node's database db with more parameters.
func (n *Node) dsn(db string, params ...string) string {
	p := append([]string{"parseTime=true", "loc=UTC"}, params...)
	return fmt.Sprintf("root:@tcp(127.0.0.1:%d)/%s?%s", n.Port, db, strings.Join(p, "&"))
}

// Nodes returns the cluster's nodes, node 1 first.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns node n (1-based).
func (c *Cluster) Node(n int) *Node { return c.nodes[n-1] }

// DSN is a go-sql-driver DSN of database db on node n (1-based), with params appended.
func (c *Cluster) DSN(n int, db string, params ...string) string {
	return c.Node(n).dsn(db, params...)
}

// Addr is node n's MySQL address, 127.0.0.1:port.
func (c *Cluster) Addr(n int) string { return fmt.Sprintf("127.0.0.1:%d", c.Node(n).Port) }

// Running reports whether node n's process exists.
func (c *Cluster) Running(n int) bool {
	node := c.Node(n)
	node.mu.Lock()
	defer node.mu.Unlock()
	return node.cmd != nil
}

// Exits is the number of times node n's process ended by itself.
func (c *Cluster) Exits(n int) int {
	node := c.Node(n)
	node.mu.Lock()
	defer node.mu.Unlock()
	return node.exits
}

// Kill sends SIGKILL to node n's process and waits for it to be gone: a crash, nothing
// flushed, nothing said to the other nodes.
func (c *Cluster) Kill(n int) {
	node := c.Node(n)
	node.mu.Lock()
	cmd, done := node.cmd, node.done
	node.cmd = nil
	node.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Restart starts node n again with its command line: it recovers its position from InnoDB
// and rejoins the cluster by IST (or SST, when the donor's gcache no longer holds what it
// missed). It returns once the node is synced, with how long that took.
func (c *Cluster) Restart(ctx context.Context, n int) (time.Duration, error) {
	start := time.Now()
	node := c.Node(n)
	args := node.args
	if c.alone(n) {
		// Every other node is down too: this one must form the cluster again.
		args = append(slicesClone(args), "--wsrep-new-cluster")
		if err := safeToBootstrap(node.Dir); err != nil {
			return 0, err
		}
	}
	if err := node.start(ctx, args); err != nil {
		return 0, err
	}
	err := c.WaitSynced(ctx, n, 3*time.Minute)
	return time.Since(start), err
}

// alone reports whether every node but n is down.
func (c *Cluster) alone(n int) bool {
	for _, other := range c.nodes {
		if other.N != n && c.Running(other.N) {
			return false
		}
	}
	return true
}

// safeToBootstrap marks a node's grastate.dat safe to bootstrap from (it was the last one
// standing: nothing newer exists elsewhere).
func safeToBootstrap(dir string) error {
	p := filepath.Join(dir, "grastate.dat")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	return os.WriteFile(p, []byte(strings.Replace(string(b), "safe_to_bootstrap: 0", "safe_to_bootstrap: 1", 1)), 0o644)
}

// Isolate cuts node n off from the other nodes (gmcast.isolate=1: it drops every cluster
// connection and accepts none), or heals it (isolate false). Cut off, the node is a
// non-primary component of one: it answers every query with 1047 "WSREP has not yet
// prepared node for application use" while the others, a majority, go on. Healed, it
// rejoins and catches up by IST.
func (c *Cluster) Isolate(ctx context.Context, n int, isolate bool) error {
	db, err := sql.Open("mysql", c.DSN(n, "", "timeout=2s"))
	if err != nil {
		return err
	}
	defer db.Close()
	v := 0
	if isolate {
		v = 1
	}
	_, err = db.ExecContext(ctx, fmt.Sprintf("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=%d'", v))
	return err
}

// Status reads a wsrep status variable of node n (wsrep_local_state_comment,
// wsrep_cluster_size, wsrep_local_cert_failures …).
func (c *Cluster) Status(ctx context.Context, n int, name string) (string, error) {
	db, err := sql.Open("mysql", c.DSN(n, "", "timeout=1s", "readTimeout=2s"))
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	q := "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = ?"
	if err := db.QueryRowContext(ctx, q, strings.ToUpper(name)).Scan(&v); err != nil {
		return "", fmt.Errorf("node %d: SHOW STATUS %s: %w", n, name, err)
	}
	return v, nil
}

// StatusSum adds a numeric status variable over the running nodes (e.g. the certification
// failures of the whole cluster).
func (c *Cluster) StatusSum(ctx context.Context, name string) int64 {
	var sum int64
	for _, node := range c.nodes {
		if !c.Running(node.N) {
			continue
		}
		v, err := c.Status(ctx, node.N, name)
		if err != nil {
			continue
		}
		x, _ := strconv.ParseInt(v, 10, 64)
		sum += x
	}
	return sum
}

// WaitSynced waits until node n is Synced and part of a primary component, for d at most.
func (c *Cluster) WaitSynced(ctx context.Context, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for {
		state, err := c.Status(ctx, n, "wsrep_local_state_comment")
		status, serr := c.Status(ctx, n, "wsrep_cluster_status")
		if err == nil && serr == nil && state == "Synced" && status == "Primary" {
			return nil
		}
		last = fmt.Sprintf("state %q, component %q (%v %v)", state, status, err, serr)
		if !c.Running(n) {
			return fmt.Errorf("galera node %d is not running (log %s):\n%s", n, c.Node(n).ErrorLog, c.Node(n).logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("galera node %d is not synced after %s: %s (log %s)", n, d, last, c.Node(n).ErrorLog)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Exec runs stmt on node n.
func (c *Cluster) Exec(ctx context.Context, n int, stmt string) error {
	db, err := sql.Open("mysql", c.DSN(n, "", "timeout=2s"))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// Stop kills every node, last first, and waits for each to be gone.
func (c *Cluster) Stop() {
	for i := len(c.nodes) - 1; i >= 0; i-- {
		c.Kill(c.nodes[i].N)
	}
}

// ErrNotSynced is returned by WaitAllSynced when a node does not catch up.
var ErrNotSynced = errors.New("galera: a node is not synced")

// WaitAllSynced waits until every running node is synced in a cluster of all of them.
func (c *Cluster) WaitAllSynced(ctx context.Context, d time.Duration) error {
	for _, node := range c.nodes {
		if !c.Running(node.N) {
			return fmt.Errorf("%w: node %d is down", ErrNotSynced, node.N)
		}
		if err := c.WaitSynced(ctx, node.N, d); err != nil {
			return fmt.Errorf("%w: %w", ErrNotSynced, err)
		}
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
