package apptest

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Item is one line of an order request, as the API spells it.
type Item struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// OrderBody is the body of POST /v1/orders for items.
func OrderBody(items ...Item) map[string]any { return map[string]any{"items": items} }

// IdemKey is the header map of an Idempotency-Key.
func IdemKey(key string) map[string]string { return map[string]string{httpkey.HeaderKey: key} }

// PostOrder sends POST /v1/orders for apiKey with Idempotency-Key idemKey.
func (s *Server) PostOrder(apiKey, idemKey string, items ...Item) Response {
	return s.Do(http.MethodPost, "/v1/orders", apiKey, OrderBody(items...), IdemKey(idemKey))
}

// CreateOrder creates an order for apiKey under idemKey and returns it, failing the test
// unless the answer is 201.
func (s *Server) CreateOrder(tb testing.TB, apiKey, idemKey string, items ...Item) order.View {
	tb.Helper()
	r := Must(tb, s.PostOrder(apiKey, idemKey, items...), http.StatusCreated)
	var v order.View
	r.Decode(tb, &v)
	return v
}

// Token issues a one-time token (I7) for apiKey.
func (s *Server) Token(tb testing.TB, apiKey string) string {
	tb.Helper()
	r := Must(tb, s.Do(http.MethodPost, "/v1/idempotency-tokens", apiKey, nil, nil), http.StatusCreated)
	var v struct {
		Token string `json:"token"`
	}
	r.Decode(tb, &v)
	if v.Token == "" {
		tb.Fatalf("token response without a token: %s", r)
	}
	return v.Token
}

// PutInventory sets sku's price and available stock through the admin endpoint.
func (s *Server) PutInventory(tb testing.TB, sku string, price, available int64) inventory.View {
	tb.Helper()
	body := map[string]int64{"price": price, "available": available}
	r := Must(tb, s.Do(http.MethodPut, "/v1/admin/inventory/"+sku, AdminKey, body, nil), http.StatusOK)
	var v inventory.View
	r.Decode(tb, &v)
	return v
}

// Notification is a SUCCESS trade report paying o in full through channel's trade tradeNo.
func Notification(o order.View, channel, tradeNo string) notify.Report {
	return notify.Report{Kind: notify.Trade, Channel: channel, Number: tradeNo, OutNo: o.OrderID, Amount: o.Amount, Status: notify.StatusSuccess}
}

// JSON is the report's body as channels send it.
func JSON(n notify.Report) []byte { return n.Body() }

// Sign returns the X-Signature of body as a trade report, signed now under the instance's
// channel secret.
func (s *Server) Sign(body []byte) string { return s.SignAs(notify.Trade, body) }

// SignAs returns the X-Signature of body as a report of kind, signed now under the
// instance's channel secret.
func (s *Server) SignAs(kind notify.Kind, body []byte) string {
	return SignReport(s.Config.ChannelSecret, kind, body)
}

// SignReport returns the X-Signature of body as a report of kind, signed now with secret.
func SignReport(secret string, kind notify.Kind, body []byte) string {
	return reportsig.Sign(secret, time.Now(), string(kind), body)
}

// The paths a payment channel posts its signed reports to.
const (
	// PaymentNotifyPath receives the trade reports that pay orders.
	PaymentNotifyPath = "/v1/payments/notify"
	// RechargeNotifyPath receives the trade reports that pay recharges.
	RechargeNotifyPath = "/v1/recharges/notify"
	// RefundNotifyPath receives the refund reports.
	RefundNotifyPath = "/v1/refunds/notify"
)

// KindOf is the kind of report path receives.
func KindOf(path string) notify.Kind {
	for k, p := range notify.Routes {
		if p == path {
			return k
		}
	}
	return notify.Trade
}

// SignedPost posts body to path with its correct signature, as a payment channel sends a
// report. It never fails the test, so storms can call it.
func (s *Server) SignedPost(path string, body []byte) Response {
	return s.Do(http.MethodPost, path, "", body, map[string]string{web.HeaderSignature: s.SignAs(KindOf(path), body)})
}

// SignedNotify posts body to /v1/payments/notify with its correct signature.
func (s *Server) SignedNotify(body []byte) Response { return s.SignedPost(PaymentNotifyPath, body) }

// NotifyUntilDone posts body like a channel does: again after every 409 in-flight answer,
// until the server gives a final answer, which it returns.
func (s *Server) NotifyUntilDone(body []byte) Response {
	for i := 0; ; i++ {
		r := s.SignedNotify(body)
		if r.Status != http.StatusConflict || i == 200 {
			return r
		}
		sleepBrief()
	}
}

// RunCloseJob runs the close-expired-orders job through the admin endpoint and returns how
// many orders it closed.
func (s *Server) RunCloseJob(tb testing.TB) int64 {
	tb.Helper()
	r := Must(tb, s.Do(http.MethodPost, "/v1/admin/jobs/close-expired-orders/run", AdminKey, nil, nil), http.StatusOK)
	var v struct {
		Closed *int64 `json:"closed"`
	}
	r.Decode(tb, &v)
	if v.Closed == nil {
		tb.Fatalf("close job answer without closed: %s", r)
	}
	return *v.Closed
}

// PurgeDedup runs the purge job with an explicit older_than (a Go duration) and returns how
// many dedup records it deleted.
func (s *Server) PurgeDedup(tb testing.TB, olderThan string) int64 {
	tb.Helper()
	body := map[string]string{"older_than": olderThan}
	r := Must(tb, s.Do(http.MethodPost, "/v1/admin/jobs/purge-dedup-records/run", AdminKey, body, nil), http.StatusOK)
	var v struct {
		Purged *int64 `json:"purged"`
	}
	r.Decode(tb, &v)
	if v.Purged == nil {
		tb.Fatalf("purge answer without purged: %s", r)
	}
	return *v.Purged
}

// Anomalies lists the recorded anomalies through GET /v1/admin/anomalies.
func (s *Server) Anomalies(tb testing.TB) []anomaly.View {
	tb.Helper()
	r := Must(tb, s.Do(http.MethodGet, "/v1/admin/anomalies?limit=1000", AdminKey, nil, nil), http.StatusOK)
	var v struct {
		Anomalies []anomaly.View `json:"anomalies"`
	}
	r.Decode(tb, &v)
	return v.Anomalies
}

// AnomaliesOf returns the anomalies of kind recorded for orderID.
func (s *Server) AnomaliesOf(tb testing.TB, kind, orderID string) []anomaly.View {
	tb.Helper()
	var out []anomaly.View
	for _, a := range s.Anomalies(tb) {
		if a.Kind == kind && a.OrderID == orderID {
			out = append(out, a)
		}
	}
	return out
}

// GetOrder reads order id through the API as apiKey.
func (s *Server) GetOrder(apiKey, id string) Response {
	return s.Do(http.MethodGet, "/v1/orders/"+id, apiKey, nil, nil)
}

// Key returns a distinct Idempotency-Key for a test, from a prefix and a number.
func Key(prefix string, n int) string { return prefix + "-" + strconv.Itoa(n) }

// describe renders v for failure messages.
func describe(v any) string { return fmt.Sprintf("%+v", v) }
