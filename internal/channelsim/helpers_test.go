package channelsim

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

const testSecret = "test-channel-secret"

// testEnv is a simulator served over real HTTP on 127.0.0.1.
type testEnv struct {
	t   *testing.T
	sim *Sim
	srv *httptest.Server
}

// testConfig returns a configuration with a short schedule and refund delay.
func testConfig() Config {
	return Config{
		Secret:      testSecret,
		Schedule:    []time.Duration{50 * time.Millisecond, 100 * time.Millisecond},
		PublicURL:   "http://sim.test",
		Logger:      slog.New(slog.DiscardHandler),
		RefundDelay: 50 * time.Millisecond,
	}
}

// newEnv starts a simulator with cfg; the test's cleanup stops it.
func newEnv(t *testing.T, cfg Config) *testEnv {
	t.Helper()
	sim, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := sim.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	return &testEnv{t: t, sim: sim, srv: srv}
}

// do sends a request signed with the test secret and returns the status and body.
func (e *testEnv) do(method, path string, body any) (int, []byte) {
	e.t.Helper()
	return e.doWith(http.DefaultClient, method, path, body, testSecret)
}

// doWith sends a request signed with secret ("" leaves it unsigned) through client.
func (e *testEnv) doWith(client *http.Client, method, path string, body any, secret string) (int, []byte) {
	e.t.Helper()
	res, err := e.send(client, method, path, body, secret)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	return res.StatusCode, b
}

// send sends a request signed with secret and returns the response or the client's error.
func (e *testEnv) send(client *http.Client, method, path string, body any, secret string) (*http.Response, error) {
	e.t.Helper()
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			e.t.Fatalf("marshal: %v", err)
		}
	}
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(raw))
	if err != nil {
		e.t.Fatalf("request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set(HeaderSignature, Sign(secret, raw))
	}
	return client.Do(req)
}

// mustDo sends a signed request, requires status and decodes the answer into v (if not nil).
func (e *testEnv) mustDo(method, path string, body any, status int, v any) {
	e.t.Helper()
	got, b := e.do(method, path, body)
	if got != status {
		e.t.Fatalf("%s %s = %d %s, want %d", method, path, got, b, status)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// wantProblem sends a signed request and requires a problem with status and code.
func (e *testEnv) wantProblem(method, path string, body any, status int, code string) {
	e.t.Helper()
	got, b := e.do(method, path, body)
	checkProblem(e.t, got, b, status, code)
}

// checkProblem requires that an answer is a problem with status and code.
func checkProblem(t *testing.T, got int, b []byte, status int, code string) {
	t.Helper()
	var p problem
	if err := json.Unmarshal(b, &p); err != nil || got != status || p.Code != code {
		t.Fatalf("answer %d %s, want %d code %q", got, b, status, code)
	}
}

// createTrade opens a trade and returns it.
func (e *testEnv) createTrade(outTradeNo string, amount int64, notifyURL string) Trade {
	e.t.Helper()
	var tr Trade
	e.mustDo(http.MethodPost, "/channel/v1/trades", TradeRequest{
		OutTradeNo: outTradeNo, Amount: amount, Subject: "test order", NotifyURL: notifyURL,
	}, http.StatusOK, &tr)
	return tr
}

// getTrade queries a trade.
func (e *testEnv) getTrade(outTradeNo string) Trade {
	e.t.Helper()
	var tr Trade
	e.mustDo(http.MethodGet, "/channel/v1/trades/"+outTradeNo, nil, http.StatusOK, &tr)
	return tr
}

// pay pays a trade through the sim control.
func (e *testEnv) pay(outTradeNo string) Trade {
	e.t.Helper()
	var tr Trade
	e.mustDo(http.MethodPost, "/sim/trades/"+outTradeNo+"/pay", nil, http.StatusOK, &tr)
	return tr
}

// setFaults replaces the faults through PUT /sim/faults.
func (e *testEnv) setFaults(f any) {
	e.t.Helper()
	e.mustDo(http.MethodPut, "/sim/faults", f, http.StatusOK, nil)
}

// notifications returns the notifications of a trade from the simulator's state.
func (e *testEnv) notifications(outTradeNo string) []Notification {
	var ns []Notification
	for _, n := range e.sim.State().Notifications {
		if n.OutTradeNo == outTradeNo {
			ns = append(ns, n)
		}
	}
	return ns
}

// received is one notification a receiver got.
type received struct {
	Body      []byte
	Signature string
	RequestID string
	At        time.Time
}

// receiver is a notify_url server that records what it receives and answers with answer(i)
// for the i-th delivery (from 0).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []received
	answer func(i int) (int, string)
}

// ack is the acknowledgement that stops the retries.
const ack = `{"result":"success"}`

// newReceiver starts a receiver; answer nil always acknowledges.
func newReceiver(t *testing.T, answer func(i int) (int, string)) *receiver {
	t.Helper()
	r := &receiver{answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// serve records a delivery and answers it.
func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	i := len(r.got)
	r.got = append(r.got, received{Body: body, Signature: req.Header.Get(HeaderSignature), RequestID: req.Header.Get("X-Request-Id"), At: time.Now()})
	answer := r.answer
	r.mu.Unlock()
	status, text := http.StatusOK, ack
	if answer != nil {
		status, text = answer(i)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, text)
}

// setAnswer replaces the answer function.
func (r *receiver) setAnswer(answer func(i int) (int, string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = answer
}

// deliveries returns what the receiver got so far.
func (r *receiver) deliveries() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// count returns how many deliveries the receiver got.
func (r *receiver) count() int { return len(r.deliveries()) }

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// failing answers 500 to the first n deliveries and acknowledges the others.
func failing(n int) func(int) (int, string) {
	return func(i int) (int, string) {
		if i < n {
			return http.StatusInternalServerError, `{"code":"internal"}`
		}
		return http.StatusOK, ack
	}
}
