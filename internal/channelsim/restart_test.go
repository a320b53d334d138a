package channelsim

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

func TestStateSurvivesARestart(t *testing.T) {
	rcv := newReceiver(t, failing(1000))
	cfg := testConfig()
	cfg.StateFile = filepath.Join(t.TempDir(), "sim", "channelsim.json")
	cfg.Schedule = []time.Duration{300 * time.Millisecond, 300 * time.Millisecond}
	cfg.RefundDelay = 200 * time.Millisecond

	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Close() }) // in case the test stops early; closing twice is harmless
	e1 := &testEnv{t: t, sim: first}
	if err := first.Pay("missing"); err == nil {
		t.Error("paying an unknown trade succeeded")
	}
	tr := openAndPay(t, first, "order-1", 500, rcv.srv.URL)
	if _, err := first.openTrade(TradeRequest{OutTradeNo: "open", Amount: 7, NotifyURL: rcv.srv.URL}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.openRefund(RefundRequest{OutRefundNo: "r1", OutTradeNo: "order-1", Amount: 100}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the first, refused attempt", func() bool {
		ns := e1.notifications("order-1")
		return len(ns) == 1 && len(ns[0].Attempts) == 1
	})
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	rcv.setAnswer(nil) // the merchant is back

	e2 := newEnv(t, cfg)
	state := e2.sim.State()
	if len(state.Trades) != 2 || len(state.Refunds) != 1 || len(state.Notifications) != 1 {
		t.Fatalf("state after restart = %+v", state)
	}
	if got := e2.getTrade("order-1"); got.TradeNo != tr.TradeNo || got.Status != TradeSuccess {
		t.Errorf("trade after restart = %+v, want %+v", got, tr)
	}
	waitFor(t, 3*time.Second, "the pending notification to resume", func() bool {
		ns := e2.notifications("order-1")
		return len(ns) == 1 && ns[0].Status == NotificationDelivered
	})
	n := e2.notifications("order-1")[0]
	if n.Rounds != 2 || len(n.Attempts) != 2 {
		t.Errorf("resumed notification = %+v, want two rounds", n)
	}
	for _, d := range rcv.deliveries() {
		checkTradeNotification(t, d, tr)
	}
	waitFor(t, 2*time.Second, "the refund to settle after the restart", func() bool {
		r, err := e2.sim.refund("r1")
		return err == nil && r.Status == RefundSuccess
	})
	e2.wantProblem(http.MethodPost, "/channel/v1/trades", TradeRequest{OutTradeNo: "open", Amount: 8, NotifyURL: rcv.srv.URL}, http.StatusConflict, "trade_mismatch")
}

// openAndPay opens and pays a trade through the Go API.
func openAndPay(t *testing.T, s *Sim, outTradeNo string, amount int64, notifyURL string) Trade {
	t.Helper()
	if _, err := s.openTrade(TradeRequest{OutTradeNo: outTradeNo, Amount: amount, NotifyURL: notifyURL}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pay(outTradeNo); err != nil {
		t.Fatal(err)
	}
	tr, err := s.tradeRecord(outTradeNo)
	if err != nil {
		t.Fatal(err)
	}
	return tr.Trade
}
