package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/channelsim"
	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// These tests hold I12 (a side effect before the key): on the routes whose work calls the
// channel outside their transaction — cancel and open-trade — a refused request (400, 409,
// 422) has no effect anywhere, at the channel neither, and a replay answers from the stored
// outcome without calling the channel.

// tradeAtChannel is the simulator's trade of order id; ok is false when it has none.
func tradeAtChannel(s *apptest.Server, id string) (channelsim.TradeRecord, bool) {
	for _, tr := range s.App.Channel.State().Trades {
		if tr.OutTradeNo == id {
			return tr, true
		}
	}
	return channelsim.TradeRecord{}, false
}

// openTradeOf opens order o's trade under key and returns it.
func openTradeOf(t *testing.T, s *apptest.Server, o order.View, key string) payment.TradeView {
	t.Helper()
	r := apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey(key)), http.StatusCreated)
	var tv payment.TradeView
	r.Decode(t, &tv)
	return tv
}

// TestRefusedCancelTouchesNothing: a cancel refused because its key names another request
// (422), is a token never issued (400) or is held by a copy in flight (409) leaves the
// order's trade payable at the channel and the order PENDING_PAYMENT; the buyer then pays
// and the order ends PAID. Before, each of these refusals had already closed the trade.
func TestRefusedCancelTouchesNothing(t *testing.T) {
	s := channelServer(t)
	o := s.CreateOrder(t, apptest.AliceKey, "refused-cancel", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	openTradeOf(t, s, o, "refused-cancel-pay")
	other := s.CreateOrder(t, apptest.AliceKey, "refused-cancel-other", apptest.Item{SKU: "SKU-1002", Quantity: 1})

	// 422: the key already cancelled another order.
	apptest.Must(t, cancelOrder(s, other.OrderID, "K-cancel"), http.StatusOK)
	apptest.WantProblem(t, cancelOrder(s, o.OrderID, "K-cancel"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	// 400: a token nobody issued.
	apptest.WantProblem(t, cancelOrder(s, o.OrderID, "tok_forged"), http.StatusBadRequest, "idempotency_token_invalid")
	if tr, _ := tradeAtChannel(s, o.OrderID); tr.Status != channelsim.TradeWaitBuyerPay {
		t.Fatalf("after a 422 and a 400 cancel the channel's trade is %s, want WAIT_BUYER_PAY: a refused cancel closed it", tr.Status)
	}
	// 409: a copy in flight — the first cancel of a third order hangs at the channel.
	third := s.CreateOrder(t, apptest.AliceKey, "refused-cancel-third", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	openTradeOf(t, s, third, "refused-cancel-third-pay")
	s.App.Channel.SetFaults(channelsim.Faults{TimeoutAfterApply: 1})
	var (
		wg    sync.WaitGroup
		first apptest.Response
	)
	wg.Go(func() { first = cancelOrder(s, third.OrderID, "K-flight") })
	userID := alice(t, s)
	apptest.Eventually(t, 10*time.Second, "the first cancel in flight", func() (bool, string) {
		r := s.Do(http.MethodGet, "/v1/admin/idempotency-records?user_id="+userID+"&key=K-flight", apptest.AdminKey, nil, nil)
		return r.Status == http.StatusOK, r.String()
	})
	// The operator sees the key in progress, with its lease, although no record exists yet.
	var inFlight idem.RecordView
	apptest.Must(t, s.Do(http.MethodGet, "/v1/admin/idempotency-records?user_id="+userID+"&key=K-flight", apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &inFlight)
	if inFlight.Outcome != idem.OutcomeInProgress || inFlight.Status != "PROCESSING" || inFlight.LeaseRemainingMS <= 0 || inFlight.CreatedAt != nil {
		t.Errorf("the key in flight looks up as %+v; want in_progress, PROCESSING, a lease and no record timestamps", inFlight)
	}
	apptest.WantProblem(t, cancelOrder(s, o.OrderID, "K-flight"), http.StatusConflict, "idempotency_key_in_use")
	wg.Wait()
	s.App.Channel.SetFaults(channelsim.Faults{})
	if first.Status != http.StatusServiceUnavailable {
		t.Errorf("the hanging cancel: %s, want 503 (the channel did not answer)", first)
	}

	tr, ok := tradeAtChannel(s, o.OrderID)
	if !ok || tr.Status != channelsim.TradeWaitBuyerPay {
		t.Fatalf("after the refused cancels the channel's trade is %+v (found %v); want WAIT_BUYER_PAY", tr, ok)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Fatalf("after the refused cancels the order is %s, want PENDING_PAYMENT", st)
	}
	if err := s.App.Channel.Pay(o.OrderID); err != nil {
		t.Fatalf("the buyer pays: %v", err)
	}
	waitStatus(t, s, o.OrderID, order.Paid)
}

// TestRefusedOpenTradeTouchesNothing: opening a trade under a key that named another request
// (422) or a forged token (400) commits no trades row and opens nothing at the channel; a
// replay of a finished open answers its stored 201 without calling the channel, even while
// the channel refuses every call.
func TestRefusedOpenTradeTouchesNothing(t *testing.T) {
	s := channelServer(t)
	o := s.CreateOrder(t, apptest.AliceKey, "refused-open", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	other := s.CreateOrder(t, apptest.AliceKey, "refused-open-other", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	first := openTradeOf(t, s, other, "K-open")

	pay := func(key string) apptest.Response {
		return s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey(key))
	}
	apptest.WantProblem(t, pay("K-open"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	apptest.WantProblem(t, pay("tok_forged"), http.StatusBadRequest, "idempotency_token_invalid")
	if n := s.Count(t, "trades", "order_id = ?", o.OrderID); n != 0 {
		t.Errorf("the refused opens left %d trades rows, want none", n)
	}
	if tr, ok := tradeAtChannel(s, o.OrderID); ok {
		t.Errorf("the refused opens opened %+v at the channel", tr)
	}

	// The replay of the finished open, with the replay cache gone and the channel refusing
	// every write: answered from the dedup record, byte for byte, no call.
	if err := s.Deps.Redis.Client.FlushDB(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	s.App.Channel.SetFaults(channelsim.Faults{FailBeforeApply: 1})
	defer s.App.Channel.SetFaults(channelsim.Faults{})
	r := s.Do(http.MethodPost, "/v1/orders/"+other.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey("K-open"))
	var again payment.TradeView
	apptest.Must(t, r, http.StatusCreated).Decode(t, &again)
	if r.Outcome() != "replayed" || again != first {
		t.Errorf("the replay: %s (%+v); want the first 201 replayed, %+v", r, again, first)
	}
}

// alice is the demo user alice's id, as the admin routes select it.
func alice(t *testing.T, s *apptest.Server) string {
	t.Helper()
	var id int64
	if err := s.DB.Table("users").Select("id").Where("name = ?", "alice").Scan(&id).Error; err != nil || id == 0 {
		t.Fatalf("alice's id: %d, %v", id, err)
	}
	return strconv.FormatInt(id, 10)
}

// TestAnomaliesArePaged: the anomalies list pages newest first by an opaque cursor, every
// anomaly once, with its resolution; a parameter it does not know, a second copy of one, or a
// value out of range is 400, never a silent default.
func TestAnomaliesArePaged(t *testing.T) {
	s := channelServer(t)
	const n = 5
	for i := range n {
		o := s.CreateOrder(t, apptest.AliceKey, fmt.Sprintf("paged-%d", i), apptest.Item{SKU: "SKU-1002", Quantity: 1})
		apptest.Must(t, cancelOrder(s, o.OrderID, fmt.Sprintf("paged-cancel-%d", i)), http.StatusOK)
		apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(o, "alipay", fmt.Sprintf("PAGED-%d", i)))), http.StatusOK)
	}
	type page struct {
		Anomalies []struct {
			ID         string `json:"id"`
			Kind       string `json:"kind"`
			Resolution string `json:"resolution"`
		} `json:"anomalies"`
		NextCursor *string `json:"next_cursor"`
	}
	var (
		seen  []string
		pages int
		path  = "/v1/admin/anomalies?limit=2"
	)
	for {
		var p page
		apptest.Must(t, s.Do(http.MethodGet, path, apptest.AdminKey, nil, nil), http.StatusOK).Decode(t, &p)
		pages++
		for _, a := range p.Anomalies {
			if a.Kind != "paid_after_close" || a.Resolution != "refund_pending" {
				t.Errorf("anomaly %+v: want paid_after_close, refund_pending (no refund opened yet)", a)
			}
			seen = append(seen, a.ID)
		}
		if p.NextCursor == nil {
			break
		}
		path = "/v1/admin/anomalies?limit=2&cursor=" + *p.NextCursor
	}
	if len(seen) != n || pages != 3 {
		t.Fatalf("paged %d anomalies in %d pages, want %d in 3", len(seen), pages, n)
	}
	for i := 1; i < len(seen); i++ {
		a, _ := strconv.ParseInt(seen[i-1], 10, 64)
		b, _ := strconv.ParseInt(seen[i], 10, 64)
		if a <= b {
			t.Errorf("anomalies not newest first, each once: %v", seen)
		}
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=abc", "cursor=not-a-cursor", "kind=paid_after_close", "limit=1&limit=2"} {
		apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/admin/anomalies?"+q, apptest.AdminKey, nil, nil), http.StatusBadRequest, "invalid_request")
	}
	var all page
	body := apptest.Must(t, s.Do(http.MethodGet, "/v1/admin/anomalies", apptest.AdminKey, nil, nil), http.StatusOK).Body
	if err := json.Unmarshal(body, &all); err != nil || len(all.Anomalies) != n || all.NextCursor != nil {
		t.Errorf("the default page: %s, want all %d and next_cursor null", body, n)
	}
}
