package channel_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/channel"
	"github.com/oncepay/oncepay/internal/channelsim"
)

const secret = "test-channel-secret"

// newSim serves a fresh simulator; record, when set, sees every request body first.
func newSim(t *testing.T, record func(*http.Request, []byte)) (*channelsim.Sim, string) {
	t.Helper()
	sim, err := channelsim.New(channelsim.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	h := sim.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if record != nil {
			body, _ := io.ReadAll(r.Body)
			record(r, body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return sim, srv.URL
}

func client(url string) *channel.Client {
	return channel.New(channel.Config{BaseURL: url, Secret: secret, Timeout: 300 * time.Millisecond, Retries: 2, Backoff: 10 * time.Millisecond})
}

func openTrade(t *testing.T, c *channel.Client, no string, amount int64) channel.Trade {
	t.Helper()
	tr, err := c.CreateTrade(context.Background(), channel.TradeRequest{OutTradeNo: no, Amount: amount, Subject: "s", NotifyURL: "http://127.0.0.1:1/notify", ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("create trade: %v", err)
	}
	return tr
}

// TestFinalAnswersMapToSentinels checks the 4xx answers the contract names.
func TestFinalAnswersMapToSentinels(t *testing.T) {
	sim, url := newSim(t, nil)
	c := client(url)
	ctx := context.Background()
	tr := openTrade(t, c, "1001", 500)
	if tr.Status != channel.TradeWaitBuyerPay || tr.TradeNo == "" {
		t.Fatalf("trade %+v", tr)
	}
	if _, err := c.CreateTrade(ctx, channel.TradeRequest{OutTradeNo: "1001", Amount: 501, NotifyURL: "http://127.0.0.1:1/n", ExpiresAt: time.Now().Add(time.Hour)}); !errors.Is(err, channel.ErrTradeMismatch) {
		t.Errorf("another amount: %v, want ErrTradeMismatch", err)
	}
	if _, err := c.QueryTrade(ctx, "nope"); !errors.Is(err, channel.ErrNotFound) {
		t.Errorf("unknown trade: %v, want ErrNotFound", err)
	}
	if err := sim.Pay("1001"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CloseTrade(ctx, "1001"); !errors.Is(err, channel.ErrTradePaid) {
		t.Errorf("close of a paid trade: %v, want ErrTradePaid", err)
	}
	if _, err := c.Refund(ctx, channel.RefundRequest{OutRefundNo: "R1", OutTradeNo: "1001", Amount: 501, NotifyURL: "http://127.0.0.1:1/n"}); !errors.Is(err, channel.ErrRefundExceeds) {
		t.Errorf("refund beyond the trade: %v, want ErrRefundExceeds", err)
	}
	if _, err := channel.New(channel.Config{BaseURL: url, Secret: "wrong"}).QueryTrade(ctx, "1001"); !errors.Is(err, channel.ErrRejected) {
		t.Errorf("wrong signature: %v, want ErrRejected", err)
	}
}

// TestIndefiniteCallsRetryTheSameNumber is I8: a call that timed out after the channel applied
// it, or that got a 503, is retried with the same bytes — the same out_refund_no — and ends
// ErrIndefinite when the retries run out; the channel refunded at most once.
func TestIndefiniteCallsRetryTheSameNumber(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies [][]byte
	)
	sim, url := newSim(t, func(r *http.Request, body []byte) {
		if r.Method == http.MethodPost && r.URL.Path == "/channel/v1/refunds" {
			mu.Lock()
			bodies = append(bodies, body)
			mu.Unlock()
		}
	})
	c := client(url)
	openTrade(t, c, "2002", 900)
	if err := sim.Pay("2002"); err != nil {
		t.Fatal(err)
	}
	req := channel.RefundRequest{OutRefundNo: "R-2002", OutTradeNo: "2002", Amount: 900, NotifyURL: "http://127.0.0.1:1/n"}
	for _, f := range []channelsim.Faults{{TimeoutAfterApply: 1}, {FailBeforeApply: 1}} {
		sim.SetFaults(f)
		if _, err := c.Refund(context.Background(), req); !errors.Is(err, channel.ErrIndefinite) {
			t.Fatalf("faults %+v: %v, want ErrIndefinite", f, err)
		}
	}
	sim.SetFaults(channelsim.Faults{})
	r, err := c.Refund(context.Background(), req)
	if err != nil || r.OutRefundNo != "R-2002" || r.Amount != 900 {
		t.Fatalf("refund after the faults: %+v, %v", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 7 { // 3 attempts per faulty call, then 1
		t.Errorf("%d refund calls, want 7", len(bodies))
	}
	for _, b := range bodies {
		if !bytes.Equal(b, bodies[0]) {
			t.Errorf("a retry sent %s, the first call %s: retries must send the same bytes", b, bodies[0])
		}
	}
	var refunded int64
	for _, rr := range sim.State().Refunds {
		refunded += rr.Amount
	}
	if refunded != 900 {
		t.Errorf("the channel refunded %d, want 900 once", refunded)
	}
}
