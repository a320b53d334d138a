package webhook_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/webhook"
)

// TestFeedRefusesWhatItCannotHaveGiven: the events API answers 400 to a type list that is not
// a set of known types (33,000 of them was a 500), and to a cursor it cannot have given:
// malformed, another spelling of a number (e:+3, e:03), or past the end of the feed (issue 27).
func TestFeedRefusesWhatItCannotHaveGiven(t *testing.T) {
	f := newFixture(t)
	for range 3 {
		f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "1"})
	}
	f.sequence(t)
	feed := webhook.NewFeed(f.db)
	get := func(q url.Values) int {
		rec := httptest.NewRecorder()
		feed.ListHandler(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/v1/admin/events?"+q.Encode(), nil))
		return rec.Code
	}
	cursor := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for name, q := range map[string]url.Values{
		"33,000 types":       {"type": {strings.TrimSuffix(strings.Repeat("order.paid,", 33000), ",")}},
		"a type twice":       {"type": {"order.paid,order.paid"}},
		"an empty type":      {"type": {""}},
		"an unknown type":    {"type": {"order.paid,order.shipped"}},
		"a plus sign":        {"after": {cursor("e:+3")}},
		"a leading zero":     {"after": {cursor("e:03")}},
		"past the end":       {"after": {cursor("e:4")}},
		"far past the end":   {"after": {cursor("e:9000000000")}},
		"padded base64":      {"after": {cursor("e:2") + "="}},
		"another kind":       {"after": {cursor("d:2")}},
		"not base64":         {"after": {"e:2"}},
		"a negative number":  {"after": {cursor("e:-1")}},
		"trailing bytes":     {"after": {cursor("e:2 ")}},
		"a number in binary": {"after": {cursor("e:0b11")}},
	} {
		if code := get(q); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, code)
		}
	}
	for name, q := range map[string]url.Values{
		"every type":        {"type": {strings.Join(outbox.EventTypes, ",")}},
		"the start":         {"after": {cursor("e:0")}},
		"the last event":    {"after": {cursor("e:3")}},
		"a cursor mid-feed": {"after": {cursor("e:1")}},
	} {
		if code := get(q); code != http.StatusOK {
			t.Errorf("%s: %d, want 200", name, code)
		}
	}
}

// TestLatencyIncludesTheBodyRead: a receiver that answers its headers at once and trickles its
// body for a second held the attempt a second; the delivery log says so (it said 1 ms).
func TestLatencyIncludesTheBodyRead(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		for range 5 {
			_, _ = w.Write([]byte("."))
			w.(http.Flusher).Flush()
			time.Sleep(200 * time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	e := f.endpoint(t, srv.URL, outbox.OrderPaid)
	f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "1"})
	f.sequence(t)
	if n, err := f.sender(f.db, time.Hour).RunOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("sent %d (%v)", n, err)
	}
	var a webhook.Attempt
	if err := f.db.Where("endpoint_id = ?", e.ID).Take(&a).Error; err != nil {
		t.Fatal(err)
	}
	if a.LatencyMS < 900 {
		t.Errorf("latency %d ms, want at least the 1 s the body took", a.LatencyMS)
	}
}
