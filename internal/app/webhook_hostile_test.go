package app_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/webhook"
)

// The webhook hostile pass (issue 27, "Done when"): what a hostile admin or a careless operator
// tries against the webhook surface of a running instance, each refused.

// TestWebhookNeverReachesTheSimulatorOnAFreePort: in dev mode (loopback allowed) with the
// embedded simulator on a free port (ONCEPAY_EMBEDDED_CHANNEL_ADDR=127.0.0.1:0, as every
// apptest instance runs it), a webhook aimed at the simulator's pay URL is refused at
// registration and by PATCH with own_address, and an endpoint that holds that URL anyway (a
// row from before, or written behind the API) never reaches it: the order stays unpaid.
func TestWebhookNeverReachesTheSimulatorOnAFreePort(t *testing.T) {
	s := webhookServer(t)
	if !s.Config.WebhookDev || !strings.HasSuffix(s.Config.EmbeddedChannelAddr, ":0") {
		t.Fatalf("want dev mode and the simulator on a free port, got dev=%v addr=%s", s.Config.WebhookDev, s.Config.EmbeddedChannelAddr)
	}
	o := s.CreateOrder(t, apptest.AliceKey, "hostile-sim", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	openTradeOf(t, s, o, "hostile-sim-pay")
	pay := s.App.ChannelURL + "/sim/trades/" + o.OrderID + "/pay"
	variants := []string{pay, strings.Replace(pay, "127.0.0.1", "localhost", 1), strings.Replace(pay, "127.0.0.1", "[::ffff:127.0.0.1]", 1),
		strings.Replace(pay, "127.0.0.1", "2130706433", 1)}
	for _, u := range variants {
		wantURLRefused(t, u, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints", apptest.AdminKey,
			map[string]any{"url": u, "event_types": []string{"order.created"}}, nil), webhook.RuleOwn)
	}
	rcv := newHookReceiver(t)
	e := register(t, s, rcv.srv.URL, "order.created")
	for _, u := range variants {
		wantURLRefused(t, u, s.Do(http.MethodPatch, "/v1/admin/webhook-endpoints/"+e.EndpointID, apptest.AdminKey,
			map[string]any{"url": u}, nil), webhook.RuleOwn)
	}

	// Behind the API: the row holds the pay URL; the dialer must refuse it.
	if err := s.DB.Table("webhook_endpoints").Where("url = ?", rcv.srv.URL).Update("url", pay+"?behind=1").Error; err != nil {
		t.Fatal(err)
	}
	id, _ := ids.Parse(e.EndpointID)
	s.CreateOrder(t, apptest.AliceKey, "hostile-sim-trigger", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	apptest.Eventually(t, 20*time.Second, "an attempt to the pay URL logged", func() (bool, string) {
		n := s.Count(t, "webhook_attempts", "endpoint_id = ?", id)
		return n > 0, ""
	})
	var errs []string
	if err := s.DB.Table("webhook_attempts").Where("endpoint_id = ? AND error IS NOT NULL", id).Pluck("error", &errs).Error; err != nil {
		t.Fatal(err)
	}
	if len(errs) == 0 || !strings.Contains(errs[0], "own_address") {
		t.Errorf("attempt errors %q, want a refusal naming own_address", errs)
	}
	if tr, _ := tradeAtChannel(s, o.OrderID); tr.Status != channelsim.TradeWaitBuyerPay {
		t.Errorf("the simulator's trade is %s: a webhook paid it", tr.Status)
	}
	if st := s.Order(t, o.OrderID).Status; st != order.PendingPayment {
		t.Errorf("order %s: a webhook paid it", st)
	}
}

// wantURLRefused checks, without stopping the test, that r is 400 url_refused naming rule.
func wantURLRefused(t *testing.T, u string, r apptest.Response, rule webhook.Rule) {
	t.Helper()
	if r.Status != http.StatusBadRequest || r.Code() != "url_refused" || !strings.Contains(r.Problem().Detail, "rule "+string(rule)) {
		t.Errorf("%s: got %s, want 400 url_refused naming rule %s", u, r, rule)
	}
}
