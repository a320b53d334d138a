package drill

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/testsupport/galera"
)

// I14 is a failover that forgets: a primary acknowledges writes and dies (kill -9) before its
// replica has them, and the promoted replica runs their retries again. The drill cannot do it
// to the server it drills, so both runs start servers of their own: a private MariaDB primary
// and replica (galera.StartPair, the helper of app TestFailoverThatForgets: their own data
// directories, ports, sockets and tmpdirs, stopped by pid), an oncepay instance on the primary
// and, after the failover, another on the promoted replica with a Redis of its own (the replay
// cache may be gone; the database is the record of truth). The instances are the server
// binary the drill is given (--server-bin, bin/oncepay beside bin/drill by default), run with
// nothing of the drill's own environment.
//
// The code is oncepay's on both runs; the deployment differs. The lab run is MariaDB's default,
// asynchronous replication, with the replica's link cut before the last orders, as a lagging
// replica's is: the keys acknowledged after the cut execute again. oncepay's run is the
// deployment docs/incidents.md requires, semi-synchronous replication with AFTER_SYNC: an order
// is acknowledged only once the replica has it, so every acknowledged key replays.

// viaSetup marks a step of I14's set-up in its copies (a server started, the primary killed):
// no copy of a request, but its time is the row's.
const viaSetup = "setup"

// i14Orders is how many orders each run has acknowledged before the cut, and the lab run after.
const i14Orders = 3

// i14Unacked is how long oncepay's run waits for the order sent while the replica is cut off
// before it gives up on it, as its client would.
const i14Unacked = 1500 * time.Millisecond

// failoverSeen is what an I14 run saw: the keys acknowledged before the failover and how each
// retry after it was answered.
type failoverSeen struct {
	// acked maps each acknowledged key to the order the client was told of.
	acked map[string]string
	// retried maps each acknowledged key to the order its retry after the failover answered
	// with ("" when it answered no order).
	retried map[string]string
	// cutAcked is true when an order sent while the replica was cut off was acknowledged
	// (oncepay's run only; semi-synchronous replication must hold it).
	cutAcked bool
	semiSync bool
}

// again lists the acknowledged keys whose retry made another order.
func (s failoverSeen) again() []string {
	var keys []string
	for k, first := range s.acked {
		if got := s.retried[k]; got != "" && got != first {
			keys = append(keys, k)
		}
	}
	return keys
}

// checkFailover judges I14: every acknowledged key must be answered with its first order after
// the failover, and, with semi-synchronous replication, no order may be acknowledged while the
// only replica is cut off.
func checkFailover(f *findings, s failoverSeen) {
	again := s.again()
	if len(again) > 0 {
		f.effectf("%d of %d acknowledged keys executed again on the promoted replica: another order for a key whose client was told of the first", len(again), len(s.acked))
	}
	for k := range s.acked {
		if s.retried[k] == "" {
			f.answerf("the retry of acknowledged key %s after the failover answered no order", k)
		}
	}
	if s.semiSync && s.cutAcked {
		f.effectf("an order was acknowledged while the only replica was cut off: semi-synchronous replication did not hold the commit")
	}
}

// failoverForgets is I14 against rt: semi-synchronous replication for oncepay, asynchronous for
// the lab.
func (d *drill) failoverForgets(ctx context.Context, rt routes) (out outcome, err error) {
	semiSync := rt.target == oncepayRoutes.target
	if err := galera.PairAvailable(); err != nil {
		out.skipped = "no private MariaDB here: " + err.Error()
		return out, nil
	}
	bin, err := d.serverBin()
	if err != nil {
		out.skipped = err.Error()
		return out, nil
	}
	dir, err := os.MkdirTemp("", "drill-i14-")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(dir)
	port, err := freePortPair()
	if err != nil {
		return out, err
	}
	t0 := time.Now()
	step := func(label string, since time.Time, err error) {
		rec := copyRecord{Path: label, Via: viaSetup, Route: label, StartMS: ms(since.Sub(t0)), DurationMS: ms(time.Since(since)), Status: http.StatusOK}
		if err != nil {
			rec.Status, rec.Error = 0, err.Error()
		}
		out.copies = append(out.copies, rec)
	}
	began := time.Now()
	pair, err := galera.StartPair(ctx, galera.PairOptions{Dir: dir, Port: port, SemiSync: semiSync})
	step(fmt.Sprintf("start a private primary and replica (ports %d, %d)", port, port+1), began, err)
	if err != nil {
		return out, err
	}
	defer pair.Stop()
	if err := pair.ExecPrimary(ctx, "CREATE DATABASE oncepay"); err != nil {
		return out, err
	}
	began = time.Now()
	before, err := startInstance14(ctx, bin, filepath.Join(dir, "before"), pair.PrimaryDSN("oncepay"), 1, true)
	step("start an instance on the primary", began, err)
	if err != nil {
		return out, err
	}
	defer before.stop()

	seen := failoverSeen{acked: map[string]string{}, retried: map[string]string{}, semiSync: semiSync}
	if before.userKey == "" {
		return out, errors.New("the instance on the primary printed no API key for alice (is --server-bin cmd/oncepay?)")
	}
	prefix := d.key(rt, "I14")
	place := func(inst *instance14, key, label string, timeout time.Duration) copyRecord {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return d.c.fireHTTP(cctx, t0, label, call{method: http.MethodPost, path: "/v1/orders", bearer: before.userKey,
			idemKey: key, body: orderBody("SKU-1001", 1), requestID: d.requestID(), base: inst.url, fresh: true}, nil)
	}
	ack := func(key, label string) error {
		c := place(before, key, label, 30*time.Second)
		out.copies = append(out.copies, c)
		if c.Status != http.StatusCreated {
			return fmt.Errorf("order %s on the primary answered %s, want 201", key, answerSummary(c))
		}
		seen.acked[key] = c.Ref
		return nil
	}
	for i := range i14Orders {
		if err := ack(fmt.Sprintf("%s-%d", prefix, i), "order on the primary, replicated"); err != nil {
			return out, err
		}
	}
	if err := pair.WaitCaughtUp(ctx, 30*time.Second); err != nil {
		return out, err
	}
	if err := pair.CutReplica(ctx); err != nil {
		return out, err
	}
	var unacked string
	if semiSync {
		unacked = prefix + "-cut"
		c := place(before, unacked, "order while the replica is cut off", i14Unacked)
		out.copies = append(out.copies, c)
		seen.cutAcked = c.Status == http.StatusCreated
	} else {
		for i := range i14Orders {
			if err := ack(fmt.Sprintf("%s-cut-%d", prefix, i), "order after the replica's link was cut"); err != nil {
				return out, err
			}
		}
	}
	began = time.Now()
	pair.KillPrimary()
	before.stop()
	err = pair.Promote(ctx)
	step("kill -9 the primary; promote the replica", began, err)
	if err != nil {
		return out, err
	}
	began = time.Now()
	after, err := startInstance14(ctx, bin, filepath.Join(dir, "after"), pair.ReplicaDSN("oncepay"), 2, false)
	step("start an instance on the promoted replica (a Redis of its own)", began, err)
	if err != nil {
		return out, err
	}
	defer after.stop()
	for key := range seen.acked {
		c := place(after, key, "retry of an acknowledged key", 30*time.Second)
		out.copies = append(out.copies, c)
		if c.Status == http.StatusCreated {
			seen.retried[key] = c.Ref
		}
	}
	checkFailover(&out.findings, seen)
	mode := "asynchronous replication (MariaDB's default)"
	if semiSync {
		mode = "semi-synchronous replication, AFTER_SYNC"
		out.notef("the order sent while the replica was cut off was %s", map[bool]string{true: "acknowledged", false: "not acknowledged within " + i14Unacked.String() + " (its client gave up)"}[seen.cutAcked])
	}
	out.expected = "every acknowledged key answered with its first order after the failover"
	out.observed = fmt.Sprintf("%s: %d acknowledged keys, %d executed again on the promoted replica", mode, len(seen.acked), len(seen.again()))
	out.held = fmt.Sprintf("%s: all %d acknowledged keys replayed their first order on the promoted replica", mode, len(seen.acked))
	return out, nil
}

// serverBin is the oncepay binary I14 runs its instances from: --server-bin, or oncepay beside
// the drill's own executable. It must print the banner of cmd/oncepay, from which the run
// learns the random API key its first start gives alice on a real database.
func (d *drill) serverBin() (string, error) {
	if d.cfg.ServerBin != "" {
		if _, err := os.Stat(d.cfg.ServerBin); err != nil {
			return "", fmt.Errorf("--server-bin: %w", err)
		}
		return d.cfg.ServerBin, nil
	}
	self, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(self), "oncepay")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no oncepay binary beside the drill to start I14's instances from: build it (make drill does) or pass --server-bin")
}

// freePortPair finds a free port p of 127.0.0.1 whose successor is free too: the primary and
// the replica of a pair listen on p and p+1.
func freePortPair() (int, error) {
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		next, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1))
		_ = ln.Close()
		if err == nil {
			_ = next.Close()
			return p, nil
		}
	}
	return 0, errors.New("no two consecutive free ports on 127.0.0.1")
}

// instance14 is one oncepay process of I14.
type instance14 struct {
	url string
	// userKey is alice's API key, printed by the start that seeded her (the first instance);
	// the promoted replica's instance has her from the replica.
	userKey string
	cmd     *exec.Cmd
	done    chan struct{}
}

// startInstance14 starts bin on dsn with an embedded Redis, Kafka and channel simulator of its
// own on free ports, its state under dir, and waits until /readyz answers 200.
func startInstance14(ctx context.Context, bin, dir, dsn string, node int, seed bool) (*instance14, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ONCEPAY_") {
			env = append(env, kv)
		}
	}
	addrs := make([]string, 4)
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	env = append(env, "ONCEPAY_MYSQL_DSN="+dsn, "ONCEPAY_DATA_DIR="+dir, "ONCEPAY_HTTP_ADDR="+addrs[0],
		"ONCEPAY_EMBEDDED_REDIS_ADDR="+addrs[1], "ONCEPAY_EMBEDDED_KAFKA_ADDR="+addrs[2], "ONCEPAY_EMBEDDED_CHANNEL_ADDR="+addrs[3],
		fmt.Sprintf("ONCEPAY_NODE_ID=%d", node), fmt.Sprintf("ONCEPAY_SEED_DEMO=%t", seed), "ONCEPAY_PUBLIC_URL=http://"+addrs[0],
		// On a real database oncepay refuses the dev defaults; the instances live for one run
		// and I14 needs no channel, no webhook and no admin call, so any fresh secret does.
		"ONCEPAY_CHANNEL_URL=embedded", "ONCEPAY_CHANNEL_SECRET="+randomHex(16), "ONCEPAY_ADMIN_KEY="+randomHex(16),
		"ONCEPAY_WEBHOOK_KEYS=main:"+base64.StdEncoding.EncodeToString([]byte(randomHex(16))))
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	var banner lockedBuffer
	cmd := exec.Command(bin)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &banner, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	inst := &instance14{url: "http://" + addrs[0], cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(inst.done) }()
	deadline := time.Now().Add(90 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(inst.url + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if m := aliceKey.FindStringSubmatch(banner.String()); m != nil {
					inst.userKey = m[1]
				}
				return inst, nil
			}
		}
		select {
		case <-inst.done:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return nil, fmt.Errorf("the instance exited at start-up: %s", tail(string(log), 1500))
		case <-ctx.Done():
			inst.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			inst.stop()
			return nil, fmt.Errorf("the instance on %s did not answer /readyz 200 within 90s", dsn)
		}
	}
}

// aliceKey finds alice's random API key in cmd/oncepay's banner.
var aliceKey = regexp.MustCompile(`user alice\s+API key (\S+) \(random`)

// lockedBuffer is an output buffer a process writes while the drill reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// stop kills the instance by its pid and waits for it.
func (i *instance14) stop() {
	select {
	case <-i.done:
		return
	default:
	}
	_ = i.cmd.Process.Kill()
	<-i.done
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
