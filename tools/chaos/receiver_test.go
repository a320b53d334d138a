package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

func TestVerifyHook(t *testing.T) {
	body := []byte(`{"event_id":"1","type":"order.created"}`)
	now := time.Now()
	cases := []struct {
		name   string
		header string
		want   bool
	}{
		{"signed by oncepay's signer", webhook.Sign([]string{"whsec_a"}, now, body), true},
		{"during a rotation, the second v1 is the secret", webhook.Sign([]string{"whsec_b", "whsec_a"}, now, body), true},
		{"another secret", webhook.Sign([]string{"whsec_b"}, now, body), false},
		{"another body", webhook.Sign([]string{"whsec_a"}, now, []byte(`{}`)), false},
		{"too old", webhook.Sign([]string{"whsec_a"}, now.Add(-10*time.Minute), body), false},
		{"no header", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := verifyHook([]string{"whsec_a"}, tc.header, body); got != tc.want {
				t.Errorf("verifyHook(%q) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

// TestMerchantProcessesOnce sends the receiver what oncepay's sender sends — the same event
// again after a lost 2xx, a 500 on purpose, a bad signature — and reads its effects.
func TestMerchantProcessesOnce(t *testing.T) {
	testenv.RequireMySQL(t)
	_, dsn := testenv.DBWithDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := startMerchant(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	m.setSecret("whsec_dGVzdA==")
	client := &http.Client{Timeout: time.Second}
	send := func(id string, p float64, secret string) int {
		t.Helper()
		m.mu.Lock()
		m.rnd = func() float64 { return p }
		m.mu.Unlock()
		body := fmt.Appendf(nil, `{"event_id":%q,"type":"order.paid","data":{}}`, id)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(body))
		req.Header.Set("Oncepay-Event-Id", id)
		req.Header.Set("Oncepay-Signature", webhook.Sign([]string{secret}, time.Now(), body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
		req.Header.Set("webhook-signature", webhook.SignStandard([]string{secret}, id, time.Now(), body))
		resp, err := client.Do(req)
		if err != nil {
			return 0 // the lost 2xx: no answer within the client's timeout
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	lost := hook500Share + hookSlowShare + hookLostShare/2
	if got := send("E1", lost, "whsec_dGVzdA=="); got != 0 {
		t.Errorf("lost 2xx answered %d", got)
	}
	if got := send("E1", 0.99, "whsec_dGVzdA=="); got != http.StatusOK {
		t.Errorf("the retry after a lost 2xx: %d", got)
	}
	if got := send("E2", 0, "whsec_dGVzdA=="); got != http.StatusInternalServerError {
		t.Errorf("500 on purpose: %d", got)
	}
	if got := send("E3", 0.99, "whsec_b3RoZXI="); got != http.StatusBadRequest {
		t.Errorf("bad signature: %d", got)
	}
	effects, err := m.effects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if effects["E1"] != 1 || effects["E2"] != 0 || effects["E3"] != 0 {
		t.Errorf("effects %v: want E1 once, E2 and E3 never", effects)
	}
	f := (&hookView{attempts: m.snapshot(), effects: effects}).figures(0, 0)
	if f.Attempts != 4 || f.Lost2xx != 1 || f.Answered500 != 1 || f.BadSig != 1 || f.Processed != 1 {
		t.Errorf("figures %+v", f)
	}
}
