package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/platform/keyring"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

// fixture is one database with the webhook parts built on it by hand, no instance.
type fixture struct {
	db        *gorm.DB
	dsn       string
	gen       *ids.Generator
	events    *outbox.Writer
	endpoints *webhook.Endpoints
	anomalies *anomaly.Recorder
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, dsn := testenv.DBWithDSN(t)
	gen := apptest.IDs(t)
	return &fixture{db: db, dsn: dsn, gen: gen, events: outbox.NewWriter(gen),
		endpoints: webhook.NewEndpoints(db, gen, testKeys()), anomalies: anomaly.NewRecorder(db, gen)}
}

// announce commits one event of typ about data in a transaction of its own and returns its id.
func (f *fixture) announce(t *testing.T, typ string, data any) int64 {
	t.Helper()
	var id int64
	err := f.db.Transaction(func(tx *gorm.DB) error {
		ev, err := f.events.Notice(context.Background(), f.gen.Next(), typ, data)
		if err != nil {
			return err
		}
		id = ev.ID
		return tx.Create(ev).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// endpoint registers an endpoint for url and types.
func (f *fixture) endpoint(t *testing.T, url string, types ...string) webhook.Endpoint {
	t.Helper()
	if len(types) == 0 {
		types = []string{outbox.OrderPaid}
	}
	e, err := f.endpoints.Create(context.Background(), url, "test", types)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// sender returns a sender on db (a pool of its own stands for another instance) with a quick
// schedule.
func (f *fixture) sender(db *gorm.DB, schedule ...time.Duration) *webhook.Sender {
	s := webhook.NewSender(db, f.gen, anomaly.NewRecorder(db, f.gen), schedule, 2*time.Second).UsePolicy(webhook.AddressPolicy{Dev: true}).UseKeys(testKeys())
	s.Jitter = func(d time.Duration) time.Duration { return d }
	return s
}

// sequence sequences every committed event.
func (f *fixture) sequence(t *testing.T) int {
	t.Helper()
	total := 0
	for {
		n, err := webhook.NewSequencer(f.db, f.gen).Sequence(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if n == 0 {
			return total
		}
	}
}

// hit is one request a receiver got.
type hit struct {
	eventID, attempt, signature                   string
	webhookID, webhookTimestamp, webhookSignature string
	body                                          []byte
	at                                            time.Time
}

// receiver is a test receiver: answer decides each request's status, and every request is
// kept, with the most requests it ever had in flight for one event.
type receiver struct {
	srv    *httptest.Server
	answer func(h hit, n int) int // n: how many requests for this event came before
	hold   time.Duration

	mu          sync.Mutex
	hits        []hit
	inFlight    map[string]int
	maxInFlight int
}

func newReceiver(t *testing.T, answer func(h hit, n int) int) *receiver {
	t.Helper()
	r := &receiver{answer: answer, inFlight: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	h := hit{eventID: req.Header.Get(webhook.HeaderEventID), attempt: req.Header.Get(webhook.HeaderAttempt),
		signature: req.Header.Get(webhook.HeaderSignature), body: body, at: time.Now(),
		webhookID: req.Header.Get(webhook.HeaderWebhookID), webhookTimestamp: req.Header.Get(webhook.HeaderWebhookTimestamp),
		webhookSignature: req.Header.Get(webhook.HeaderWebhookSignature)}
	r.mu.Lock()
	n := 0
	for _, p := range r.hits {
		if p.eventID == h.eventID {
			n++
		}
	}
	r.hits = append(r.hits, h)
	r.inFlight[h.eventID]++
	r.maxInFlight = max(r.maxInFlight, r.inFlight[h.eventID])
	r.mu.Unlock()
	time.Sleep(r.hold)
	status := http.StatusOK
	if r.answer != nil {
		status = r.answer(h, n)
	}
	r.mu.Lock()
	r.inFlight[h.eventID]--
	r.mu.Unlock()
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"received":true}`))
}

func (r *receiver) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// verify checks a signature header against body with secret: some v1= must be the HMAC of
// "<t>.<body>", as a receiver checks it.
func verify(header string, body []byte, secret string) bool {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := hex.EncodeToString(mac.Sum(nil))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return true
		}
	}
	return false
}

// delivery reads the delivery of event to endpoint.
func (f *fixture) delivery(t *testing.T, endpointID, eventID int64) webhook.Delivery {
	t.Helper()
	var d webhook.Delivery
	if err := f.db.Where("endpoint_id = ? AND event_id = ?", endpointID, eventID).Take(&d).Error; err != nil {
		t.Fatalf("delivery of event %d to %d: %v", eventID, endpointID, err)
	}
	return d
}

// eventOf decodes an event body.
func eventOf(t *testing.T, body []byte) outbox.Envelope {
	t.Helper()
	var e outbox.Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("event body %q: %v", body, err)
	}
	return e
}

// unix reads a webhook-timestamp.
func unix(t *testing.T, s string) time.Time {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("webhook-timestamp %q: %v", s, err)
	}
	return time.Unix(n, 0)
}

// testKeys is the key ring of these tests.
func testKeys() *keyring.Ring {
	r, err := keyring.Parse("t1:" + base64.StdEncoding.EncodeToString([]byte("the test key of thirty-two bytes")))
	if err != nil {
		panic(err)
	}
	return r
}
