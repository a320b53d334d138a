package chaos

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
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

// hookAttempt is one request the receiver was sent, for the checker.
type hookAttempt struct {
	// ID names the request ("r1", "r2", …, in the order their answers were decided); a 2xx
	// answer carries it
	// in its body, so that oncepay's delivery log (webhook_attempts.response_snippet) says
	// which request's 2xx the sender acted on.
	ID string `json:"id"`
	// EventID is the webhook-id header: the event's id, the same on every attempt.
	EventID string `json:"event_id"`
	// Attempt is the Oncepay-Delivery-Attempt header: 1, 2, … for each attempt ever sent of
	// the delivery, so that the checker knows which of two requests was sent first when the
	// receiver read them in another order (a stopped process's backlog).
	Attempt int `json:"attempt,omitempty"`
	// BodyHash is the hex SHA-256 of the raw body.
	BodyHash string `json:"body_hash"`
	// SigValid says both signatures verified: webhook-signature (Standard Webhooks) and the
	// legacy Oncepay-Signature, each with a secret the receiver holds.
	SigValid bool `json:"signature_valid"`
	// Fault is what the receiver did to the attempt: "", "lost_2xx", "500", "slow",
	// "killed" (the listener was torn down under it) or "paused" (it waited out a pause).
	Fault string `json:"fault,omitempty"`
	// Err is why processing failed (the receiver then answered 500).
	Err string `json:"error,omitempty"`
	// At is when the request arrived, Done when its answer was decided; Answer is the status
	// the receiver wrote, 0 for none (a lost 2xx, a killed listener).
	At     time.Time `json:"at"`
	Done   time.Time `json:"done"`
	Answer int       `json:"answer"`
}

// hookSecret is a secret the receiver accepts, until Until (zero: for ever).
type hookSecret struct {
	Secret string    `json:"secret"`
	Until  time.Time `json:"until"`
}

// merchant is the merchant's receiver the chaos run registers as a webhook endpoint: an HTTP
// server in the chaos process that verifies each attempt's signatures and processes each
// event once, as examples/webhook-receiver does — the event id recorded in the same
// transaction as its effect (a row of effects), in a database of its own (the schema
// merchant on the run's MariaDB). It is faulty on purpose: some attempts it processes and
// then leaves unanswered until the sender gives up (a lost 2xx), some it answers 500 without
// processing, some it answers slowly. The run serves it as a process of its own
// (receiverproc.go) that it kills with SIGKILL and stops with SIGSTOP; in tests it may also
// serve in process, where kill tears its listener and every open connection down and pause
// holds every request unanswered. It logs every request it was sent.
type merchant struct {
	db   *sql.DB
	addr string
	url  string
	mu   sync.Mutex
	srv  *http.Server
	// gen counts the listener's lives: a request of an earlier life was killed with it.
	gen int
	// arrived counts the requests the receiver process has taken.
	arrived int
	// paused is closed when a pause ends; nil while the receiver runs.
	paused chan struct{}
	// secrets are the endpoint's signing secrets the receiver accepts (two during a
	// rotation's grace) and rnd the source of the faults.
	secrets  []hookSecret
	rnd      func() float64
	attempts []hookAttempt

	// proc is the receiver's own process (receiverproc.go) when the run started one: kill,
	// pause and the log act on it. Nil in the process itself and in tests.
	proc *receiverProc
	// journal, in the receiver process, takes each request as it arrives and as its answer
	// is decided; idPrefix makes its request ids unique across the process's lives.
	journal  io.Writer
	idPrefix string
	// secretsFile is where the run hands the secrets to the receiver process.
	secretsFile string
}

// startMerchant creates the receiver's tables in the schema merchant and serves on a free
// loopback port. Its secret is set once the endpoint is registered.
func startMerchant(ctx context.Context, dsn string) (*merchant, error) {
	db, err := openMerchantDB(ctx, dsn)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		db.Close()
		return nil, err
	}
	m := &merchant{db: db, addr: l.Addr().String(), rnd: rand.Float64}
	m.url = "http://" + m.addr + "/webhooks"
	m.serve(l)
	return m, nil
}

// serve starts a life of the receiver on l.
func (m *merchant) serve(l net.Listener) {
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 5 * time.Second}
	m.mu.Lock()
	m.srv = srv
	m.gen++
	m.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// kill tears the receiver down the way kill -9 does to a process: the listener and every open
// connection closed at once, the answers being prepared never written.
func (m *merchant) kill() {
	if m.proc != nil {
		m.proc.kill()
		return
	}
	m.mu.Lock()
	srv := m.srv
	m.gen++ // the requests in flight belong to a dead life from now on
	m.mu.Unlock()
	_ = srv.Close()
}

// restart listens again on the receiver's port (the port of a restarted process): tried for
// up to 5 s, as the port may still be held for a moment.
func (m *merchant) restart() error {
	if m.proc != nil {
		return m.proc.restart()
	}
	var err error
	for range 50 {
		var l net.Listener
		if l, err = net.Listen("tcp", m.addr); err == nil {
			m.serve(l)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// pause holds every request — those that arrive and those in flight — unanswered until
// resume, as SIGSTOP holds a process: the kernel accepts the connections, nothing answers.
func (m *merchant) pause() {
	if m.proc != nil {
		m.proc.pause()
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paused == nil {
		m.paused = make(chan struct{})
	}
}

// resume ends a pause.
func (m *merchant) resume() {
	if m.proc != nil {
		m.proc.resume()
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.paused != nil {
		close(m.paused)
		m.paused = nil
	}
}

// hold waits out a pause, and reports whether it had to.
func (m *merchant) hold() bool {
	m.mu.Lock()
	p := m.paused
	m.mu.Unlock()
	if p == nil {
		return false
	}
	<-p
	return true
}

// alive reports whether the life gen is the receiver's current one.
func (m *merchant) alive(gen int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen == gen
}

// close stops the server and closes the database.
func (m *merchant) close() {
	if m.proc != nil {
		m.proc.close()
		_ = m.db.Close()
		return
	}
	m.resume()
	m.mu.Lock()
	srv := m.srv
	m.mu.Unlock()
	_ = srv.Close()
	_ = m.db.Close()
}

// register makes the receiver an endpoint of oncepay at base, subscribed to every event type,
// and keeps the secret the registration shows. It returns the endpoint's id.
func (m *merchant) register(ctx context.Context, base, adminKey string) (string, error) {
	body, _ := json.Marshal(map[string]any{"url": m.url, "event_types": outbox.EventTypes, "description": "the chaos run's faulty receiver"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/admin/webhook-endpoints", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("register the receiver: %d %s", resp.StatusCode, b)
	}
	var out struct {
		ID     string `json:"endpoint_id"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Secret == "" || out.ID == "" {
		return "", fmt.Errorf("register the receiver: no id or secret in %s", b)
	}
	m.setSecret(out.Secret)
	return out.ID, nil
}

// setSecret makes secret the one the receiver accepts, alone.
func (m *merchant) setSecret(secret string) {
	m.mu.Lock()
	m.secrets = []hookSecret{{Secret: secret}}
	m.mu.Unlock()
	m.handOver()
}

// handOver writes the secrets for the receiver process, if there is one.
func (m *merchant) handOver() {
	if m.proc != nil {
		if err := m.writeSecrets(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: hand the secrets to the receiver:", err)
		}
	}
}

// rotated takes the secret a rotation made: from now on it is accepted, and the ones held
// before only until graceEnd.
func (m *merchant) rotated(secret string, graceEnd time.Time) {
	m.mu.Lock()
	next := []hookSecret{{Secret: secret}}
	for _, s := range m.secrets {
		if s.Secret != secret {
			if s.Until.IsZero() || s.Until.After(graceEnd) {
				s.Until = graceEnd
			}
			next = append(next, s)
		}
	}
	m.secrets = next
	m.mu.Unlock()
	m.handOver()
}

// valid is the secrets accepted at now.
func (m *merchant) valid(now time.Time) []string {
	m.mu.Lock()
	secrets := m.secrets
	m.mu.Unlock()
	if m.secretsFile != "" && m.proc == nil {
		secrets = m.readSecrets() // the receiver process: as the run handed them over
	}
	var out []string
	for _, s := range secrets {
		if s.Until.IsZero() || now.Before(s.Until) {
			out = append(out, s.Secret)
		}
	}
	return out
}

// ServeHTTP answers one attempt: 400 when a signature does not verify, else one of the
// faults or the processed answer, whose body names the request.
func (m *merchant) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	gen, rnd := m.gen, m.rnd
	m.mu.Unlock()
	a := hookAttempt{At: time.Now(), EventID: r.Header.Get("webhook-id")}
	a.Attempt, _ = strconv.Atoi(r.Header.Get("Oncepay-Delivery-Attempt"))
	if m.journal != nil {
		m.mu.Lock()
		m.arrived++
		a.ID = m.idPrefix + strconv.Itoa(m.arrived) // the receiver process's: unique across its lives
		m.mu.Unlock()
	}
	paused := m.hold()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		a.Err = "cannot read the body: " + err.Error()
		m.answer(w, a, gen, http.StatusBadRequest, "")
		return
	}
	sum := sha256.Sum256(body)
	a.BodyHash = hex.EncodeToString(sum[:])
	secrets := m.valid(time.Now())
	a.SigValid = verifyStandard(secrets, r.Header, body) && verifyHook(secrets, r.Header.Get("Oncepay-Signature"), body)
	var ev struct {
		EventID string `json:"event_id"`
		Type    string `json:"type"`
	}
	_ = json.Unmarshal(body, &ev)
	if m.journal != nil {
		// The receiver process: a line before anything is done, with the body's hash and the
		// signatures' verdict, so that a kill -9 leaves the request in the journal.
		m.mu.Lock()
		m.record(a, false)
		m.mu.Unlock()
	}
	switch {
	case !a.SigValid:
		m.answer(w, a, gen, http.StatusBadRequest, "")
		return
	case ev.EventID == "" || ev.EventID != a.EventID || r.Header.Get("Oncepay-Event-Id") != a.EventID:
		a.Err = fmt.Sprintf("body event_id %q, webhook-id %q, Oncepay-Event-Id %q", ev.EventID, a.EventID, r.Header.Get("Oncepay-Event-Id"))
		m.answer(w, a, gen, http.StatusBadRequest, "")
		return
	}
	p := rnd()
	switch {
	case p < hook500Share:
		a.Fault = "500"
		m.answer(w, a, gen, http.StatusInternalServerError, "")
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
		m.answer(w, a, gen, http.StatusInternalServerError, "")
		return
	}
	if m.hold() || paused {
		a.Fault = strings.TrimPrefix(a.Fault+",paused", ",")
	}
	if a.Fault == "lost_2xx" {
		// Processed and committed; the answer never comes before the sender's timeout.
		m.answer(w, a, gen, 0, "")
		select {
		case <-r.Context().Done():
		case <-time.After(hookTimeout + 3*time.Second):
		}
		// Never the empty 200 net/http writes for a handler that wrote nothing: a sender
		// paused meanwhile would read it as an acknowledgement.
		panic(http.ErrAbortHandler)
	}
	m.answer(w, a, gen, http.StatusOK, `{"duplicate":`+strconv.FormatBool(dup)+`,"request":"`)
}

// answer logs a and writes its answer: status with body (a 2xx body is completed with the
// request's id), or nothing when status is 0 (a lost 2xx, whose handler waits and aborts) or
// the listener a was sent to was killed (the handler is aborted here).
func (m *merchant) answer(w http.ResponseWriter, a hookAttempt, gen, status int, body string) {
	a.Done = time.Now()
	if !m.alive(gen) {
		a.Fault = strings.TrimPrefix(a.Fault+",killed", ",")
		status = 0
	}
	a.Answer = status
	m.mu.Lock()
	if a.ID == "" {
		a.ID = "r" + strconv.Itoa(len(m.attempts)+1)
	}
	if m.journal != nil {
		m.record(a, true)
	} else {
		m.attempts = append(m.attempts, a)
	}
	m.mu.Unlock()
	switch {
	case status == 0 && a.Fault != "lost_2xx":
		panic(http.ErrAbortHandler) // killed: the connection closes without an answer
	case status == 0:
		return
	case status >= 200 && status < 300:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body + a.ID + `"}`))
	default:
		http.Error(w, fmt.Sprintf("the receiver answers %d (%s%s)", status, a.Fault, a.Err), status)
	}
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

// snapshot returns the attempts seen so far.
func (m *merchant) snapshot() []hookAttempt {
	if m.proc != nil {
		return m.proc.snapshot()
	}
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
// some v1 is the HMAC-SHA256 of "<t>.<body>" under one of secrets, and t lies within five
// minutes of now. It computes the MAC itself rather than with oncepay's signer, so that a
// signer that went wrong does not verify its own mistake.
func verifyHook(secrets []string, header string, body []byte) bool {
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
	if !recent(ts) {
		return false
	}
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts + "."))
		mac.Write(body)
		if anyEqual(sigs, mac.Sum(nil)) {
			return true
		}
	}
	return false
}

// verifyStandard checks the Standard Webhooks headers (https://www.standardwebhooks.com): some
// "v1,<base64>" of webhook-signature is the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>"
// keyed by the base64 after whsec_ of one of secrets, and the timestamp lies within five
// minutes of now. Written from the specification, not with oncepay's signer.
func verifyStandard(secrets []string, h http.Header, body []byte) bool {
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	if id == "" || !recent(ts) {
		return false
	}
	var sigs [][]byte
	for _, part := range strings.Fields(h.Get("webhook-signature")) {
		if v, ok := strings.CutPrefix(part, "v1,"); ok {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	for _, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if err != nil {
			continue
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + ts + "."))
		mac.Write(body)
		if anyEqual(sigs, mac.Sum(nil)) {
			return true
		}
	}
	return false
}

// recent reports whether ts, unix seconds, lies within five minutes of now.
func recent(ts string) bool {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return false
	}
	d := time.Since(time.Unix(sec, 0))
	return d <= 5*time.Minute && d >= -5*time.Minute
}

func anyEqual(sigs [][]byte, want []byte) bool {
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
	// endpoint is the receiver's endpoint id, redeliveries the operator's (hookfaults.go).
	endpoint     string
	redeliveries []redelivery
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
	// Killed and Paused count the requests a kill or a pause of the receiver struck;
	// Redelivered the deliveries the operator's redelivery queued; FeedLagMaxSecs is the
	// longest an event waited for its place in the feed.
	Killed         int     `json:"killed"`
	Paused         int     `json:"paused"`
	Redelivered    int     `json:"redelivered"`
	FeedLagMaxSecs float64 `json:"feed_lag_max_seconds"`
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
		if strings.Contains(a.Fault, "killed") {
			f.Killed++
		}
		if strings.Contains(a.Fault, "paused") {
			f.Paused++
		}
		switch strings.TrimSuffix(strings.TrimSuffix(a.Fault, ",killed"), ",paused") {
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
		fmt.Sprintf("%d struck by a kill, %d by a pause", f.Killed, f.Paused), fmt.Sprintf("%d redelivered", f.Redelivered),
		fmt.Sprintf("%d effects", f.Processed), fmt.Sprintf("events API: %d events in %d pages", f.FeedEvents, f.FeedPages),
		fmt.Sprintf("longest wait for the feed %.1fs", f.FeedLagMaxSecs),
	}, ", ")
}
