package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ReceiverCommand is the first argument that makes the chaos command serve as the run's
// merchant receiver (tools/cmd/chaos): the run starts its own executable again with it, so that
// the receiver is a process of its own that kill_receiver kills with SIGKILL and
// pause_receiver stops with SIGSTOP — the kernel then holds the connections in the listen
// backlog and nothing reads them, as with any stopped server (issue 27, item 9).
const ReceiverCommand = "hook-receiver"

// ReceiverMain serves the merchant receiver (receiver.go) on -addr until ctx ends. It writes
// every request to the journal -log as it arrives and again when its answer is decided, one
// JSON line each, written before anything is answered, so that a kill -9 loses no line the
// receiver acted on; it reads the secrets it accepts from -secrets at each request, which the
// run rewrites at registration and rotation — a stopped receiver reads the new ones when it
// wakes. It returns the process's exit status.
func ReceiverMain(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(ReceiverCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "host:port to listen on")
	dsn := fs.String("dsn", "", "the receiver's own MySQL database (processed_events, effects)")
	journal := fs.String("log", "", "the journal of requests, appended to")
	secrets := fs.String("secrets", "", "the file of secrets the receiver accepts")
	if err := fs.Parse(args); err != nil || *addr == "" || *dsn == "" || *journal == "" || *secrets == "" {
		fmt.Fprintln(stderr, "hook-receiver: -addr, -dsn, -log and -secrets are required")
		return 2
	}
	db, err := openMerchantDB(ctx, *dsn)
	if err != nil {
		fmt.Fprintln(stderr, "hook-receiver:", err)
		return 1
	}
	defer db.Close()
	f, err := os.OpenFile(*journal, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(stderr, "hook-receiver:", err)
		return 1
	}
	defer f.Close()
	var l net.Listener
	for range 50 { // the port of the killed process may be held for a moment
		if l, err = net.Listen("tcp", *addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		fmt.Fprintln(stderr, "hook-receiver:", err)
		return 1
	}
	m := &merchant{db: db, addr: *addr, url: "http://" + *addr + "/webhooks", rnd: rand.Float64,
		journal: f, secretsFile: *secrets, idPrefix: "r" + strconv.Itoa(os.Getpid()) + "."}
	m.serve(l)
	fmt.Fprintf(stderr, "%s hook-receiver: serving on %s (pid %d)\n", time.Now().UTC().Format(time.RFC3339Nano), *addr, os.Getpid())
	<-ctx.Done()
	m.close()
	return 0
}

// journalLine is one line of the receiver's journal: a request as it arrived (Decided false)
// or as its answer was decided.
type journalLine struct {
	hookAttempt
	Decided bool `json:"decided"`
}

// record writes a to the journal; called with m.mu held.
func (m *merchant) record(a hookAttempt, decided bool) {
	b, _ := json.Marshal(journalLine{hookAttempt: a, Decided: decided})
	_, _ = m.journal.Write(append(b, '\n'))
}

// receiverProc is the run's side of a receiver process: the process, its journal, and when
// the run killed and paused it, to tell the requests it never answered.
type receiverProc struct {
	srv     *server
	journal string
	secrets string

	mu     sync.Mutex
	kills  []time.Time
	pauses [][2]time.Time // start, end (zero while paused)
}

// startMerchantProcess starts the receiver as a process of its own (ReceiverMain, through the
// chaos command's own executable) on a free port, its journal and secrets in dir.
func startMerchantProcess(ctx context.Context, dir, dsn string) (*merchant, error) {
	db, err := openMerchantDB(ctx, dsn)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("the chaos executable, to start the receiver with: %w", err)
	}
	port, err := freePort()
	if err != nil {
		db.Close()
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p := &receiverProc{journal: filepath.Join(dir, "receiver-journal.jsonl"), secrets: filepath.Join(dir, "receiver-secrets.json")}
	p.srv = &server{
		name: "receiver",
		args: []string{exe, ReceiverCommand, "-addr", addr, "-dsn", dsn, "-log", p.journal, "-secrets", p.secrets},
		logf: filepath.Join(dir, "receiver.log"),
		ready: func(ctx context.Context) error {
			c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
			if err == nil {
				c.Close()
			}
			return err
		},
	}
	m := &merchant{db: db, addr: addr, url: "http://" + addr + "/webhooks", rnd: rand.Float64, proc: p, secretsFile: p.secrets}
	if err := m.writeSecrets(); err != nil {
		db.Close()
		return nil, err
	}
	if err := p.srv.start(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return m, nil
}

// writeSecrets hands the secrets the run holds to the receiver process: a new file renamed
// over the old one, so that it never reads half of one.
func (m *merchant) writeSecrets() error {
	m.mu.Lock()
	b, _ := json.Marshal(m.secrets)
	m.mu.Unlock()
	tmp := m.secretsFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, m.secretsFile)
}

// readSecrets is the receiver process's view of the secrets it accepts.
func (m *merchant) readSecrets() []hookSecret {
	b, err := os.ReadFile(m.secretsFile)
	if err != nil {
		return nil
	}
	var out []hookSecret
	_ = json.Unmarshal(b, &out)
	return out
}

// kill kills the receiver process with SIGKILL: the kernel closes its sockets, the
// requests in flight are never answered, a commit it made stands.
func (p *receiverProc) kill() {
	p.srv.kill()
	p.mu.Lock()
	p.kills = append(p.kills, time.Now())
	p.mu.Unlock()
}

// restart starts the process again on the same port, journal and secrets.
func (p *receiverProc) restart() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.srv.start(ctx)
}

// pause stops the process with SIGSTOP and opens a pause's window.
func (p *receiverProc) pause() {
	p.mu.Lock()
	p.pauses = append(p.pauses, [2]time.Time{time.Now()})
	p.mu.Unlock()
	p.srv.signal(syscall.SIGSTOP)
}

// resume continues the process with SIGCONT and closes the pause's window.
func (p *receiverProc) resume() {
	p.srv.signal(syscall.SIGCONT)
	p.mu.Lock()
	if n := len(p.pauses); n > 0 && p.pauses[n-1][1].IsZero() {
		p.pauses[n-1][1] = time.Now()
	}
	p.mu.Unlock()
}

// close continues and kills the process.
func (p *receiverProc) close() {
	p.srv.signal(syscall.SIGCONT)
	p.srv.kill()
}

// snapshot reads the journal back: each request as its answer was decided, or — arrived and
// never decided — killed with its process. A request whose handling began before a pause
// ended and ended after it began was held by the pause, in flight when the process stopped or
// queued in the backlog meanwhile, and is marked paused: such a request may be handled after
// a later attempt of the same event (the backlog has no order the receiver can see), which
// the checker excuses when the later attempt was sent after it (Oncepay-Delivery-Attempt).
func (p *receiverProc) snapshot() []hookAttempt {
	f, err := os.Open(p.journal)
	if err != nil {
		return nil
	}
	defer f.Close()
	byID := map[string]*hookAttempt{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l journalLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.ID == "" {
			continue // a line cut by a kill
		}
		a, ok := byID[l.ID]
		if !ok {
			a = &hookAttempt{}
			byID[l.ID] = a
			order = append(order, l.ID)
		}
		if l.Decided || a.ID == "" {
			*a = l.hookAttempt
			if !l.Decided {
				a.Answer, a.Done = -1, time.Time{}
			}
		}
	}
	p.mu.Lock()
	kills, pauses := slices.Clone(p.kills), slices.Clone(p.pauses)
	p.mu.Unlock()
	out := make([]hookAttempt, 0, len(order))
	for _, id := range order {
		a := *byID[id]
		if a.Answer == -1 {
			a.Answer, a.Done = 0, a.At
			for _, k := range kills {
				if k.After(a.At) {
					a.Done = k
					break
				}
			}
			a.Fault = strings.TrimPrefix(a.Fault+",killed", ",")
		}
		for _, w := range pauses {
			end := w[1]
			if end.IsZero() {
				end = time.Now()
			}
			if !a.At.After(end.Add(500*time.Millisecond)) && !a.Done.Before(w[0]) && !strings.Contains(a.Fault, "paused") {
				a.Fault = strings.TrimPrefix(a.Fault+",paused", ",")
			}
		}
		out = append(out, a)
	}
	return out
}

// openMerchantDB opens the receiver's database and creates its tables.
func openMerchantDB(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS processed_events (event_id VARCHAR(32) NOT NULL PRIMARY KEY, type VARCHAR(64) NOT NULL, processed_at DATETIME(6) NOT NULL) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS effects (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(32) NOT NULL, type VARCHAR(64) NOT NULL, KEY idx_effects_event (event_id)) ENGINE=InnoDB`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}
