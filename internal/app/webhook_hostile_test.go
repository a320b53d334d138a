package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
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

// rawStatus sends raw as one HTTP/1.1 request on a fresh connection to s and returns the
// status code of the answer (0 when the server closed without one).
func rawStatus(t *testing.T, s *apptest.Server, raw string) int {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestHostileAuthorizationOnTheWire: two Authorization lines in any case, an empty one beside
// the admin key, a folded continuation, two credentials in one line, a space before the colon
// and a NUL in the value — none of them reads the admin's events; the header given twice is
// 400 (issue 27's two-Authorization rule), over the real listener and not just the middleware.
func TestHostileAuthorizationOnTheWire(t *testing.T) {
	s := apptest.StartHTTPOnly(t)
	req := func(headers string) string {
		return "GET /v1/admin/events HTTP/1.1\r\nHost: x\r\n" + headers + "Connection: close\r\n\r\n"
	}
	admin, alice := "Bearer "+apptest.AdminKey, "Bearer "+apptest.AliceKey
	if code := rawStatus(t, s, req("Authorization: "+admin+"\r\n")); code != http.StatusOK {
		t.Fatalf("the admin key alone: %d, want 200", code)
	}
	for name, h := range map[string]string{
		"admin then user, lower case": "Authorization: " + admin + "\r\nauthorization: " + alice + "\r\n",
		"user then admin, upper case": "AUTHORIZATION: " + alice + "\r\nAuthorization: " + admin + "\r\n",
		"an empty one first":          "Authorization:\r\nAuthorization: " + admin + "\r\n",
		"the admin key twice":         "Authorization: " + admin + "\r\nAuthorization: " + admin + "\r\n",
	} {
		if code := rawStatus(t, s, req(h)); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, code)
		}
	}
	for name, h := range map[string]string{
		"a folded continuation":      "Authorization: " + alice + "\r\n " + admin + "\r\n",
		"two credentials in a line":  "Authorization: " + alice + ", " + admin + "\r\n",
		"a space before the colon":   "Authorization : " + admin + "\r\n",
		"a NUL in the value":         "Authorization: " + admin + "\x00\r\n",
		"the key in another header":  "X-Authorization: " + admin + "\r\n",
		"Proxy-Authorization":        "Proxy-Authorization: " + admin + "\r\n",
		"the admin key as Basic":     "Authorization: Basic " + apptest.AdminKey + "\r\n",
		"the admin key with a tab":   "Authorization: Bearer\t" + apptest.AdminKey + "\r\n",
		"the admin key as a prefix":  "Authorization: " + admin + "x\r\n",
		"a truncated admin key":      "Authorization: " + admin[:len(admin)-1] + "\r\n",
		"the admin key, then a user": "Authorization: " + admin + " " + alice + "\r\n",
	} {
		if code := rawStatus(t, s, req(h)); code == http.StatusOK || code == 0 {
			t.Errorf("%s: %d, want a refusal", name, code)
		}
	}
}

// TestRegistrationWithAKeyStoresNoSecret: a registration sent with an Idempotency-Key (which
// it does not take) and a PATCH, a redelivery and a delivery to a refused address leave the
// secret nowhere — no table, no Redis key, no attempt's error, no log line (issue 27: the
// registration's answer is stored nowhere).
func TestRegistrationWithAKeyStoresNoSecret(t *testing.T) {
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	s := webhookServer(t)

	var e webhook.EndpointView
	apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints", apptest.AdminKey,
		map[string]any{"url": "http://127.0.0.1:9/hook", "event_types": []string{"order.created"}}, apptest.IdemKey("reg-with-key")),
		http.StatusCreated).Decode(t, &e)
	// The same key again is another registration with another secret, never a replay of the
	// first answer.
	var again webhook.EndpointView
	apptest.Must(t, s.Do(http.MethodPost, "/v1/admin/webhook-endpoints", apptest.AdminKey,
		map[string]any{"url": "http://127.0.0.1:9/hook", "event_types": []string{"order.created"}}, apptest.IdemKey("reg-with-key")),
		http.StatusCreated).Decode(t, &again)
	if again.Secret == e.Secret || again.EndpointID == e.EndpointID {
		t.Fatalf("the second registration under one key answered the first's secret")
	}
	// A delivery that fails at the dial (the address policy refuses metadata) and one that
	// reaches nothing (port 9 on loopback).
	if err := s.DB.Table("webhook_endpoints").Where("id = ?", again.EndpointID).Update("url", "http://169.254.169.254/latest/meta-data").Error; err != nil {
		t.Fatal(err)
	}
	s.CreateOrder(t, apptest.AliceKey, "secret-probe", apptest.Item{SKU: "SKU-1002", Quantity: 1})
	apptest.Eventually(t, 20*time.Second, "both deliveries attempted", func() (bool, string) {
		return s.Count(t, "webhook_attempts", "1 = 1") >= 2, ""
	})
	var metaErr []string
	s.DB.Table("webhook_attempts").Where("endpoint_id = ?", again.EndpointID).Pluck("error", &metaErr)
	if len(metaErr) == 0 || !strings.Contains(metaErr[0], "metadata") {
		t.Errorf("the attempt to the metadata address: %q, want a refusal naming metadata", metaErr)
	}

	var needles []string
	for _, secret := range []string{e.Secret, again.Secret} {
		b64 := strings.TrimPrefix(secret, "whsec_")
		key, _ := base64.StdEncoding.DecodeString(b64)
		needles = append(needles, secret, b64, fmt.Sprintf("%x", key))
	}
	found := func(where, text string) {
		for _, n := range needles {
			if strings.Contains(text, n) {
				t.Errorf("%s holds a secret", where)
			}
		}
	}
	tables, err := s.DB.Migrator().GetTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		var rows []map[string]any
		if err := s.DB.Table(table).Find(&rows).Error; err != nil {
			t.Fatalf("dump %s: %v", table, err)
		}
		found("table "+table, fmt.Sprint(rows))
	}
	ctx := context.Background()
	keys, err := s.Deps.Redis.Client.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		dump, _ := s.Deps.Redis.Client.Dump(ctx, k).Result()
		found("redis key "+k, k+" "+dump)
	}
	found("the logs", logs.String())
}
