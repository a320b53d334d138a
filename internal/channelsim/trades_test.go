package channelsim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/reportsig"
)

func TestCreateTradeIsIdempotent(t *testing.T) {
	e := newEnv(t, testConfig())
	first := e.createTrade("order-1", 4990, "http://127.0.0.1:1/notify")
	if first.Status != TradeWaitBuyerPay || first.Amount != 4990 || first.OutTradeNo != "order-1" || first.TradeNo == "" {
		t.Fatalf("trade = %+v", first)
	}
	if want := "http://sim.test/sim/cashier/order-1"; first.PayURL != want {
		t.Errorf("pay_url = %q, want %q", first.PayURL, want)
	}
	if again := e.createTrade("order-1", 4990, "http://127.0.0.1:1/notify"); again != first {
		t.Errorf("second creation = %+v, want %+v", again, first)
	}
	e.wantProblem(http.MethodPost, "/channel/v1/trades", TradeRequest{
		OutTradeNo: "order-1", Amount: 5000, NotifyURL: "http://127.0.0.1:1/notify",
	}, http.StatusConflict, "trade_mismatch")
	if n := len(e.sim.State().Trades); n != 1 {
		t.Errorf("%d trades, want 1", n)
	}
}

func TestCreateTradeAnswersTheContractFields(t *testing.T) {
	e := newEnv(t, testConfig())
	_, b := e.do(http.MethodPost, "/channel/v1/trades", TradeRequest{OutTradeNo: "o", Amount: 1, NotifyURL: "http://127.0.0.1:1/n"})
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"trade_no", "out_trade_no", "status", "amount", "pay_url", "paid_at"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("answer %s lacks %q", b, f)
		}
	}
}

func TestCreateTradeRefusesInvalidRequests(t *testing.T) {
	e := newEnv(t, testConfig())
	for name, body := range map[string]any{
		"no out_trade_no": map[string]any{"amount": 1, "notify_url": "http://x/n"},
		"zero amount":     map[string]any{"out_trade_no": "o", "amount": 0, "notify_url": "http://x/n"},
		"relative url":    map[string]any{"out_trade_no": "o", "amount": 1, "notify_url": "/n"},
		"unknown field":   map[string]any{"out_trade_no": "o", "amount": 1, "notify_url": "http://x/n", "currency": "CNY"},
		"string amount":   map[string]any{"out_trade_no": "o", "amount": "1", "notify_url": "http://x/n"},
		"slash in number": map[string]any{"out_trade_no": "a/b", "amount": 1, "notify_url": "http://x/n"},
	} {
		t.Run(name, func(t *testing.T) {
			e.wantProblem(http.MethodPost, "/channel/v1/trades", body, http.StatusBadRequest, "invalid_request")
		})
	}
	if n := len(e.sim.State().Trades); n != 0 {
		t.Errorf("%d trades, want 0", n)
	}
}

func TestQueryAndCloseTrade(t *testing.T) {
	e := newEnv(t, testConfig())
	e.wantProblem(http.MethodGet, "/channel/v1/trades/missing", nil, http.StatusNotFound, "trade_not_found")
	e.wantProblem(http.MethodPost, "/channel/v1/trades/missing/close", nil, http.StatusNotFound, "trade_not_found")

	e.createTrade("order-1", 100, "http://127.0.0.1:1/notify")
	if got := e.getTrade("order-1"); got.Status != TradeWaitBuyerPay || got.PaidAt != nil {
		t.Fatalf("trade = %+v", got)
	}
	for range 2 { // closing is idempotent
		var closed Trade
		e.mustDo(http.MethodPost, "/channel/v1/trades/order-1/close", nil, http.StatusOK, &closed)
		if closed.Status != TradeClosed {
			t.Fatalf("closed trade = %+v", closed)
		}
	}
	if got := e.getTrade("order-1"); got.Status != TradeClosed {
		t.Errorf("trade after close = %+v", got)
	}
	e.wantProblem(http.MethodPost, "/sim/trades/order-1/pay", nil, http.StatusConflict, "trade_closed")
}

func TestClosingAPaidTradeIsRefused(t *testing.T) {
	rcv := newReceiver(t, nil)
	e := newEnv(t, testConfig())
	e.createTrade("order-2", 100, rcv.srv.URL)
	e.pay("order-2")
	e.wantProblem(http.MethodPost, "/channel/v1/trades/order-2/close", nil, http.StatusConflict, "trade_paid")
	got := e.getTrade("order-2")
	if got.Status != TradeSuccess || got.PaidAt == nil {
		t.Errorf("paid trade = %+v", got)
	}
}

func TestBadSignatureIsRefused(t *testing.T) {
	e := newEnv(t, testConfig())
	body := TradeRequest{OutTradeNo: "order-1", Amount: 100, NotifyURL: "http://127.0.0.1:1/n"}
	for name, secret := range map[string]string{"unsigned": "", "wrong secret": "another-secret"} {
		t.Run(name, func(t *testing.T) {
			status, b := e.doWith(http.DefaultClient, http.MethodPost, "/channel/v1/trades", body, secret)
			checkProblem(t, status, b, http.StatusUnauthorized, "invalid_signature")
			status, b = e.doWith(http.DefaultClient, http.MethodGet, "/channel/v1/trades/order-1", nil, secret)
			checkProblem(t, status, b, http.StatusUnauthorized, "invalid_signature")
		})
	}
	if n := len(e.sim.State().Trades); n != 0 {
		t.Errorf("%d trades after refused calls, want 0", n)
	}
}

func TestCashierPage(t *testing.T) {
	e := newEnv(t, testConfig())
	e.mustDo(http.MethodPost, "/channel/v1/trades", TradeRequest{
		OutTradeNo: "order-1", Amount: 1234, Subject: "<b>Phone</b>", NotifyURL: "http://127.0.0.1:1/n",
	}, http.StatusOK, nil)
	res, err := http.Get(e.srv.URL + "/sim/cashier/order-1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	page, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type = %q", ct)
	}
	for _, want := range []string{"¥12.34", "&lt;b&gt;Phone&lt;/b&gt;", `"../trades/"`, `"/pay"`, "disabled = true"} {
		if !strings.Contains(html, want) {
			t.Errorf("cashier page lacks %q", want)
		}
	}
	for _, external := range []string{"src=", "href=", "http://", "https://"} {
		if strings.Contains(html, external) {
			t.Errorf("cashier page refers to an external asset (%q)", external)
		}
	}

	var view simTrade
	e.mustDo(http.MethodGet, "/sim/trades/order-1", nil, http.StatusOK, &view)
	if view.Trade.OutTradeNo != "order-1" || view.Trade.Subject != "<b>Phone</b>" {
		t.Errorf("sim trade = %+v", view)
	}
	e.wantProblem(http.MethodGet, "/sim/cashier/missing", nil, http.StatusNotFound, "trade_not_found")
}

func TestParseSchedule(t *testing.T) {
	got, err := ParseSchedule("4m, 10m,1h")
	if err != nil || len(got) != 3 || got[0].Minutes() != 4 || got[2].Hours() != 1 {
		t.Errorf("ParseSchedule = %v, %v", got, err)
	}
	if got, err := ParseSchedule(" "); got != nil || err != nil {
		t.Errorf("ParseSchedule(blank) = %v, %v; want nil, nil", got, err)
	}
	for _, bad := range []string{"4m,,1h", "soon", "0s", "-1m"} {
		if _, err := ParseSchedule(bad); err == nil {
			t.Errorf("ParseSchedule(%q) succeeded", bad)
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no secret":     {},
		"bad channel":   {Secret: "s", Channel: "SimPay"},
		"zero schedule": {Secret: "s", Schedule: []time.Duration{0}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// A recharge at the channel is a paid trade on the bill whose notification is signed as a
// recharge report, so that oncepay's reconciliation finds the recharges it credits.
func TestRechargeIsPaidBilledAndReportedAsARecharge(t *testing.T) {
	e := newEnv(t, testConfig())
	rcv := newReceiver(t, nil)
	status, body := e.do(http.MethodPost, "/sim/recharges", map[string]any{"out_trade_no": "rc-1", "amount": 700, "notify_url": rcv.srv.URL})
	if status != http.StatusOK {
		t.Fatalf("POST /sim/recharges = %d %s", status, body)
	}
	var tr Trade
	if err := json.Unmarshal(body, &tr); err != nil || tr.Status != TradeSuccess || tr.TradeNo == "" {
		t.Fatalf("recharge answered %s (%v), want a paid trade", body, err)
	}
	again, err := e.sim.Recharge("rc-1", 700, rcv.srv.URL)
	if err != nil || again.TradeNo != tr.TradeNo {
		t.Errorf("recharging rc-1 again = %+v, %v; want trade %s", again, err, tr.TradeNo)
	}
	if _, err := e.sim.Recharge("rc-1", 701, rcv.srv.URL); !errors.Is(err, ErrTradeMismatch) {
		t.Errorf("recharging rc-1 with another amount: err = %v, want ErrTradeMismatch", err)
	}
	if _, err := e.sim.openTrade(TradeRequest{OutTradeNo: "rc-1", Amount: 700, NotifyURL: rcv.srv.URL}); !errors.Is(err, ErrTradeMismatch) {
		t.Errorf("opening a merchant's trade under a recharge's number: err = %v, want ErrTradeMismatch", err)
	}
	bill := e.sim.bill(time.Now().UTC().Truncate(24 * time.Hour))
	if len(bill.Trades) != 1 || bill.Trades[0].TradeNo != tr.TradeNo {
		t.Errorf("bill trades = %+v, want the recharge %s", bill.Trades, tr.TradeNo)
	}
	waitFor(t, 5*time.Second, "the recharge's notification", func() bool { return rcv.count() > 0 })
	got := rcv.deliveries()
	if len(got) != 1 {
		t.Fatalf("the receiver got %d notifications, want 1", len(got))
	}
	if err := reportsig.Verify(testSecret, got[0].Signature, KindRecharge, got[0].Body, time.Now(), time.Minute); err != nil {
		t.Errorf("signature %q does not sign %s as a recharge report: %v", got[0].Signature, got[0].Body, err)
	}
}
