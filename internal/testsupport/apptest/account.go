package apptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sethvargo/go-retry"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/ids"
)

// idsNode is the snowflake node of the ids tests make themselves; no instance uses it.
const idsNode = 1000

// testIDs is the generator of every id the tests make, shared so that two calls in the same
// millisecond never make the same id.
var testIDs = sync.OnceValues(func() (*ids.Generator, error) { return ids.New(idsNode) })

// IDs returns the tests' own id generator, on node 1000, which no instance uses: the ids it
// makes never collide with those of an instance.
func IDs(tb testing.TB) *ids.Generator {
	tb.Helper()
	gen, err := testIDs()
	if err != nil {
		tb.Fatalf("id generator on node %d: %v", idsNode, err)
	}
	return gen
}

// RandHex returns n random bytes in hex, to make names, keys and trade numbers unique.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewUser creates a user in db, named after name with a random suffix, with a fresh API key,
// and returns its id and key.
func NewUser(tb testing.TB, db *gorm.DB, name string) (int64, string) {
	tb.Helper()
	key := "key-" + name + "-" + RandHex(6)
	id, err := account.NewUsers(db, IDs(tb)).Ensure(context.Background(), name+"-"+RandHex(4), key)
	if err != nil {
		tb.Fatalf("ensure user %s: %v", name, err)
	}
	return id, key
}

// User is NewUser in the instance's database.
func (s *Server) User(tb testing.TB, name string) (int64, string) {
	tb.Helper()
	return NewUser(tb, s.DB, name)
}

// CreateRecharge asks for a recharge of amount as apiKey, under a fresh Idempotency-Key, and
// returns its id, failing the test unless the answer is 201 with a recharge id.
func (s *Server) CreateRecharge(tb testing.TB, apiKey string, amount int64) string {
	tb.Helper()
	r := s.Do(http.MethodPost, "/v1/recharges", apiKey, map[string]int64{"amount": amount}, IdemKey("rc-"+RandHex(8)))
	if r.Status != http.StatusCreated {
		tb.Fatalf("create recharge: %s", r)
	}
	var v account.RechargeView
	if err := json.Unmarshal(r.Body, &v); err != nil || v.RechargeID == "" {
		tb.Fatalf("create recharge: body %s: %v", r.Body, err)
	}
	return v.RechargeID
}

// RechargeReport is a SUCCESS report paying recharge rid's amount through channel's trade
// tradeNo.
func RechargeReport(rid, channel, tradeNo string, amount int64) notify.Report {
	return notify.Report{Kind: notify.Recharge, Channel: channel, Number: tradeNo, OutNo: rid, Amount: amount, Status: notify.StatusSuccess}
}

// NotifyRecharge posts the recharge report n to /v1/recharges/notify, signed with the
// instance's channel secret. It never fails the test, so storms can call it.
func (s *Server) NotifyRecharge(n notify.Report) Response {
	n.Kind = notify.Recharge
	return s.SignedPost(RechargeNotifyPath, n.Body())
}

// NotifyRechargeUntilDone posts n like a channel does: again, after a pause of a few
// milliseconds, while the answer is 409 (a copy is in flight elsewhere), for up to 30s. It
// returns the final answer and the Idempotency-Outcome of every answer on the way, and never
// fails the test.
func (s *Server) NotifyRechargeUntilDone(n notify.Report) (Response, []string) {
	var (
		last     Response
		outcomes []string
	)
	// 2 to 9 ms between copies (5.5 ms ± 3.5 ms), drawn at random so that the copies of a
	// storm do not all come back at once.
	pauses := retry.WithMaxDuration(30*time.Second,
		retry.WithJitter(3500*time.Microsecond, retry.NewConstant(5500*time.Microsecond)))
	_ = retry.Do(context.Background(), pauses, func(context.Context) error {
		last = s.NotifyRecharge(n)
		outcomes = append(outcomes, last.Outcome())
		if last.Status == http.StatusConflict {
			return retry.RetryableError(errInFlight)
		}
		return nil
	})
	return last, outcomes
}

// errInFlight is a 409 answer to a report: a copy of it is in flight elsewhere, and the
// report is sent again.
var errInFlight = errors.New("409: a copy of the report is in flight")
