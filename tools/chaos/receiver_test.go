package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
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

// TestMerchantKilledPausedRotated runs the receiver's faults and the rotation by hand: a kill
// cuts the request in flight and the receiver listens again on its port; a pause holds a
// request past the client's timeout and answers it afterwards; after a rotation both secrets
// verify until the grace ends, then only the new one.
func TestMerchantKilledPausedRotated(t *testing.T) {
	testenv.RequireMySQL(t)
	_, dsn := testenv.DBWithDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := startMerchant(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	const oldSecret, newSecret = "whsec_b2xk", "whsec_bmV3"
	m.setSecret(oldSecret)
	m.rnd = func() float64 { return 0.99 } // no fault of its own
	n := 0
	send := func(secret string, timeout time.Duration) (int, string) {
		t.Helper()
		n++
		id := fmt.Sprint("E", n)
		body := fmt.Appendf(nil, `{"event_id":%q,"type":"order.paid","data":{}}`, id)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(body))
		req.Header.Set("Oncepay-Event-Id", id)
		req.Header.Set("Oncepay-Signature", webhook.Sign([]string{secret}, time.Now(), body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
		req.Header.Set("webhook-signature", webhook.SignStandard([]string{secret}, id, time.Now(), body))
		resp, err := (&http.Client{Timeout: timeout}).Do(req)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b := new(bytes.Buffer)
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if status, body := send(oldSecret, time.Second); status != http.StatusOK || requestOf(body) != "r1" {
		t.Fatalf("first request: %d %s, want 200 naming r1", status, body)
	}

	m.kill()
	if status, _ := send(oldSecret, time.Second); status != 0 {
		t.Errorf("a killed receiver answered %d", status)
	}
	if err := m.restart(); err != nil {
		t.Fatal(err)
	}
	if status, _ := send(oldSecret, time.Second); status != http.StatusOK {
		t.Errorf("after the restart on the same port: %d", status)
	}

	m.pause()
	time.AfterFunc(1500*time.Millisecond, m.resume)
	if status, _ := send(oldSecret, 500*time.Millisecond); status != 0 {
		t.Errorf("a paused receiver answered %d within the client's timeout", status)
	}
	time.Sleep(1500 * time.Millisecond)
	as := m.snapshot()
	if last := as[len(as)-1]; last.Fault != "paused" || last.Answer != http.StatusOK || last.Done.Sub(last.At) < time.Second {
		t.Errorf("the request held by the pause: %+v, want answered 200 once the pause ended", last)
	}

	m.rotated(newSecret, time.Now().Add(time.Second))
	if status, _ := send(newSecret, time.Second); status != http.StatusOK {
		t.Errorf("signed with the new secret: %d", status)
	}
	if status, _ := send(oldSecret, time.Second); status != http.StatusOK {
		t.Errorf("signed with the old secret within the grace: %d", status)
	}
	time.Sleep(1100 * time.Millisecond)
	if status, _ := send(oldSecret, time.Second); status != http.StatusBadRequest {
		t.Errorf("signed with the old secret after the grace: %d, want 400", status)
	}
}

// TestMerchantProcessKilledAndStopped: the receiver as a process of its own answers with ids
// unique across its lives, is refused by the kernel once killed -9, answers again when
// restarted on its port, and holds a request unanswered while stopped (SIGSTOP) — the journal
// says which request was killed and which paused, and the secrets handed over reach it.
func TestMerchantProcessKilledAndStopped(t *testing.T) {
	testenv.RequireMySQL(t)
	_, dsn := testenv.DBWithDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := startMerchantProcess(ctx, t.TempDir(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	const secret = "whsec_b2xk"
	m.setSecret(secret)
	n := 0
	send := func(timeout time.Duration) (int, string) {
		t.Helper()
		n++
		id := fmt.Sprint("E", n)
		body := fmt.Appendf(nil, `{"event_id":%q,"type":"order.paid","data":{}}`, id)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(body))
		req.Header.Set("Oncepay-Event-Id", id)
		req.Header.Set("Oncepay-Delivery-Attempt", "1")
		req.Header.Set("Oncepay-Signature", webhook.Sign([]string{secret}, time.Now(), body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
		req.Header.Set("webhook-signature", webhook.SignStandard([]string{secret}, id, time.Now(), body))
		resp, err := (&http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b := new(bytes.Buffer)
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	// Up to three tries: the receiver's own faults (500, slow, lost 2xx) strike some.
	ok := func(what string) string {
		t.Helper()
		for range 5 {
			if status, body := send(3 * time.Second); status == http.StatusOK {
				return requestOf(body)
			}
		}
		t.Fatalf("%s: no 200 in 5 requests", what)
		return ""
	}
	first := ok("first life")
	m.kill()
	if status, _ := send(time.Second); status != 0 {
		t.Fatalf("a killed receiver answered %d", status)
	}
	if err := m.restart(); err != nil {
		t.Fatal(err)
	}
	second := ok("second life")
	if first == "" || second == "" || strings.SplitN(first, ".", 2)[0] == strings.SplitN(second, ".", 2)[0] {
		t.Fatalf("request ids %q and %q: want each life's own prefix", first, second)
	}
	m.pause()
	if status, _ := send(500 * time.Millisecond); status != 0 {
		t.Fatalf("a stopped receiver answered %d", status)
	}
	m.resume()
	time.Sleep(500 * time.Millisecond)
	var paused int
	for _, a := range m.snapshot() {
		if strings.Contains(a.Fault, "paused") {
			paused++
		}
		if a.Attempt != 1 || !a.SigValid {
			t.Errorf("request %s: attempt %d, signature valid %v", a.ID, a.Attempt, a.SigValid)
		}
	}
	if paused == 0 {
		t.Errorf("no request marked paused in %+v", m.snapshot())
	}
}
