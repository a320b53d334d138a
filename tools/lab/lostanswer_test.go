package lab

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoseFirstAnswer is I18's lossy network on its own: every request reaches the route it
// stands in front of, POST /v1/orders, with its header and body; the first answer of a run is
// never delivered — the client times out although the work ran — and every later request of
// the run gets its answer.
func TestLoseFirstAnswer(t *testing.T) {
	var calls atomic.Int32
	l := &Lab{upstream: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/orders" || r.URL.RawQuery != "" || r.Header.Get("Idempotency-Key") != "k1" || string(b) != `{"items":[]}` {
			http.Error(w, "not the request that was sent: "+r.URL.String(), http.StatusTeapot)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order_id":"1"}`)
	})}
	srv := httptest.NewServer(http.HandlerFunc(l.loseFirstAnswer))
	defer srv.Close()
	c := &http.Client{Timeout: 300 * time.Millisecond}
	post := func(query string) (int, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/lab/orders/lose-first-answer"+query, strings.NewReader(`{"items":[]}`))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}

	if status, err := post("?run=a"); err == nil {
		t.Fatalf("the first answer of run a arrived: %d", status)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the route ran %d times for the lost request, want 1", n)
	}
	if status, err := post("?run=a"); err != nil || status != http.StatusCreated {
		t.Fatalf("the retry of run a: %d, %v; want 201", status, err)
	}
	if status, err := post("?run=b"); err == nil {
		t.Errorf("the first answer of run b arrived: %d", status)
	}
	if status, err := post(""); err != nil || status != http.StatusBadRequest {
		t.Errorf("no run: %d, %v; want 400", status, err)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("the route ran %d times, want 3 (runs a twice, b once, none without a run)", n)
	}
}
