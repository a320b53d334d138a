package chaos

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// loseFirstAnswer is a transport whose first answer is lost after the server processed it,
// as a client timeout after the commit.
type loseFirstAnswer struct {
	mu   sync.Mutex
	lost bool
}

func (l *loseFirstAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	lose := !l.lost
	l.lost = true
	l.mu.Unlock()
	if !lose {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, context.DeadlineExceeded
}

// TestWriteRetriesWithTheClient: an order whose first delivery lost its answer after the
// server made the order is retried by oncepay's client under the same key; the retry, an
// attempt of the client recorded in the history like any delivery, is answered with the same
// order, replayed, and the database holds one order.
func TestWriteRetriesWithTheClient(t *testing.T) {
	s := apptest.Start(t)
	uid, key := s.User(t, "chaos-write")
	sku := "CHW-" + apptest.RandHex(3)
	s.PutInventory(t, sku, 500, 10)
	wl := &workload{
		w: &world{insts: []*instance{{n: 1, base: s.URL}}}, h: newTestHistory(t),
		http: &http.Client{Timeout: clientTimeout, Transport: &loseFirstAnswer{}},
	}
	idem := newKey("order")
	start := time.Now()
	e := wl.write(context.Background(), call{op: "order", user: "u", key: idem, method: http.MethodPost, path: "/v1/orders",
		bearer: key, idemKey: idem, body: []byte(`{"items":[{"sku":"` + sku + `","quantity":2}]}`)}, 1)
	events := wl.h.snapshot()
	if e == nil || e.Status != http.StatusCreated || !e.Replayed {
		t.Fatalf("write returned %+v, want the replayed 201; deliveries %s", e, lines(events))
	}
	if len(events) != 2 || events[0].Err == "" || events[1] != e || events[0].Key != idem || events[1].Key != idem || events[1].Op != "order" || events[1].Inst != 1 {
		t.Fatalf("deliveries %s: want the lost one, then the client's retry under the same key", lines(events))
	}
	if events[0].ReqID == "" || events[1].ReqID == "" || events[0].ReqID == events[1].ReqID {
		t.Errorf("request ids %q and %q: want one of its own per delivery, for the gateway's log", events[0].ReqID, events[1].ReqID)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the write took %s", took)
	}
	var o orderRef
	if err := json.Unmarshal([]byte(e.Resp), &o); err != nil || o.ID == "" {
		t.Fatalf("answer %q: %v", e.Resp, err)
	}
	if n := s.Count(t, "orders", "user_id = ?", uid); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	if it := s.Inventory(t, sku); it.Reserved != 2 || it.Available != 8 {
		t.Errorf("stock available %d reserved %d, want 8 and 2", it.Available, it.Reserved)
	}
	if n := wl.deliveries.Load(); n != 2 {
		t.Errorf("%d deliveries counted, want 2", n)
	}
}
