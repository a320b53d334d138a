package channelsim

import (
	"net/http"
	"testing"
	"time"
)

func TestFailBeforeApplyLeavesNothing(t *testing.T) {
	rcv := newReceiver(t, nil)
	e := newEnv(t, testConfig())
	e.createTrade("paid", 100, rcv.srv.URL)
	e.pay("paid")
	e.setFaults(Faults{FailBeforeApply: 1})

	e.wantProblem(http.MethodPost, "/channel/v1/trades", TradeRequest{OutTradeNo: "order-1", Amount: 100, NotifyURL: rcv.srv.URL}, http.StatusServiceUnavailable, "unavailable")
	e.wantProblem(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "refund-1", OutTradeNo: "paid", Amount: 10}, http.StatusServiceUnavailable, "unavailable")
	e.wantProblem(http.MethodPost, "/channel/v1/trades/paid/close", nil, http.StatusServiceUnavailable, "unavailable")
	e.mustDo(http.MethodGet, "/channel/v1/trades/paid", nil, http.StatusOK, nil) // queries are not faulted
	e.setFaults(map[string]any{})

	e.wantProblem(http.MethodGet, "/channel/v1/trades/order-1", nil, http.StatusNotFound, "trade_not_found")
	e.wantProblem(http.MethodGet, "/channel/v1/refunds/refund-1", nil, http.StatusNotFound, "refund_not_found")
}

func TestTimeoutAfterApplyApplies(t *testing.T) {
	rcv := newReceiver(t, nil)
	e := newEnv(t, testConfig())
	e.createTrade("paid", 100, rcv.srv.URL)
	e.pay("paid")
	e.setFaults(Faults{TimeoutAfterApply: 1})

	impatient := &http.Client{Timeout: 200 * time.Millisecond}
	calls := []struct {
		path string
		body any
	}{
		{"/channel/v1/trades", TradeRequest{OutTradeNo: "order-1", Amount: 100, NotifyURL: rcv.srv.URL}},
		{"/channel/v1/refunds", RefundRequest{OutRefundNo: "refund-1", OutTradeNo: "paid", Amount: 10}},
	}
	for _, c := range calls {
		start := time.Now()
		res, err := e.send(impatient, http.MethodPost, c.path, c.body, testSecret)
		if err == nil {
			res.Body.Close()
			t.Fatalf("POST %s answered %d before the client gave up", c.path, res.StatusCode)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("POST %s took %s", c.path, took)
		}
	}
	e.setFaults(Faults{})

	if tr := e.getTrade("order-1"); tr.Status != TradeWaitBuyerPay {
		t.Errorf("trade after a timed-out creation = %+v", tr)
	}
	var r Refund
	e.mustDo(http.MethodGet, "/channel/v1/refunds/refund-1", nil, http.StatusOK, &r)
	if r.Amount != 10 || r.OutTradeNo != "paid" {
		t.Errorf("refund after a timed-out call = %+v", r)
	}
	// The retry with the same out_refund_no finds the refund instead of refunding twice (I8).
	var again Refund
	e.mustDo(http.MethodPost, "/channel/v1/refunds", RefundRequest{OutRefundNo: "refund-1", OutTradeNo: "paid", Amount: 10}, http.StatusOK, &again)
	if again.RefundNo != r.RefundNo || len(e.sim.State().Refunds) != 1 {
		t.Errorf("retried refund = %+v, want %+v and one refund", again, r)
	}
}
