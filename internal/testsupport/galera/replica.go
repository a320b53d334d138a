package galera

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// PairOptions describe a MariaDB primary with one replica (classic binlog replication, no
// Galera), for the failover that forgets (I14).
type PairOptions struct {
	// Dir holds both data directories, sockets and logs.
	Dir string
	// Port is the primary's MySQL port; the replica listens on Port+1. Default 4441.
	Port int
	// SemiSync makes the primary acknowledge a commit only once the replica has it in its
	// relay log (rpl_semi_sync_master_wait_point=AFTER_SYNC), and never fall back to
	// asynchronous replication while it waits (rpl_semi_sync_master_timeout of a day).
	// Without it replication is asynchronous, MariaDB's default.
	SemiSync bool
}

// PairAvailable reports why a primary and replica cannot be started here, or nil: unlike a
// Galera cluster they need neither galera-4 nor rsync, only mariadbd and mariadb-install-db
// (apt-get install mariadb-server).
func PairAvailable() error {
	for _, tool := range []string{"mariadbd", "mariadb-install-db"} {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("%s is not on PATH (nor in /usr/sbin): apt-get install mariadb-server", tool)
		}
	}
	return nil
}

// Pair is a running primary and replica.
type Pair struct {
	opts             PairOptions
	primary, replica *Node
}

// StartPair initialises both data directories, starts the primary and the replica and
// points the replica at the primary (GTID, from the start of the primary's binlog).
func StartPair(ctx context.Context, opts PairOptions) (_ *Pair, err error) {
	if err := PairAvailable(); err != nil {
		return nil, err
	}
	if opts.Port <= 0 {
		opts.Port = 4441
	}
	if err := traversable(opts.Dir); err != nil {
		return nil, err
	}
	p := &Pair{opts: opts}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	for i, role := range []string{"primary", "replica"} {
		n := &Node{N: i + 1, Port: opts.Port + i}
		n.Root = filepath.Join(opts.Dir, role)
		n.Dir = filepath.Join(n.Root, "data")
		n.ErrorLog = filepath.Join(n.Root, "mariadb.err")
		if err := install(ctx, n.Root, n.Dir); err != nil {
			return nil, err
		}
		n.args = p.args(n, role)
		if err := n.start(ctx, n.args); err != nil {
			return nil, err
		}
		if role == "primary" {
			p.primary = n
		} else {
			p.replica = n
		}
	}
	if err := execOn(ctx, p.replica, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_USE_GTID=slave_pos", p.primary.Port), "START SLAVE"); err != nil {
		return nil, err
	}
	return p, p.waitReplicating(ctx, 30*time.Second)
}

// args is the mariadbd command line of a pair's node.
func (p *Pair) args(n *Node, role string) []string {
	mariadbd, _ := lookPath("mariadbd")
	args := append(n.privateArgs(mariadbd),
		"--max-connections=300",
		"--server-id="+strconv.Itoa(n.N),
		"--log-bin="+role+"-bin",
		"--binlog-format=ROW",
		"--log-slave-updates",
	)
	if p.opts.SemiSync {
		if role == "primary" {
			args = append(args, "--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
				"--rpl-semi-sync-master-timeout=86400000")
		} else {
			args = append(args, "--rpl-semi-sync-slave-enabled=ON")
		}
	}
	return args
}

// execOn runs stmts on node n, one after another.
func execOn(ctx context.Context, n *Node, stmts ...string) error {
	db, err := sql.Open("mysql", n.dsn("", "timeout=2s"))
	if err != nil {
		return err
	}
	defer db.Close()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s on port %d: %w", s, n.Port, err)
		}
	}
	return nil
}

// replicaStatus reads the replica's IO and SQL thread states.
func (p *Pair) replicaStatus(ctx context.Context) (io, sqlThread string, err error) {
	db, err := sql.Open("mysql", p.replica.dsn("", "timeout=2s"))
	if err != nil {
		return "", "", err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return "", "", err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		return "", "", fmt.Errorf("the replica has no replication configured")
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", "", err
	}
	for i, c := range cols {
		switch c {
		case "Slave_IO_Running":
			io = vals[i].String
		case "Slave_SQL_Running":
			sqlThread = vals[i].String
		}
	}
	return io, sqlThread, nil
}

func (p *Pair) waitReplicating(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		io, sqlT, err := p.replicaStatus(ctx)
		if err == nil && io == "Yes" && sqlT == "Yes" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replica is not replicating after %s: IO %q SQL %q (%v); log %s", d, io, sqlT, err, p.replica.ErrorLog)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// PrimaryDSN and ReplicaDSN are go-sql-driver DSNs of database db on each node.
func (p *Pair) PrimaryDSN(db string, params ...string) string { return p.primary.dsn(db, params...) }

// ReplicaDSN is the replica's DSN of db.
func (p *Pair) ReplicaDSN(db string, params ...string) string { return p.replica.dsn(db, params...) }

// ExecPrimary runs stmts on the primary.
func (p *Pair) ExecPrimary(ctx context.Context, stmts ...string) error {
	return execOn(ctx, p.primary, stmts...)
}

// WaitCaughtUp waits until the replica has applied what the primary has written so far
// (MASTER_GTID_WAIT on the primary's gtid_binlog_pos).
func (p *Pair) WaitCaughtUp(ctx context.Context, d time.Duration) error {
	pdb, err := sql.Open("mysql", p.primary.dsn("", "timeout=2s"))
	if err != nil {
		return err
	}
	defer pdb.Close()
	var pos string
	if err := pdb.QueryRowContext(ctx, "SELECT @@global.gtid_binlog_pos").Scan(&pos); err != nil {
		return err
	}
	rdb, err := sql.Open("mysql", p.replica.dsn("", "timeout=2s"))
	if err != nil {
		return err
	}
	defer rdb.Close()
	var res int
	if err := rdb.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, d.Seconds()).Scan(&res); err != nil {
		return err
	}
	if res != 0 {
		return fmt.Errorf("the replica did not reach %s within %s", pos, d)
	}
	return nil
}

// CutReplica stops the replica's IO thread: it receives nothing more from the primary, as a
// replica behind a cut or slow link would, while the primary goes on committing.
func (p *Pair) CutReplica(ctx context.Context) error {
	return execOn(ctx, p.replica, "STOP SLAVE IO_THREAD")
}

// KillPrimary sends SIGKILL to the primary: it dies with what only it had.
func (p *Pair) KillPrimary() {
	p.kill(p.primary)
}

func (p *Pair) kill(n *Node) {
	if n == nil {
		return
	}
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(os.Kill)
	<-done
}

// Promote makes the replica the primary the way a failover does: it applies what it has in
// its relay log, stops replicating and forgets its primary.
func (p *Pair) Promote(ctx context.Context) error {
	if err := execOn(ctx, p.replica, "STOP SLAVE IO_THREAD"); err != nil {
		return err
	}
	// The SQL thread finishes the relay log: wait until it has nothing left to apply.
	deadline := time.Now().Add(30 * time.Second)
	for {
		db, err := sql.Open("mysql", p.replica.dsn("", "timeout=2s"))
		if err != nil {
			return err
		}
		var state sql.NullString
		err = db.QueryRowContext(ctx, "SELECT STATE FROM information_schema.PROCESSLIST WHERE COMMAND = 'Slave_SQL' LIMIT 1").Scan(&state)
		db.Close()
		if err == sql.ErrNoRows || (err == nil && (state.String == "Slave has read all relay log; waiting for more updates" || state.String == "")) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replica did not finish its relay log within 30 s (state %q, %v)", state.String, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return execOn(ctx, p.replica, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
}

// Stop kills both nodes.
func (p *Pair) Stop() {
	p.kill(p.replica)
	p.kill(p.primary)
}
