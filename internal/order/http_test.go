package order_test

import (
	"bytes"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// keyboard is the line most tests order.
var keyboard = apptest.Item{SKU: "SKU-1001", Quantity: 2}

// TestDoubleSubmitSequential reproduces I7 with a one-time token: the same order form
// submitted twice gets the first order back, marked as a replay, and only one order exists.
func TestDoubleSubmitSequential(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	before := s.Inventory(t, keyboard.SKU)
	token := s.Token(t, apptest.AliceKey)

	first := apptest.Must(t, s.PostOrder(apptest.AliceKey, token, keyboard), http.StatusCreated)
	second := apptest.Must(t, s.PostOrder(apptest.AliceKey, token, keyboard), http.StatusCreated)

	if got := first.Header.Get(httpkey.HeaderOutcome); got != "executed" {
		t.Errorf("first submission Idempotency-Outcome %q, want executed", got)
	}
	if got := second.Header.Get(httpkey.HeaderReplayed); got != "true" {
		t.Errorf("second submission Idempotent-Replayed %q, want true", got)
	}
	if !bytes.Equal(first.Body, second.Body) {
		t.Errorf("second submission answered\n%s\nwant the first answer\n%s", second.Body, first.Body)
	}
	if a, b := first.Header.Get("Location"), second.Header.Get("Location"); a == "" || a != b {
		t.Errorf("Location %q then %q, want the same order's", a, b)
	}
	wantOrders(t, s, 1)
	if after := s.Inventory(t, keyboard.SKU); after.Reserved != before.Reserved+keyboard.Quantity {
		t.Errorf("reserved %d, want %d: stock reserved once", after.Reserved, before.Reserved+keyboard.Quantity)
	}
}

// TestDoubleSubmitConcurrent is I7 at its worst: ten copies of one submission at once. One
// creates the order; each other copy is told the first is still running (409
// idempotency_key_in_use, Retry-After) or, once it finished, gets its answer replayed.
func TestDoubleSubmitConcurrent(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	before := s.Inventory(t, keyboard.SKU)
	token := s.Token(t, apptest.AliceKey)

	const copies = 10
	answers := make([]apptest.Response, copies)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() {
			<-start
			answers[i] = s.PostOrder(apptest.AliceKey, token, keyboard)
		})
	}
	close(start)
	wg.Wait()

	var executed []apptest.Response
	inUse, replayed := 0, 0
	for i, r := range answers {
		switch {
		case r.Status == http.StatusCreated && r.Header.Get(httpkey.HeaderOutcome) == "executed":
			executed = append(executed, r)
		case r.Status == http.StatusCreated && r.Header.Get(httpkey.HeaderReplayed) == "true":
			replayed++
		case r.Status == http.StatusConflict && r.Code() == "idempotency_key_in_use" && r.Header.Get("Retry-After") != "":
			inUse++
		default:
			t.Errorf("copy %d: %s (outcome %q), want 201 executed, 201 replayed or 409 idempotency_key_in_use with Retry-After",
				i, r, r.Header.Get(httpkey.HeaderOutcome))
		}
	}
	if len(executed) != 1 {
		t.Fatalf("%d copies executed, want exactly 1", len(executed))
	}
	t.Logf("1 executed, %d in use, %d replayed", inUse, replayed)
	for _, r := range answers {
		if r.Status == http.StatusCreated && !bytes.Equal(r.Body, executed[0].Body) {
			t.Errorf("a copy answered %s, want the first order %s", r.Body, executed[0].Body)
		}
	}
	// After the storm, the copy that was told to retry gets the first answer.
	again := apptest.Must(t, s.PostOrder(apptest.AliceKey, token, keyboard), http.StatusCreated)
	if again.Header.Get(httpkey.HeaderReplayed) != "true" || !bytes.Equal(again.Body, executed[0].Body) {
		t.Errorf("retry after the storm: %s (replayed %q), want the first order replayed", again, again.Header.Get(httpkey.HeaderReplayed))
	}
	wantOrders(t, s, 1)
	if after := s.Inventory(t, keyboard.SKU); after.Reserved != before.Reserved+keyboard.Quantity {
		t.Errorf("reserved %d, want %d", after.Reserved, before.Reserved+keyboard.Quantity)
	}
}

// TestKeyRules covers the other rows of the Idempotency-Key table for order creation.
func TestKeyRules(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	aliceToken := s.Token(t, apptest.AliceKey)

	// create422: the same key with a different body is refused and creates nothing.
	apptest.Must(t, s.PostOrder(apptest.AliceKey, "rules-1", keyboard), http.StatusCreated)
	r := s.PostOrder(apptest.AliceKey, "rules-1", apptest.Item{SKU: keyboard.SKU, Quantity: 3})
	apptest.WantProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused")

	// create201: another user's identical key is independent of alice's.
	bobs := s.CreateOrder(t, apptest.BobKey, "rules-1", keyboard)
	if s.Order(t, bobs.OrderID).UserID == 0 {
		t.Fatal("bob's order has no owner")
	}

	// create400: a token issued to alice is not bob's, and a made-up token is nobody's.
	apptest.WantProblem(t, s.PostOrder(apptest.BobKey, aliceToken, keyboard), http.StatusBadRequest, "idempotency_token_invalid")
	apptest.WantProblem(t, s.PostOrder(apptest.AliceKey, "tok_madeup", keyboard), http.StatusBadRequest, "idempotency_token_invalid")

	// cancel422: one key on two orders' cancel routes is two different requests, never a
	// replay of the first order's answer for the second.
	x := s.CreateOrder(t, apptest.AliceKey, "rules-x", keyboard)
	y := s.CreateOrder(t, apptest.AliceKey, "rules-y", keyboard)
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+x.OrderID+"/cancel", apptest.AliceKey, nil, apptest.IdemKey("rules-cancel")), http.StatusOK)
	r = s.Do(http.MethodPost, "/v1/orders/"+y.OrderID+"/cancel", apptest.AliceKey, nil, apptest.IdemKey("rules-cancel"))
	apptest.WantProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused")
	if st := s.Order(t, y.OrderID).Status; st != order.PendingPayment {
		t.Errorf("order y is %s, want PENDING_PAYMENT", st)
	}

	wantOrders(t, s, 4)
}

// wantOrders fails the test unless the database holds n orders.
func wantOrders(t *testing.T, s *apptest.Server, n int64) {
	t.Helper()
	if got := s.Count(t, "orders", ""); got != n {
		t.Errorf("orders rows: %d, want %d", got, n)
	}
}

// TestCreateRefusals sends order requests that must create nothing and checks each answer and
// what it left: nothing when refused before the idempotency layer (no key, no user, a body
// that does not decode or validate), only its stored answer when the business refused it
// (unknown SKU, out of stock: a retry under the same key answers the same).
func TestCreateRefusals(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	many := make([]apptest.Item, order.MaxItems+1)
	for i := range many {
		many[i] = apptest.Item{SKU: fmt.Sprintf("SKU-%d", 1001+i), Quantity: 1}
	}
	stored := map[string]int64{"idempotency_records": 1}
	tests := []struct {
		name    string
		apiKey  string
		body    any
		headers map[string]string
		status  int
		code    string
		delta   map[string]int64
	}{
		{"create400MalformedJSON", apptest.AliceKey, `{"items":[`, apptest.IdemKey("bad-json"), http.StatusBadRequest, "invalid_request", nil},
		{"create400UnknownField", apptest.AliceKey, `{"items":[{"sku":"SKU-1001","quantity":1}],"coupon":"x"}`, apptest.IdemKey("bad-field"), http.StatusBadRequest, "invalid_request", nil},
		{"create400NoItems", apptest.AliceKey, apptest.OrderBody(), apptest.IdemKey("no-items"), http.StatusBadRequest, "invalid_request", nil},
		{"create400UnknownSKU", apptest.AliceKey, apptest.OrderBody(keyboard, apptest.Item{SKU: "SKU-NOPE", Quantity: 1}), apptest.IdemKey("unknown-sku"), http.StatusBadRequest, "unknown_sku", stored},
		{"create400QuantityZero", apptest.AliceKey, apptest.OrderBody(apptest.Item{SKU: "SKU-1002", Quantity: 0}), apptest.IdemKey("q0"), http.StatusBadRequest, "invalid_request", nil},
		{"create400Quantity1001", apptest.AliceKey, apptest.OrderBody(apptest.Item{SKU: "SKU-1002", Quantity: 1001}), apptest.IdemKey("q1001"), http.StatusBadRequest, "invalid_request", nil},
		{"create400FiftyOneItems", apptest.AliceKey, apptest.OrderBody(many...), apptest.IdemKey("many"), http.StatusBadRequest, "invalid_request", nil},
		{"create400DuplicateSKU", apptest.AliceKey, apptest.OrderBody(keyboard, keyboard), apptest.IdemKey("dup-sku"), http.StatusBadRequest, "invalid_request", nil},
		{"create409OutOfStock", apptest.AliceKey, apptest.OrderBody(keyboard, apptest.Item{SKU: "SKU-1003", Quantity: 6}), apptest.IdemKey("too-many"), http.StatusConflict, "out_of_stock", stored},
		{"create400NoIdempotencyKey", apptest.AliceKey, apptest.OrderBody(keyboard), nil, http.StatusBadRequest, "idempotency_key_missing", nil},
		{"create400InvalidIdempotencyKey", apptest.AliceKey, apptest.OrderBody(keyboard), apptest.IdemKey("has space"), http.StatusBadRequest, "idempotency_key_invalid", nil},
		{"create401NoUser", "", apptest.OrderBody(keyboard), apptest.IdemKey("anon"), http.StatusUnauthorized, "unauthorized", nil},
		{"create401UnknownUser", "not-a-key", apptest.OrderBody(keyboard), apptest.IdemKey("anon"), http.StatusUnauthorized, "unauthorized", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Snapshot(t)
			r := s.Do(http.MethodPost, "/v1/orders", tt.apiKey, tt.body, tt.headers)
			apptest.WantProblem(t, r, tt.status, tt.code)
			want := tt.delta
			if want == nil {
				want = map[string]int64{}
			}
			if diff := before.Diff(s.Snapshot(t)); !maps.Equal(diff, want) {
				t.Errorf("database changed by %v, want %v", apptest.Snapshot(diff), apptest.Snapshot(want))
			}
			if tt.delta == nil && r.Header.Get(httpkey.HeaderOutcome) != "rejected" {
				t.Errorf("Idempotency-Outcome %q, want rejected", r.Header.Get(httpkey.HeaderOutcome))
			}
			if tt.delta != nil {
				again := s.Do(http.MethodPost, "/v1/orders", tt.apiKey, tt.body, tt.headers)
				if again.Status != r.Status || again.Header.Get(httpkey.HeaderReplayed) != "true" {
					t.Errorf("retry with the same key: %s (replayed %q), want the stored %d replayed",
						again, again.Header.Get(httpkey.HeaderReplayed), r.Status)
				}
			}
		})
	}
}

// TestCreateCorrectedRetry: a body refused before the guard stores nothing under its key, so
// the client's corrected retry with the same key creates the order.
func TestCreateCorrectedRetry(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	bad := s.Do(http.MethodPost, "/v1/orders", apptest.AliceKey, `{"items":[{"sku":"SKU-1002","quantity":0}]}`, apptest.IdemKey("fix-me"))
	apptest.WantProblem(t, bad, http.StatusBadRequest, "invalid_request")
	good := s.Do(http.MethodPost, "/v1/orders", apptest.AliceKey, apptest.OrderBody(apptest.Item{SKU: "SKU-1002", Quantity: 1}), apptest.IdemKey("fix-me"))
	if good.Status != http.StatusCreated || good.Header.Get(httpkey.HeaderOutcome) != "executed" {
		t.Fatalf("corrected retry: %s (outcome %q), want 201 executed", good, good.Header.Get(httpkey.HeaderOutcome))
	}
}

// TestFlashSale: 200 buyers race for 5 units. The conditional UPDATE (available >= q) lets
// exactly 5 through; the other 195 get 409 out_of_stock; stock never goes negative.
func TestFlashSale(t *testing.T) {
	const (
		sku     = "SKU-FLASH"
		units   = 5
		buyers  = 200
		pollGap = 5 * time.Millisecond
	)
	s := apptest.StartOnly(t, apptest.Router)
	s.PutInventory(t, sku, 100, units)

	stop := make(chan struct{})
	var polls, badPolls atomic.Int64
	var firstBad atomic.Value
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for {
			var it inventory.Item
			if err := s.DB.Where("sku = ?", sku).Take(&it).Error; err == nil {
				polls.Add(1)
				if it.Available < 0 || it.Reserved < 0 || it.Available+it.Reserved+it.Sold != units {
					badPolls.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("%+v", it))
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(pollGap):
			}
		}
	}()

	answers := make([]apptest.Response, buyers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			<-start
			user := apptest.AliceKey
			if i%2 == 1 {
				user = apptest.BobKey
			}
			answers[i] = s.PostOrder(user, apptest.Key("flash", i), apptest.Item{SKU: sku, Quantity: 1})
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	<-pollDone

	created, soldOut := 0, 0
	for i, r := range answers {
		switch {
		case r.Status == http.StatusCreated:
			created++
		case r.Status == http.StatusConflict && r.Code() == "out_of_stock":
			soldOut++
		default:
			t.Errorf("buyer %d: %s, want 201 or 409 out_of_stock", i, r)
		}
	}
	if created != units || soldOut != buyers-units {
		t.Errorf("%d created and %d out_of_stock, want %d and %d", created, soldOut, units, buyers-units)
	}
	if n := badPolls.Load(); n > 0 {
		t.Errorf("%d of %d polls saw impossible stock, first %v", n, polls.Load(), firstBad.Load())
	}
	it := s.Inventory(t, sku)
	if it.Available != 0 || it.Reserved != units || it.Sold != 0 {
		t.Errorf("stock available/reserved/sold %d/%d/%d, want 0/%d/0", it.Available, it.Reserved, it.Sold, units)
	}
	if n := s.Count(t, "order_items", "sku = ?", sku); n != units {
		t.Errorf("order lines for %s: %d, want %d", sku, n, units)
	}
	wantOrders(t, s, units)
	if n := s.Count(t, "inventory_movements", "sku = ?", sku); n != units {
		t.Errorf("movements for %s: %d, want %d (refused buyers roll theirs back)", sku, n, units)
	}
}

// TestCancel walks the cancel flow: a pending order is cancelled once (stock released, an
// order.cancelled event), the same request again is a replay, a cancel of a PAID order is turned
// away by the state precondition, and a payment arriving after the cancel changes nothing but
// is recorded for refund.
func TestCancel(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Loops) // the relay publishes order.cancelled
	before := s.Inventory(t, keyboard.SKU)
	o := s.CreateOrder(t, apptest.AliceKey, "cancel-me", keyboard)
	cancelPath := "/v1/orders/" + o.OrderID + "/cancel"

	r := apptest.Must(t, s.Do(http.MethodPost, cancelPath, apptest.AliceKey, nil, apptest.IdemKey("cancel-1")), http.StatusOK)
	var v order.View
	r.Decode(t, &v)
	if v.Status != order.Cancelled || v.OrderID != o.OrderID {
		t.Errorf("cancel answered %+v, want the order CANCELLED", v)
	}
	if after := s.Inventory(t, keyboard.SKU); after != withTime(before, after) {
		t.Errorf("stock after cancel %+v, want it back to %+v", after, before)
	}
	replay := apptest.Must(t, s.Do(http.MethodPost, cancelPath, apptest.AliceKey, nil, apptest.IdemKey("cancel-1")), http.StatusOK)
	if replay.Header.Get(httpkey.HeaderReplayed) != "true" || !bytes.Equal(replay.Body, r.Body) {
		t.Errorf("same cancel again: %s, want the first answer replayed", replay)
	}
	again := s.Do(http.MethodPost, cancelPath, apptest.AliceKey, nil, apptest.IdemKey("cancel-2"))
	apptest.WantProblem(t, again, http.StatusConflict, "illegal_state")

	// A payment for the cancelled order: success for the channel, nothing else but an anomaly.
	apptest.Must(t, s.NotifyUntilDone(apptest.JSON(apptest.Notification(o, "alipay", "T-LATE-"+o.OrderID))), http.StatusOK)
	if st := s.Order(t, o.OrderID).Status; st != order.Cancelled {
		t.Errorf("order is %s after a late payment, want CANCELLED", st)
	}
	if after := s.Inventory(t, keyboard.SKU); after != withTime(before, after) {
		t.Errorf("stock after a late payment %+v, want %+v", after, before)
	}
	if got := s.AnomaliesOf(t, anomaly.PaidAfterClose, o.OrderID); len(got) != 1 {
		t.Errorf("paid_after_close anomalies: %d, want 1", len(got))
	}
	if n := s.Count(t, "payments", ""); n != 0 {
		t.Errorf("payments rows: %d, want 0", n)
	}
	evs := s.OrderEvents(t, o.OrderID)
	if apptest.CountEvents(evs, "order.cancelled") != 1 || apptest.CountEvents(evs, "order.paid") != 0 {
		t.Errorf("order.events %+v, want one order.created and one order.cancelled", evs)
	}
}

// TestCancelPaid: cancelling a PAID order is refused with 409 illegal_state and
// Idempotency-Outcome: state_rejected; the order and its stock stay as paid.
func TestCancelPaid(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	o := s.CreateOrder(t, apptest.AliceKey, "paid", keyboard)
	apptest.Must(t, s.NotifyUntilDone(apptest.JSON(apptest.Notification(o, "alipay", "T-PAID-"+o.OrderID))), http.StatusOK)
	paid := s.Inventory(t, keyboard.SKU)

	r := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/cancel", apptest.AliceKey, nil, apptest.IdemKey("cancel-paid"))
	apptest.WantProblem(t, r, http.StatusConflict, "illegal_state")
	if got := r.Header.Get(httpkey.HeaderOutcome); got != "state_rejected" {
		t.Errorf("Idempotency-Outcome %q, want state_rejected", got)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.Paid {
		t.Errorf("order is %s, want PAID", st)
	}
	if after := s.Inventory(t, keyboard.SKU); after != withTime(paid, after) {
		t.Errorf("stock %+v, want %+v", after, paid)
	}
	if n := s.Count(t, "inventory_movements", "kind = ?", order.Release); n != 0 {
		t.Errorf("RELEASE movements: %d, want 0", n)
	}
}

// TestOtherUsersOrder: another user's order answers 404 not_found, for reading and for
// cancelling, and the cancel attempt changes nothing.
func TestOtherUsersOrder(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	o := s.CreateOrder(t, apptest.AliceKey, "alices", keyboard)
	apptest.Must(t, s.GetOrder(apptest.AliceKey, o.OrderID), http.StatusOK)

	apptest.WantProblem(t, s.GetOrder(apptest.BobKey, o.OrderID), http.StatusNotFound, "not_found")
	before := s.Snapshot(t)
	r := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/cancel", apptest.BobKey, nil, apptest.IdemKey("steal"))
	apptest.WantProblem(t, r, http.StatusNotFound, "not_found")
	if diff := before.Diff(s.Snapshot(t)); !maps.Equal(diff, map[string]int64{"idempotency_records": 1}) {
		t.Errorf("bob's cancel changed %v, want only its stored answer", apptest.Snapshot(diff))
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Errorf("alice's order is %s, want PENDING_PAYMENT", st)
	}
	apptest.WantProblem(t, s.GetOrder(apptest.AliceKey, "12345"), http.StatusNotFound, "not_found")
	apptest.WantProblem(t, s.GetOrder(apptest.AliceKey, "not-an-id"), http.StatusNotFound, "not_found")
}

// withTime returns want with the bookkeeping fields of got, so that two stock rows compare on
// their figures alone.
func withTime(want, got inventory.Item) inventory.Item {
	want.Version, want.UpdatedAt = got.Version, got.UpdatedAt
	return want
}
