package chaos

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/outbox"
)

// The webhook settings of the run's instances: a short schedule of retries (seconds, ten
// of them, so that a delivery outlives a run of the receiver's faults and of MariaDB kills)
// and a short attempt timeout, which a lost 2xx waits out.
const (
	hookSchedule = "1s,1s,2s,2s,3s,3s,5s,5s,5s,5s"
	hookTimeout  = 2 * time.Second
)

// The receiver's faults, as shares of the attempts it is sent.
const (
	hookLostShare = 0.08 // processes the event, then never answers (a lost 2xx)
	hook500Share  = 0.08 // answers 500 without processing
	hookSlowShare = 0.10 // processes and answers after 0.5–1.5 s, inside the sender's timeout
)

// hookAttempt is one delivery attempt the receiver saw, for the checker.
type hookAttempt struct {
	EventID string `json:"event_id"`
	// BodyHash is the hex SHA-256 of the raw body.
	BodyHash string `json:"body_hash"`
	SigValid bool   `json:"signature_valid"`
	// Fault is what the receiver did to the attempt: "", "lost_2xx", "500" or "slow".
	Fault string `json:"fault,omitempty"`
	// Err is why processing failed (the receiver then answered 500).
	Err string `json:"error,omitempty"`
}

// merchant is the merchant's receiver the chaos run registers as a webhook endpoint: an HTTP
// server in the chaos process that verifies each attempt's signature and processes each
// event once, as examples/webhook-receiver does — the event id recorded in the same
// transaction as its effect (a row of effects), in a database of its own (the schema
// merchant on the run's MariaDB). It is faulty on purpose: some attempts it processes and
// then leaves unanswered until the sender gives up (a lost 2xx), some it answers 500 without
// processing, some it answers slowly. It logs every attempt it saw.
type merchant struct {
	db  *sql.DB
	srv *http.Server
	url string
	mu  sync.Mutex
	// secret is the endpoint's signing secret and rnd the source of the faults.
	secret   string
	rnd      func() float64
	attempts []hookAttempt
}

// startMerchant creates the receiver's tables in the schema merchant and serves on a free
// loopback port. Its secret is set once the endpoint is registered.
func startMerchant(ctx context.Context, dsn string) (*merchant, error) {
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		db.Close()
		return nil, err
	}
	m := &merchant{db: db, url: "http://" + l.Addr().String() + "/webhooks", rnd: rand.Float64}
	m.srv = &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = m.srv.Serve(l) }()
	return m, nil
}

// close stops the server and closes the database.
func (m *merchant) close() {
	_ = m.srv.Close()
	_ = m.db.Close()
}

// register makes the receiver an endpoint of oncepay at base, subscribed to every event type,
// and keeps the secret the registration shows.
func (m *merchant) register(ctx context.Context, base, adminKey string) error {
	body, _ := json.Marshal(map[string]any{"url": m.url, "event_types": outbox.EventTypes, "description": "the chaos run's faulty receiver"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/admin/webhook-endpoints", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("register the receiver: %d %s", resp.StatusCode, b)
	}
	var out struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Secret == "" {
		return fmt.Errorf("register the receiver: no secret in %s", b)
	}
	m.mu.Lock()
	m.secret = out.Secret
	m.mu.Unlock()
	return nil
}

// ServeHTTP answers one attempt: 400 when the signature does not verify, else one of the
// faults or the processed answer.
func (m *merchant) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	sum := sha256.Sum256(body)
	m.mu.Lock()
	secret, rnd := m.secret, m.rnd
	m.mu.Unlock()
	a := hookAttempt{EventID: r.Header.Get("Oncepay-Event-Id"), BodyHash: hex.EncodeToString(sum[:]), SigValid: verifyHook(secret, r.Header.Get("Oncepay-Signature"), body)}
	var ev struct {
		EventID string `json:"event_id"`
		Type    string `json:"type"`
	}
	_ = json.Unmarshal(body, &ev)
	switch {
	case !a.SigValid:
		m.log(a)
		http.Error(w, "signature does not verify", http.StatusBadRequest)
		return
	case ev.EventID == "" || ev.EventID != a.EventID:
		a.Err = fmt.Sprintf("body event_id %q, header %q", ev.EventID, a.EventID)
		m.log(a)
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	p := rnd()
	switch {
	case p < hook500Share:
		a.Fault = "500"
		m.log(a)
		http.Error(w, "the receiver fails on purpose", http.StatusInternalServerError)
		return
	case p < hook500Share+hookSlowShare:
		a.Fault = "slow"
		time.Sleep(500*time.Millisecond + time.Duration(rnd()*float64(time.Second)))
	case p < hook500Share+hookSlowShare+hookLostShare:
		a.Fault = "lost_2xx"
	}
	dup, err := m.process(r.Context(), ev.EventID, ev.Type)
	if err != nil {
		a.Err = err.Error()
		m.log(a)
		http.Error(w, "processing failed", http.StatusInternalServerError)
		return
	}
	m.log(a)
	if a.Fault == "lost_2xx" {
		// Processed and committed; the answer never comes before the sender's timeout.
		select {
		case <-r.Context().Done():
		case <-time.After(hookTimeout + 3*time.Second):
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"duplicate":` + strconv.FormatBool(dup) + "}"))
}

// process acts on the event once, in one transaction: the dedup record first — a copy whose
// record exists is a duplicate and changes nothing — then the effect. It reports whether the
// event was a duplicate.
func (m *merchant) process(ctx context.Context, id, typ string) (dup bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO processed_events (event_id, type, processed_at) VALUES (?, ?, NOW(6))`, id, typ)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, err
	} else if n == 0 {
		return true, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id, type) VALUES (?, ?)`, id, typ); err != nil {
		return false, err
	}
	return false, tx.Commit()
}

func (m *merchant) log(a hookAttempt) {
	m.mu.Lock()
	m.attempts = append(m.attempts, a)
	m.mu.Unlock()
}

// snapshot returns the attempts seen so far.
func (m *merchant) snapshot() []hookAttempt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]hookAttempt(nil), m.attempts...)
}

// effects counts the receiver's effect rows per event id.
func (m *merchant) effects(ctx context.Context) (map[string]int, error) {
	rows, err := m.db.QueryContext(ctx, `SELECT event_id, COUNT(*) FROM effects GROUP BY event_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// verifyHook checks an Oncepay-Signature header ("t=<unix>,v1=<hex>[,v1=<hex>]") against body:
// some v1 is the HMAC-SHA256 of "<t>.<body>" under secret, and t lies within five minutes of
// now. It computes the MAC itself rather than with oncepay's signer, so that a signer that
// went wrong does not verify its own mistake.
func verifyHook(secret, header string, body []byte) bool {
	if secret == "" {
		return false
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return true
		}
	}
	return false
}

// readFeed reads GET /v1/admin/events from the first cursor to the end, page by page (small
// pages, so that a run has many), and returns the event ids in the order served.
func readFeed(ctx context.Context, base, adminKey string) ([]string, int, error) {
	var ids []string
	after := ""
	pages := 0
	for {
		// The first page has no cursor: the API refuses an empty one.
		q := url.Values{"limit": {"97"}}
		if after != "" {
			q.Set("after", after)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/admin/events?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ids, pages, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return ids, pages, fmt.Errorf("GET /v1/admin/events after %q: %d %s", after, resp.StatusCode, b)
		}
		var page struct {
			Events []struct {
				EventID string `json:"event_id"`
			} `json:"events"`
			NextCursor string `json:"next_cursor"`
			HasMore    bool   `json:"has_more"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return ids, pages, err
		}
		pages++
		for _, e := range page.Events {
			ids = append(ids, e.EventID)
		}
		if !page.HasMore || len(page.Events) == 0 {
			return ids, pages, nil
		}
		if page.NextCursor == after {
			return ids, pages, errors.New("the events API answered has_more with the same cursor")
		}
		after = page.NextCursor
	}
}

// drainWebhooks waits, at most d, until every committed event is sequenced and no delivery
// is pending. It returns what is still in flight when d runs out.
func drainWebhooks(ctx context.Context, db *sql.DB, d time.Duration, progress io.Writer) error {
	start := time.Now()
	var last string
	for {
		var unsequenced, pending int
		_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE seq IS NULL`).Scan(&unsequenced)
		_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending'`).Scan(&pending)
		now := fmt.Sprintf("%d events unsequenced, %d deliveries pending", unsequenced, pending)
		if now != last {
			fmt.Fprintf(progress, "  webhooks %3.0fs: %s\n", time.Since(start).Seconds(), now)
		}
		last = now
		if unsequenced == 0 && pending == 0 {
			return nil
		}
		if time.Since(start) > d {
			return errors.New("webhooks not drained after " + d.String() + ": " + now)
		}
		sleepCtx(ctx, 500*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// hookView is what the merchant's side of the run saw, read by the caller once the sender has
// drained: every attempt the receiver logged, its effect rows per event id, and the events API
// read from the first cursor to the end.
type hookView struct {
	attempts []hookAttempt
	effects  map[string]int
	// feed is the event ids the events API served, in order; feedErr is why reading it
	// stopped early.
	feed    []string
	feedErr string
}

// hookFigures are the run's webhook figures, for the summary.
type hookFigures struct {
	Events      int `json:"events"`
	Attempts    int `json:"attempts"`
	Lost2xx     int `json:"lost_2xx"`
	Answered500 int `json:"answered_500"`
	Slow        int `json:"slow"`
	// Failed counts the attempts whose processing failed (the receiver's database was down):
	// answered 500 too.
	Failed     int `json:"processing_failed"`
	BadSig     int `json:"invalid_signature"`
	Processed  int `json:"processed"`
	FeedEvents int `json:"feed_events"`
	FeedPages  int `json:"feed_pages"`
}

// figures counts what the receiver saw.
func (v *hookView) figures(events, pages int) hookFigures {
	f := hookFigures{Events: events, Attempts: len(v.attempts), FeedEvents: len(v.feed), FeedPages: pages}
	for _, a := range v.attempts {
		switch {
		case !a.SigValid:
			f.BadSig++
		case a.Err != "":
			f.Failed++
		}
		switch a.Fault {
		case "lost_2xx":
			f.Lost2xx++
		case "500":
			f.Answered500++
		case "slow":
			f.Slow++
		}
	}
	for _, n := range v.effects {
		f.Processed += n
	}
	return f
}

// String is the figures on one line.
func (f hookFigures) String() string {
	return strings.Join([]string{
		fmt.Sprintf("%d events", f.Events), fmt.Sprintf("%d attempts", f.Attempts), fmt.Sprintf("%d lost 2xx", f.Lost2xx),
		fmt.Sprintf("%d answered 500 on purpose", f.Answered500), fmt.Sprintf("%d slow", f.Slow),
		fmt.Sprintf("%d failed to process (500)", f.Failed), fmt.Sprintf("%d invalid signatures", f.BadSig),
		fmt.Sprintf("%d effects", f.Processed), fmt.Sprintf("events API: %d events in %d pages", f.FeedEvents, f.FeedPages),
	}, ", ")
}
