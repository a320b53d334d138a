package web_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// TestCheckChannel: one canonical form for channel names, ^[a-z][a-z0-9_]{0,31}$; every other
// spelling — another case, a space, a dash, a non-ASCII letter, too long — is refused with
// invalid_request naming the field, never folded into the canonical one.
func TestCheckChannel(t *testing.T) {
	for _, name := range []string{"alipay", "wechat", "wechat_pay", "a", "drill", "unionpay2", "a_", strings.Repeat("z", 32)} {
		if err := web.CheckChannel("channel", name); err != nil || !web.ValidChannel(name) {
			t.Errorf("%q refused: %v", name, err)
		}
	}
	for _, name := range []string{"", "ALIPAY", "Alipay", "alipaY", "alipay ", " alipay", "alipay\t", "ali pay", "ali-pay", "ali.pay",
		"1pay", "_pay", "alipay:x", "alípay", "alipay\u200b", "ａlipay", strings.Repeat("z", 33), "alipay\x00"} {
		err := web.CheckChannel("channel", name)
		if err == nil || web.ValidChannel(name) {
			t.Errorf("%q accepted", name)
			continue
		}
		e, ok := apperr.As(err)
		if !ok || !errors.Is(err, apperr.ErrInvalidRequest) || !strings.Contains(e.Detail, `"channel"`) {
			t.Errorf("%q: %v, want invalid_request naming \"channel\"", name, err)
		}
	}
}

// TestCheckStatus: a notification's status is 1..32 letters, digits or underscores — every
// channel status there is — and nothing that could act as a separator of its key.
func TestCheckStatus(t *testing.T) {
	for _, s := range []string{"SUCCESS", "WAIT_BUYER_PAY", "TRADE_CLOSED", "PROCESSING", "success", "S", "REFUND_2", strings.Repeat("W", 32)} {
		if err := web.CheckStatus("status", s); err != nil {
			t.Errorf("%q refused: %v", s, err)
		}
	}
	for _, s := range []string{"", "WAIT:PAY", "WAIT#PAY", "SUCCESS ", " SUCCESS", "WAIT-PAY", "WAIT.PAY", "SUCCÉS", "{SUCCESS}", "SUCCESS\x00", strings.Repeat("W", 33)} {
		err := web.CheckStatus("status", s)
		e, ok := apperr.As(err)
		if err == nil || !ok || !errors.Is(err, apperr.ErrInvalidRequest) || !strings.Contains(e.Detail, `"status"`) {
			t.Errorf("%q: %v, want invalid_request naming \"status\"", s, err)
		}
	}
}

// TestRequireReportSignature: the middleware lets through a report signed for its kind, now,
// and refuses the earlier bare HMAC, another kind and a stale timestamp with 401.
func TestRequireReportSignature(t *testing.T) {
	body := []byte(`{"channel":"simpay"}`)
	now := time.Now()
	mw := web.RequireReportSignature("secret", "trade", time.Minute)
	good := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(string(body)))
	good.Header.Set(web.HeaderSignature, reportsig.Sign("secret", now, "trade", body))
	if res := serve(mw(ok), good); res.StatusCode != http.StatusNoContent {
		t.Fatalf("a good signature: %d", res.StatusCode)
	}
	for name, sig := range map[string]string{
		"the earlier bare HMAC": web.Sign("secret", body),
		"another kind":          reportsig.Sign("secret", now, "recharge", body),
		"stale":                 reportsig.Sign("secret", now.Add(-2*time.Minute), "trade", body),
		"another secret":        reportsig.Sign("other", now, "trade", body),
		"none":                  "",
	} {
		req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(string(body)))
		req.Header.Set(web.HeaderSignature, sig)
		t.Run(name, func(t *testing.T) { readProblem(t, serve(mw(ok), req), http.StatusUnauthorized, "invalid_signature") })
	}
}
