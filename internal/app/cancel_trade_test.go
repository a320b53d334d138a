package app_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/jobs"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// A cancel makes the order's channel trade unpayable before the order is cancelled: it closes
// the trade at the channel, or applies the payment the buyer already made. Before, a cancelled
// order's trade stayed payable; a buyer who paid it was refunded only if one of the channel's
// notifications arrived (paid_after_close), and when every one was lost — the channel gives up
// after its schedule — nothing but the daily bill found the money (the chaos run found it: a
// CANCELLED order paid at the channel, no anomaly).

// cancelOrder posts a cancel of order id as alice with key.
func cancelOrder(s *apptest.Server, id, key string) apptest.Response {
	return s.Do(http.MethodPost, "/v1/orders/"+id+"/cancel", apptest.AliceKey, nil, apptest.IdemKey(key))
}

// channelTrade returns the simulator's trade of order id.
func channelTrade(t *testing.T, s *apptest.Server, id string) channelsim.TradeRecord {
	t.Helper()
	for _, tr := range s.App.Channel.State().Trades {
		if tr.OutTradeNo == id {
			return tr
		}
	}
	t.Fatalf("the channel has no trade for order %s", id)
	return channelsim.TradeRecord{}
}

func TestCancelClosesTheChannelTrade(t *testing.T) {
	s := channelServer(t)
	before := s.Inventory(t, "SKU-1002")
	o, _ := openTrade(t, s, "ct", "SKU-1002")

	apptest.Must(t, cancelOrder(s, o.OrderID, "ct-cancel"), http.StatusOK)
	if st := channelTrade(t, s, o.OrderID).Status; st != channelsim.TradeClosed {
		t.Fatalf("the cancelled order's trade is %s at the channel, want CLOSED", st)
	}
	if err := s.App.Channel.Pay(o.OrderID); !errors.Is(err, channelsim.ErrTradeClosed) {
		t.Fatalf("the buyer paid the cancelled order's trade: %v, want trade_closed", err)
	}
	// No trade is opened again for it, under any key.
	r := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey("ct-pay-again"))
	apptest.WantProblem(t, r, http.StatusConflict, "illegal_state")
	// The same cancel key replays; the stock came back once.
	again := apptest.Must(t, cancelOrder(s, o.OrderID, "ct-cancel"), http.StatusOK)
	if again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the cancel's retry was not a replay: %s", again)
	}
	if after := s.Inventory(t, "SKU-1002"); after.Available != before.Available || after.Reserved != before.Reserved {
		t.Errorf("stock %+v after the cancel, want %+v", after, before)
	}
	if n := s.Count(t, "anomalies", "order_id = ?", o.OrderID); n != 0 {
		t.Errorf("%d anomalies for the order, want 0", n)
	}
}

// TestCancelAfterTheBuyerPaidAppliesThePayment: the buyer paid, every notification was lost;
// the cancel asks the channel first, applies the payment, and answers 409 illegal_state.
func TestCancelAfterTheBuyerPaidAppliesThePayment(t *testing.T) {
	s := channelServer(t)
	s.App.Channel.SetFaults(channelsim.Faults{DropNotifications: 1})
	o, tv := openTrade(t, s, "cp", "SKU-1002")
	if err := s.App.Channel.Pay(o.OrderID); err != nil {
		t.Fatal(err)
	}
	waitDropped(t, s, o.OrderID)
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Fatalf("order %s is %s although every notification was dropped", o.OrderID, st)
	}

	r := cancelOrder(s, o.OrderID, "cp-cancel")
	apptest.WantProblem(t, r, http.StatusConflict, "illegal_state")
	got := s.Order(t, o.OrderID)
	if got.Status != order.Paid || got.TradeNo == nil || *got.TradeNo != tv.TradeNo {
		t.Fatalf("order is %s (trade %v), want PAID by %s", got.Status, got.TradeNo, tv.TradeNo)
	}
	if n := s.Count(t, "payments", "order_id = ?", o.OrderID); n != 1 {
		t.Errorf("%d payment rows, want 1", n)
	}
	if n := s.Count(t, "anomalies", "order_id = ?", o.OrderID); n != 0 {
		t.Errorf("%d anomalies, want 0: the payment was applied, not refused", n)
	}
	// The cancel's answer is stored: its retry replays the 409.
	apptest.WantProblem(t, cancelOrder(s, o.OrderID, "cp-cancel"), http.StatusConflict, "illegal_state")
}

// TestCancelWhileTheChannelIsDown: a channel that does not answer leaves the order as it was
// (503, nothing stored); the retry with the same key, once it answers, cancels.
func TestCancelWhileTheChannelIsDown(t *testing.T) {
	s := channelServer(t)
	o, _ := openTrade(t, s, "cd", "SKU-1002")
	s.App.Channel.SetFaults(channelsim.Faults{FailBeforeApply: 1})
	r := cancelOrder(s, o.OrderID, "cd-cancel")
	apptest.WantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	if r.Header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After: %s", r)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Fatalf("order is %s after the channel failed, want PENDING_PAYMENT", st)
	}
	if st := channelTrade(t, s, o.OrderID).Status; st != channelsim.TradeWaitBuyerPay {
		t.Fatalf("trade is %s at the channel, want WAIT_BUYER_PAY", st)
	}
	s.App.Channel.SetFaults(channelsim.Faults{})
	apptest.Must(t, cancelOrder(s, o.OrderID, "cd-cancel"), http.StatusOK)
	if st := channelTrade(t, s, o.OrderID).Status; st != channelsim.TradeClosed {
		t.Errorf("trade is %s at the channel, want CLOSED", st)
	}
}

// TestCancelAndOpenTradeNeedTheLease: with Redis unreachable in degrade mode, the writes whose
// work is inside one transaction still run (the dedup record holds), but a cancel and the
// opening of a trade, which call the channel outside any transaction, would do so without the
// key's lease: both answer 503 unavailable, and the channel hears of neither.
func TestCancelAndOpenTradeNeedTheLease(t *testing.T) {
	d := apptest.NewDeps(t)
	d.Redis = &redisx.Conn{Client: testenv.Unreachable(t)}
	s := apptest.StartOn(t, d, func(c *config.Config) {
		c.RedisFailureMode = config.RedisDegrade
		c.CloseJobInterval, c.ReconcileJobInterval, c.RefundJobInterval = time.Hour, time.Hour, time.Hour
	})
	before := s.Inventory(t, "SKU-1002")
	o := s.CreateOrder(t, apptest.AliceKey, "lease-order", apptest.Item{SKU: "SKU-1002", Quantity: 1})

	pay := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey("lease-pay"))
	apptest.WantProblem(t, pay, http.StatusServiceUnavailable, "unavailable")
	apptest.WantProblem(t, cancelOrder(s, o.OrderID, "lease-cancel"), http.StatusServiceUnavailable, "unavailable")
	for _, tr := range s.App.Channel.State().Trades {
		if tr.OutTradeNo == o.OrderID {
			t.Errorf("the channel has trade %s (%s) for the order, want none", tr.TradeNo, tr.Status)
		}
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Errorf("order is %s, want PENDING_PAYMENT", st)
	}
	if after := s.Inventory(t, "SKU-1002"); after.Reserved != before.Reserved+1 || after.Available != before.Available-1 {
		t.Errorf("stock %+v, was %+v: want the order's unit still reserved", after, before)
	}
	for _, key := range []string{"lease-pay", "lease-cancel"} {
		if n := s.Count(t, "idempotency_records", "biz_key = ?", key); n != 0 {
			t.Errorf("%d records under %s, want none: a 503 is never stored", n, key)
		}
	}
}

// TestCancelsRacingPaymentsLoseNoMoney is the chaos run's race in miniature, on one instance:
// for each order, at once, the buyer opens the trade and pays at the channel while two copies
// of a cancel arrive, each retried with its key until final — and every notification of every
// payment is lost. Afterwards, with reconcile-payments and the close job run, every payment
// the channel took is applied to its order (PAID, one payment row), and every CANCELLED order
// has a trade the channel will not take money for.
func TestCancelsRacingPaymentsLoseNoMoney(t *testing.T) {
	s := channelServer(t)
	s.App.Channel.SetFaults(channelsim.Faults{DropNotifications: 1})
	const n = 24
	orders := make([]order.View, n)
	for i := range orders {
		orders[i] = s.CreateOrder(t, apptest.AliceKey, fmt.Sprintf("race-%d-order", i), apptest.Item{SKU: "SKU-1002", Quantity: 1})
	}
	final := func(r apptest.Response) bool {
		return r.Status != http.StatusServiceUnavailable && !(r.Status == http.StatusConflict && r.Code() == "idempotency_key_in_use")
	}
	var wg sync.WaitGroup
	for i, o := range orders {
		wg.Go(func() {
			pay := s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey(fmt.Sprintf("race-%d-pay", i)))
			if pay.Status == http.StatusCreated {
				_ = s.App.Channel.Pay(o.OrderID) // refused when the cancel closed the trade first
			}
		})
		for c := range 2 {
			wg.Go(func() {
				time.Sleep(time.Duration(i%4) * 5 * time.Millisecond)
				for attempt := 0; ; attempt++ {
					r := cancelOrder(s, o.OrderID, fmt.Sprintf("race-%d-cancel", i))
					if final(r) || attempt == 100 {
						if !final(r) {
							t.Errorf("copy %d of order %d's cancel: still %s after 100 tries", c, i, r)
						}
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	adminRun(t, s, "reconcile-payments", nil, nil)

	var paid, cancelled int
	for _, o := range orders {
		got := s.Order(t, o.OrderID)
		var tr *channelsim.TradeRecord
		for _, x := range s.App.Channel.State().Trades {
			if x.OutTradeNo == o.OrderID {
				tr = &x
			}
		}
		payments := s.Count(t, "payments", "order_id = ?", o.OrderID)
		switch got.Status {
		case order.Paid:
			paid++
			if tr == nil || tr.Status != channelsim.TradeSuccess || payments != 1 {
				t.Errorf("order %s is PAID with %d payment rows; channel trade %+v", o.OrderID, payments, tr)
			}
		case order.Cancelled:
			cancelled++
			if tr != nil && tr.Status == channelsim.TradeSuccess {
				t.Errorf("LOST: order %s is CANCELLED but the channel took %d for it (trade %s)", o.OrderID, tr.Amount, tr.TradeNo)
			}
			if payments != 0 {
				t.Errorf("order %s is CANCELLED with %d payment rows", o.OrderID, payments)
			}
		default:
			t.Errorf("order %s is %s, want PAID or CANCELLED", o.OrderID, got.Status)
		}
	}
	if n := s.Count(t, "anomalies", "kind = ?", "paid_after_close"); n != 0 {
		t.Errorf("%d paid_after_close anomalies, want 0: no cancelled order could be paid", n)
	}
	t.Logf("%d orders: %d paid (the payment applied by the cancel or reconcile-payments), %d cancelled", n, paid, cancelled)
}

// TestBillAppliesPaymentsWhoseNotificationsWereLost: the last net. Two paid trades whose every
// notification was lost and that no query looked at: one of an order still waiting, one that
// oncepay never knew of (opened at the channel behind its back) for an order cancelled before.
// reconcile-bills reports both as reconcile_missing_payment and applies them through the
// notification's path: the first order is PAID, the second payment is kept as
// paid_after_close and refunded once. The next run finds the books equal.
func TestBillAppliesPaymentsWhoseNotificationsWereLost(t *testing.T) {
	s := channelServer(t)
	s.App.Channel.SetFaults(channelsim.Faults{DropNotifications: 1})
	waiting, _ := openTrade(t, s, "bill-a", "SKU-1002")
	cancelled := s.CreateOrder(t, apptest.AliceKey, "bill-b-order", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	apptest.Must(t, cancelOrder(s, cancelled.OrderID, "bill-b-cancel"), http.StatusOK)
	behind := channel.New(channel.Config{BaseURL: s.App.ChannelURL, Secret: s.Config.ChannelSecret})
	if _, err := behind.CreateTrade(t.Context(), channel.TradeRequest{OutTradeNo: cancelled.OrderID, Amount: cancelled.Amount, Subject: "opened elsewhere",
		NotifyURL: s.Config.PublicURL + notify.Routes[notify.Trade], ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{waiting.OrderID, cancelled.OrderID} {
		if err := s.App.Channel.Pay(id); err != nil {
			t.Fatal(err)
		}
	}
	waitDropped(t, s, waiting.OrderID, cancelled.OrderID)

	today := map[string]string{"date": time.Now().UTC().Format(time.DateOnly)}
	var rep jobs.BillReport
	adminRun(t, s, "reconcile-bills", today, &rep)
	settled := map[string]string{}
	for _, m := range rep.Mismatches {
		if m.Kind != "reconcile_missing_payment" {
			t.Errorf("mismatch %+v, want only reconcile_missing_payment", m)
		}
		settled[m.OrderID] = m.Settled
	}
	if settled[waiting.OrderID] != "applied" || settled[cancelled.OrderID] != "recorded" || len(rep.Mismatches) != 2 {
		t.Fatalf("mismatches %+v, want the waiting order's payment applied and the cancelled one's recorded", rep.Mismatches)
	}
	if o := s.Order(t, waiting.OrderID); o.Status != order.Paid {
		t.Errorf("the waiting order is %s after reconcile-bills, want PAID", o.Status)
	}
	if n := s.Count(t, "payments", "order_id = ?", waiting.OrderID); n != 1 {
		t.Errorf("%d payment rows for the waiting order, want 1", n)
	}
	if o := s.Order(t, cancelled.OrderID); o.Status != order.Cancelled {
		t.Errorf("the cancelled order is %s, want CANCELLED untouched", o.Status)
	}
	if n := s.Count(t, "anomalies", "kind = ? AND order_id = ?", "paid_after_close", cancelled.OrderID); n != 1 {
		t.Fatalf("%d paid_after_close anomalies for the cancelled order, want 1", n)
	}
	resumeUntilSettled(t, s)
	apptest.Eventually(t, 20*time.Second, "the cancelled order's payment refunded", func() (bool, string) {
		adminRun(t, s, "resume-refunds", nil, nil)
		sum, n := refundedAtChannel(s, cancelled.OrderID)
		return sum == cancelled.Amount && n == 1, fmt.Sprintf("%d in %d refunds", sum, n)
	})

	var again jobs.BillReport
	adminRun(t, s, "reconcile-bills", today, &again)
	if len(again.Mismatches) != 0 || again.Matched != 3 {
		t.Errorf("second reconcile-bills: matched %d, mismatches %+v; want 3 matched (2 payments, 1 refund), none", again.Matched, again.Mismatches)
	}
}

// TestCancelWhileItsPaymentIsBeingApplied: the buyer paid, and a copy of the notification is
// being applied (slowly, apptest.SlowTrades) when the cancel asks the channel. The
// cancel cannot apply the payment itself (the payment's key is in use): 503 unavailable, not
// the payment key's 409, and nothing stored; once the payment is applied, the same cancel key
// answers 409 illegal_state.
func TestCancelWhileItsPaymentIsBeingApplied(t *testing.T) {
	s := apptest.StartOn(t, apptest.SlowTrades(apptest.NewDeps(t), 1500*time.Millisecond), channelJobs)
	s.App.Channel.SetFaults(channelsim.Faults{DropNotifications: 1})
	o, tv := openTrade(t, s, "cs", "SKU-1002")
	if err := s.App.Channel.Pay(o.OrderID); err != nil {
		t.Fatal(err)
	}
	body := apptest.JSON(apptest.Notification(o, "simpay", tv.TradeNo))
	notified := make(chan apptest.Response, 1)
	go func() { notified <- s.SignedNotify(body) }()
	time.Sleep(300 * time.Millisecond) // the copy holds the payment's key, inside its delay

	r := cancelOrder(s, o.OrderID, "cs-cancel")
	apptest.WantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Fatalf("order is %s while its payment was being applied, want PENDING_PAYMENT", st)
	}
	if n := <-notified; n.Status != http.StatusOK {
		t.Fatalf("the notification: %s", n)
	}
	apptest.WantProblem(t, cancelOrder(s, o.OrderID, "cs-cancel"), http.StatusConflict, "illegal_state")
	if st := s.Order(t, o.OrderID).Status; st != order.Paid {
		t.Errorf("order is %s, want PAID", st)
	}
}

// TestAnOpeningTradeHoldsTheCancelAndTheClose: a trades row committed OPENING moments ago
// stands for a call to the channel still under way — the channel does not know the trade
// yet, but may in a moment. A cancel answers 503 (retry) and the close job leaves the expired
// order open; once the longest call is over (channel.Client.CallBound), a trade that never
// reached the channel holds neither back, and its row is marked CLOSED.
func TestAnOpeningTradeHoldsTheCancelAndTheClose(t *testing.T) {
	s := channelServer(t, func(c *config.Config) { c.OrderTTL = time.Second })
	a := s.CreateOrder(t, apptest.AliceKey, "op-a-order", apptest.Item{SKU: "SKU-1002", Quantity: 1}) // cancelled
	b := s.CreateOrder(t, apptest.AliceKey, "op-b-order", apptest.Item{SKU: "SKU-1002", Quantity: 1}) // left to expire
	for _, o := range []order.View{a, b} {
		now := time.Now().UTC()
		row := payment.Trade{OrderID: s.Order(t, o.OrderID).ID, Channel: "simpay", OutTradeNo: o.OrderID, Amount: o.Amount,
			Status: payment.TradeOpening, CreatedAt: now, UpdatedAt: now}
		if err := s.DB.Create(&row).Error; err != nil {
			t.Fatal(err)
		}
	}
	r := cancelOrder(s, a.OrderID, "op-a-cancel")
	apptest.WantProblem(t, r, http.StatusServiceUnavailable, "unavailable")
	if !strings.Contains(r.Problem().Detail, "being opened") {
		t.Errorf("503 detail %q, want the trade being opened", r.Problem().Detail)
	}
	time.Sleep(time.Until(s.Order(t, b.OrderID).ExpiresAt) + 100*time.Millisecond)
	if n := s.RunCloseJob(t); n != 0 {
		t.Fatalf("the close job closed %d orders while their trades were being opened, want 0", n)
	}

	// The calls are long over: nothing holds the cancel or the close back any more.
	if err := s.DB.Model(&payment.Trade{}).Where("1 = 1").Update("updated_at", time.Now().UTC().Add(-time.Hour)).Error; err != nil {
		t.Fatal(err)
	}
	apptest.Must(t, cancelOrder(s, a.OrderID, "op-a-cancel"), http.StatusOK)
	if n := s.RunCloseJob(t); n != 1 {
		t.Errorf("the close job closed %d orders, want 1", n)
	}
	for o, want := range map[string]order.Status{a.OrderID: order.Cancelled, b.OrderID: order.Closed} {
		if st := s.Order(t, o).Status; st != want {
			t.Errorf("order %s is %s, want %s", o, st, want)
		}
	}
	var statuses []string
	s.DB.Model(&payment.Trade{}).Pluck("status", &statuses)
	if len(statuses) != 2 || statuses[0] != payment.TradeClosed || statuses[1] != payment.TradeClosed {
		t.Errorf("trade rows %v, want both CLOSED", statuses)
	}
}
