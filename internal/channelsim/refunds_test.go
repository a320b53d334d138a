package channelsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/reportsig"
)

func TestRefundsAreIdempotentAndBounded(t *testing.T) {
	rcv := newReceiver(t, nil)
	e := newEnv(t, testConfig())
	e.createTrade("order-1", 1000, rcv.srv.URL+"/pay")
	e.wantProblem(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r0", OutTradeNo: "order-1", Amount: 10}, http.StatusConflict, "trade_not_paid")
	e.wantProblem(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r0", OutTradeNo: "missing", Amount: 10}, http.StatusNotFound, "trade_not_found")
	e.pay("order-1")

	refundURL := rcv.srv.URL + "/refund"
	var first Refund
	e.mustDo(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r1", OutTradeNo: "order-1", Amount: 600, NotifyURL: refundURL}, http.StatusOK, &first)
	if first.Status != RefundProcessing || first.Amount != 600 || first.RefundNo == "" {
		t.Fatalf("refund = %+v", first)
	}
	var again Refund
	e.mustDo(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r1", OutTradeNo: "order-1", Amount: 600, NotifyURL: refundURL}, http.StatusOK, &again)
	if again.RefundNo != first.RefundNo {
		t.Errorf("repeated refund = %+v, want %+v", again, first)
	}
	e.wantProblem(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r1", OutTradeNo: "order-1", Amount: 700}, http.StatusConflict, "refund_mismatch")
	e.wantProblem(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r2", OutTradeNo: "order-1", Amount: 401}, http.StatusConflict, "refund_exceeds")
	e.mustDo(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r3", OutTradeNo: "order-1", Amount: 400}, http.StatusOK, nil)
	e.wantProblem(http.MethodGet, "/channel/v1/refunds/r2", nil, http.StatusNotFound, "refund_not_found")

	waitFor(t, 2*time.Second, "the refund to succeed", func() bool {
		var r Refund
		e.mustDo(http.MethodGet, "/channel/v1/refunds/r1", nil, http.StatusOK, &r)
		return r.Status == RefundSuccess && r.RefundedAt != nil
	})
	waitFor(t, 2*time.Second, "the refund notification", func() bool { return rcv.count() == 2 }) // payment + r1; r3 has no notify_url
	d := rcv.deliveries()[1]
	want, _ := json.Marshal(RefundNotification{Channel: DefaultChannel, RefundNo: first.RefundNo, OutRefundNo: "r1", Amount: 600, Status: RefundSuccess})
	if string(d.Body) != string(want) || reportsig.Verify(testSecret, d.Signature, KindRefund, d.Body, time.Now(), time.Minute) != nil {
		t.Errorf("refund notification %s (signature %s), want %s", d.Body, d.Signature, want)
	}
}

func TestConcurrentRefundsNeverExceedTheTrade(t *testing.T) {
	rcv := newReceiver(t, nil)
	e := newEnv(t, testConfig())
	e.createTrade("order-1", 1000, rcv.srv.URL)
	e.pay("order-1")

	const attempts = 25
	statuses := make([]int, attempts)
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() {
			statuses[i], _ = e.do(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: fmt.Sprintf("r%d", i), OutTradeNo: "order-1", Amount: 100})
		})
	}
	wg.Wait()
	accepted := 0
	for _, s := range statuses {
		switch s {
		case http.StatusOK:
			accepted++
		case http.StatusConflict:
		default:
			t.Errorf("refund answered %d", s)
		}
	}
	var total int64
	for _, r := range e.sim.State().Refunds {
		total += r.Amount
	}
	if accepted != 10 || total != 1000 {
		t.Errorf("%d refunds accepted totalling %d, want 10 totalling the trade's 1000", accepted, total)
	}
}

// clock is a settable clock for tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func TestBillsListWhatSettledThatDay(t *testing.T) {
	rcv := newReceiver(t, nil)
	day1 := time.Date(2026, 3, 1, 23, 59, 0, 0, time.UTC)
	day2 := time.Date(2026, 3, 2, 0, 1, 0, 0, time.UTC)
	clk := &clock{now: day1}
	cfg := testConfig()
	cfg.Now = clk.Now
	e := newEnv(t, cfg)

	e.createTrade("a", 100, rcv.srv.URL)
	e.createTrade("b", 200, rcv.srv.URL)
	e.createTrade("unpaid", 300, rcv.srv.URL)
	e.pay("a")
	clk.Set(day2)
	e.pay("b")
	e.mustDo(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "ra", OutTradeNo: "a", Amount: 40}, http.StatusOK, nil)
	waitFor(t, 2*time.Second, "the refund to succeed", func() bool {
		r, err := e.sim.refund("ra")
		return err == nil && r.Status == RefundSuccess
	})

	var b1, b2 Bill
	e.mustDo(http.MethodGet, "/channel/v1/bills?date=2026-03-01", nil, http.StatusOK, &b1)
	e.mustDo(http.MethodGet, "/channel/v1/bills?date=2026-03-02", nil, http.StatusOK, &b2)
	if len(b1.Trades) != 1 || b1.Trades[0].OutTradeNo != "a" || len(b1.Refunds) != 0 {
		t.Errorf("bill of day 1 = %+v", b1)
	}
	if len(b2.Trades) != 1 || b2.Trades[0].OutTradeNo != "b" || len(b2.Refunds) != 1 || b2.Refunds[0].OutRefundNo != "ra" {
		t.Errorf("bill of day 2 = %+v", b2)
	}
	var empty Bill
	e.mustDo(http.MethodGet, "/channel/v1/bills?date=2026-03-03", nil, http.StatusOK, &empty)
	if empty.Trades == nil || empty.Refunds == nil || len(empty.Trades)+len(empty.Refunds) != 0 {
		t.Errorf("bill of an empty day = %+v, want empty lists", empty)
	}
	e.wantProblem(http.MethodGet, "/channel/v1/bills?date=03/01/2026", nil, http.StatusBadRequest, "invalid_request")
	e.wantProblem(http.MethodGet, "/channel/v1/bills", nil, http.StatusBadRequest, "invalid_request")
}

// TestRefundByTradeNo: a refund may name the trade by the channel's own trade_no instead of
// out_trade_no (as Alipay and WeChat allow); it is the same trade, bounded by the same cap, and
// idempotent by out_refund_no whichever number named it. Naming both, or a trade_no nobody
// issued, is refused.
func TestRefundByTradeNo(t *testing.T) {
	e := newEnv(t, testConfig())
	tr := e.createTrade("order-1", 1000, "http://127.0.0.1:1/v1/payments/notify")
	e.pay("order-1")
	var byNo Refund
	e.mustDo(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r1", TradeNo: tr.TradeNo, Amount: 600}, http.StatusOK, &byNo)
	if byNo.OutTradeNo != "order-1" || byNo.Amount != 600 {
		t.Fatalf("refund by trade_no = %+v, want one of order-1's trade", byNo)
	}
	var again Refund
	e.mustDo(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r1", OutTradeNo: "order-1", Amount: 600}, http.StatusOK, &again)
	if again.RefundNo != byNo.RefundNo {
		t.Errorf("the same out_refund_no by out_trade_no = %+v, want the refund %s again", again, byNo.RefundNo)
	}
	e.wantProblem(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r2", TradeNo: tr.TradeNo, Amount: 401}, http.StatusConflict, "refund_exceeds")
	e.wantProblem(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r3", TradeNo: "T-NOBODY", Amount: 1}, http.StatusNotFound, "trade_not_found")
	e.wantProblem(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "r4", TradeNo: tr.TradeNo, OutTradeNo: "order-1", Amount: 1}, http.StatusBadRequest, "invalid_request")
}

// TestPayRefusesCrossSite: the buyer's pay action refuses a browser request from another
// site (its Origin, or Sec-Fetch-Site), and changes nothing; the cashier page's own origin
// and tools that send no Origin may pay.
func TestPayRefusesCrossSite(t *testing.T) {
	e := newEnv(t, testConfig())
	e.createTrade("order-1", 1000, "http://127.0.0.1:1/v1/payments/notify")
	pay := func(header map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/sim/trades/order-1/pay", nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, h := range []map[string]string{{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}} {
		if got := pay(h); got != http.StatusForbidden {
			t.Errorf("pay with %v = %d, want 403", h, got)
		}
	}
	if st := e.getTrade("order-1").Status; st != TradeWaitBuyerPay {
		t.Fatalf("trade is %s after refused pays, want WAIT_BUYER_PAY", st)
	}
	if got := pay(map[string]string{"Origin": e.srv.URL, "Sec-Fetch-Site": "same-origin"}); got != http.StatusOK {
		t.Errorf("pay from the cashier's own origin = %d, want 200", got)
	}
}
