package reportsig_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/reportsig"
)

// TestSignVerify: a signature verifies for its secret, kind, body and a clock within the
// tolerance either way, and for nothing else; each refusal says which.
func TestSignVerify(t *testing.T) {
	body := []byte(`{"channel":"simpay","trade_no":"T1"}`)
	at := time.Unix(1_800_000_000, 0)
	sig := reportsig.Sign("s3cret", at, "trade", body)
	if !strings.HasPrefix(sig, "t=1800000000,v1=") || len(sig) != len("t=1800000000,v1=")+64 {
		t.Fatalf("Sign = %q, want t=1800000000,v1=<64 hex>", sig)
	}
	tol := 5 * time.Minute
	if err := reportsig.Verify("s3cret", sig, "trade", body, at.Add(tol), tol); err != nil {
		t.Fatalf("at the edge of the tolerance: %v", err)
	}
	if err := reportsig.Verify("s3cret", sig, "trade", body, at.Add(-tol), tol); err != nil {
		t.Fatalf("a clock behind by the tolerance: %v", err)
	}
	upper := "t=1800000000,v1=" + strings.ToUpper(sig[len("t=1800000000,v1="):])
	tests := []struct {
		name           string
		secret, header string
		kind           string
		body           []byte
		now            time.Time
		want           error
	}{
		{"another secret", "other", sig, "trade", body, at, reportsig.ErrMismatch},
		{"another kind", "s3cret", sig, "recharge", body, at, reportsig.ErrMismatch},
		{"another body", "s3cret", sig, "trade", append([]byte(" "), body...), at, reportsig.ErrMismatch},
		{"another timestamp", "s3cret", strings.Replace(sig, "t=1800000000", "t=1800000001", 1), "trade", body, at, reportsig.ErrMismatch},
		{"too late", "s3cret", sig, "trade", body, at.Add(tol + time.Second), reportsig.ErrStale},
		{"too early", "s3cret", sig, "trade", body, at.Add(-tol - time.Second), reportsig.ErrStale},
		{"the earlier bare HMAC", "s3cret", sig[len("t=1800000000,v1="):], "trade", body, at, reportsig.ErrMalformed},
		{"uppercase hex", "s3cret", upper, "trade", body, at, reportsig.ErrMalformed},
		{"empty", "s3cret", "", "trade", body, at, reportsig.ErrMalformed},
		{"no v1", "s3cret", "t=1800000000", "trade", body, at, reportsig.ErrMalformed},
		{"v1 first", "s3cret", sig[len("t=1800000000,"):] + ",t=1800000000", "trade", body, at, reportsig.ErrMalformed},
		{"spaces", "s3cret", strings.Replace(sig, ",", ", ", 1), "trade", body, at, reportsig.ErrMalformed},
		{"a signed negative time", "s3cret", "t=-1,v1=" + strings.Repeat("0", 64), "trade", body, at, reportsig.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := reportsig.Verify(tt.secret, tt.header, tt.kind, tt.body, tt.now, tol); !errors.Is(err, tt.want) {
				t.Errorf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestVerifyAnyOfSeveralV1: during a secret rotation a report may carry one v1 per secret;
// it verifies when any of them does, and a wrong one beside a right one does not spoil it.
func TestVerifyAnyOfSeveralV1(t *testing.T) {
	body := []byte(`{}`)
	at := time.Unix(1_800_000_000, 0)
	old, cur := reportsig.Sign("old", at, "refund", body), reportsig.Sign("new", at, "refund", body)
	both := cur + "," + old[strings.Index(old, "v1="):]
	for _, secret := range []string{"old", "new"} {
		if err := reportsig.Verify(secret, both, "refund", body, at, time.Minute); err != nil {
			t.Errorf("secret %s: %v", secret, err)
		}
	}
	if err := reportsig.Verify("third", both, "refund", body, at, time.Minute); !errors.Is(err, reportsig.ErrMismatch) {
		t.Errorf("a third secret: %v", err)
	}
}
