package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	gomysql "github.com/go-sql-driver/mysql"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The secrets of these tests, whsec_ and base64 as oncepay makes them.
const (
	secret      = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	otherSecret = "whsec_b3RoZXIgc2VjcmV0IG9mIDI0IGJ5dGVzIQ=="
	newSecret   = "whsec_bmV3IHNlY3JldCBvZiBhdCBsZWFzdCAyNCBieXRlcw=="
)

// databases are the databases the receiver's tests run on: SQLite always, and a fresh
// MySQL/MariaDB database when ONCEPAY_TEST_MYSQL_DSN is set (required with CI=true).
func databases(t *testing.T) map[string]*gorm.DB {
	t.Helper()
	// One gorm.Config per database: a dialect registers its clause builders in it.
	cfg := func() *gorm.Config { return &gorm.Config{Logger: logger.Discard} }
	lite, err := gorm.Open(sqlite.Open(filepath.Join(t.TempDir(), "r.db")+"?_pragma=busy_timeout(10000)&_txlock=immediate"), cfg())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*gorm.DB{"sqlite": lite}
	dsn := os.Getenv("ONCEPAY_TEST_MYSQL_DSN")
	if dsn == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("ONCEPAY_TEST_MYSQL_DSN is not set but CI=true: the receiver must be proven on MySQL too")
		}
		return out
	}
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := gorm.Open(mysql.Open(c.FormatDSN()), cfg())
	if err != nil {
		t.Fatalf("MySQL at %s unreachable: %v", c.Addr, err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "receiver_" + hex.EncodeToString(b)
	if err := admin.Exec("CREATE DATABASE " + name).Error; err != nil {
		t.Fatalf("MySQL at %s: %v", c.Addr, err)
	}
	t.Cleanup(func() { admin.Exec("DROP DATABASE " + name) })
	c.DBName = name
	db, err := gorm.Open(mysql.Open(c.FormatDSN()), cfg())
	if err != nil {
		t.Fatal(err)
	}
	out["mysql"] = db
	return out
}

// sign is the Standard Webhooks headers of body at t with secrets, as oncepay sends them: the
// event id as webhook-id, one v1 per secret, space-separated. It signs with the
// specification's library, so that the receiver is checked against the specification and not
// against a copy of its own code.
func sign(t time.Time, body []byte, secrets ...string) http.Header {
	var ev Event
	_ = json.Unmarshal(body, &ev)
	var sigs []string
	for _, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			panic(err)
		}
		sig, _ := wh.Sign(ev.EventID, t, body)
		sigs = append(sigs, sig)
	}
	h := http.Header{}
	h.Set("webhook-id", ev.EventID)
	h.Set("webhook-timestamp", strconv.FormatInt(t.Unix(), 10))
	h.Set("webhook-signature", strings.Join(sigs, " "))
	return h
}

func paidEvent(id, orderID string) []byte {
	return []byte(fmt.Sprintf(`{"event_id":%q,"type":"order.paid","created_at":"2026-12-01T12:00:00Z","data":{"order_id":%q,"status":"PAID"}}`, id, orderID))
}

func post(t *testing.T, h http.Handler, body []byte, headers http.Header) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(body))
	for k, v := range headers {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

func shipments(t *testing.T, db *gorm.DB, orderID string) int64 {
	t.Helper()
	var n int64
	if err := db.Model(&Shipment{}).Where("order_id = ?", orderID).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLostAckProcessesOnce is I16: oncepay sends an event, the receiver ships, its 2xx is
// lost, oncepay sends the same event again — and twenty copies at once for good measure. With
// the dedup record the order ships once and every copy is answered 200; the naive receiver
// ships it once per copy.
func TestLostAckProcessesOnce(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) {
			rc, err := New(db, []string{secret}, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			body := paidEvent("2001", "O-1")
			if code := post(t, rc, body, sign(time.Now(), body, secret)); code != 200 {
				t.Fatalf("first delivery: %d", code)
			}
			// The answer was lost on the way back: oncepay retries, signed afresh.
			if code := post(t, rc, body, sign(time.Now(), body, secret)); code != 200 {
				t.Fatalf("the retry: %d, want 200 so that oncepay stops", code)
			}
			storm := paidEvent("2002", "O-2")
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					if code := post(t, rc, storm, sign(time.Now(), storm, secret)); code != 200 {
						t.Errorf("storm copy: %d", code)
					}
				})
			}
			wg.Wait()
			if n := shipments(t, db, "O-1"); n != 1 {
				t.Errorf("O-1 shipped %d times, want once", n)
			}
			if n := shipments(t, db, "O-2"); n != 1 {
				t.Errorf("O-2 shipped %d times under 20 concurrent copies, want once", n)
			}

			naive := *rc
			naive.Dedup = false
			again := paidEvent("2003", "O-3")
			post(t, &naive, again, sign(time.Now(), again, secret))
			post(t, &naive, again, sign(time.Now(), again, secret))
			if n := shipments(t, db, "O-3"); n != 2 {
				t.Errorf("the naive receiver shipped O-3 %d times; the drill expects it twice", n)
			}
		})
	}
}

// TestSignatureAndTolerance: a body altered, signed by another secret, or signed too long ago
// is refused 400 and changes nothing; during a rotation a header with the old and the new
// secret's v1 is accepted by a receiver that knows either.
func TestSignatureAndTolerance(t *testing.T) {
	db := databases(t)["sqlite"]
	rc, err := New(db, []string{secret}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	body := paidEvent("3001", "O-9")
	noTimestamp := sign(time.Now(), body, secret)
	noTimestamp.Del("webhook-timestamp")
	otherID := sign(time.Now(), body, secret)
	otherID.Set("webhook-id", "3002")
	for name, sig := range map[string]http.Header{
		"another secret":            sign(time.Now(), body, otherSecret),
		"too old":                   sign(time.Now().Add(-2*time.Minute), body, secret),
		"from the future":           sign(time.Now().Add(2*time.Minute), body, secret),
		"no timestamp":              noTimestamp,
		"another id than the MAC's": otherID,
		"empty":                     {},
	} {
		if code := post(t, rc, body, sig); code != 400 {
			t.Errorf("%s: %d, want 400", name, code)
		}
	}
	altered := bytes.Replace(body, []byte("O-9"), []byte("O-8"), 1)
	if code := post(t, rc, altered, sign(time.Now(), body, secret)); code != 400 {
		t.Errorf("altered body: %d, want 400", code)
	}
	if n := shipments(t, db, "O-9") + shipments(t, db, "O-8"); n != 0 {
		t.Errorf("refused deliveries shipped %d times", n)
	}
	rotated := sign(time.Now(), body, newSecret, secret)
	if code := post(t, rc, body, rotated); code != 200 {
		t.Errorf("rotation header with the old secret second: %d, want 200", code)
	}
	rc.Secrets = []string{newSecret}
	if code := post(t, rc, body, rotated); code != 200 {
		t.Errorf("a receiver on the new secret: %d, want 200", code)
	}
	if n := shipments(t, db, "O-9"); n != 1 {
		t.Errorf("O-9 shipped %d times, want once", n)
	}
}

// TestFailedEffectKeepsNoRecord: an effect that fails rolls its dedup record back, so that
// oncepay's retry of the event processes it instead of being answered "duplicate".
func TestFailedEffectKeepsNoRecord(t *testing.T) {
	db := databases(t)["sqlite"]
	rc, err := New(db, []string{secret}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The effect fails inside the transaction, after the id was inserted: the table it
	// writes is gone for a moment.
	if err := db.Migrator().RenameTable(&Shipment{}, "shipments_away"); err != nil {
		t.Fatal(err)
	}
	body := paidEvent("4001", "O-40")
	if code := post(t, rc, body, sign(time.Now(), body, secret)); code != 500 {
		t.Fatalf("failing effect: %d, want 500", code)
	}
	var n int64
	db.Model(&ProcessedEvent{}).Where("event_id = ?", "4001").Count(&n)
	if n != 0 {
		t.Errorf("the failed event left a dedup record: its retry would be skipped")
	}
	if err := db.Migrator().RenameTable("shipments_away", &Shipment{}); err != nil {
		t.Fatal(err)
	}
	if code := post(t, rc, body, sign(time.Now(), body, secret)); code != 200 {
		t.Fatalf("the retry: %d, want 200", code)
	}
	if n := shipments(t, db, "O-40"); n != 1 {
		t.Errorf("the retry shipped %d times, want once", n)
	}
}

// TestPublishedVector: the receiver accepts the specification's published test vector (its
// libraries' TestWebhookSign) at its own timestamp, and refuses it with one byte changed.
func TestPublishedVector(t *testing.T) {
	rc := &Receiver{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Tolerance: 5 * time.Minute}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,bm90IHRoaXMgb25l v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	at := time.Unix(1614265330, 0)
	if id, err := rc.Verify(h, []byte(`{"test": 2432232314}`), at); err != nil || id != "msg_p5jXN8AQM9LWM0D4loKWxJek" {
		t.Errorf("the published vector: %q, %v; want it verified", id, err)
	}
	if _, err := rc.Verify(h, []byte(`{"test": 2432232315}`), at); err == nil {
		t.Error("an altered body verified")
	}
}
