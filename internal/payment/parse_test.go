package payment_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// TestParse checks the notification limits of CONTRACT.md, one field at a time.
func TestParse(t *testing.T) {
	const ok = `{"channel":"alipay","trade_no":"T1","out_trade_no":"123","amount":100,"status":"SUCCESS"}`
	tests := []struct {
		name string
		body string
		want bool
	}{
		{"valid", ok, true},
		{"validMaxAmount", strings.Replace(ok, `"amount":100`, `"amount":10000000000`, 1), true},
		{"invalidAmountAboveMax", strings.Replace(ok, `"amount":100`, `"amount":10000000001`, 1), false},
		{"invalidAmountZero", strings.Replace(ok, `"amount":100`, `"amount":0`, 1), false},
		{"invalidAmountNegative", strings.Replace(ok, `"amount":100`, `"amount":-1`, 1), false},
		{"invalidAmountString", strings.Replace(ok, `"amount":100`, `"amount":"100"`, 1), false},
		{"invalidNoChannel", strings.Replace(ok, `"channel":"alipay"`, `"channel":""`, 1), false},
		{"invalidLongChannel", strings.Replace(ok, `"channel":"alipay"`, `"channel":"`+strings.Repeat("c", 65)+`"`, 1), false},
		{"invalidNoTradeNo", strings.Replace(ok, `"trade_no":"T1"`, `"trade_no":""`, 1), false},
		{"invalidLongTradeNo", strings.Replace(ok, `"trade_no":"T1"`, `"trade_no":"`+strings.Repeat("t", 129)+`"`, 1), false},
		{"invalidNoOutTradeNo", strings.Replace(ok, `"out_trade_no":"123"`, `"out_trade_no":""`, 1), false},
		{"invalidNoStatus", strings.Replace(ok, `"status":"SUCCESS"`, `"status":""`, 1), false},
		{"validOtherStatus", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"`+strings.Repeat("W", 32)+`"`, 1), true},
		{"invalidLongStatus", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"`+strings.Repeat("W", 33)+`"`, 1), false},
		{"invalidUnknownField", strings.Replace(ok, `}`, `,"x":1}`, 1), false},
		{"invalidTrailingData", ok + `{}`, false},
		{"invalidEmpty", ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := payment.Parse([]byte(tt.body))
			if tt.want {
				if err != nil {
					t.Fatalf("Parse: %v, want a notification", err)
				}
				if n.Key().Scope != "channel:"+n.Channel || !strings.HasPrefix(n.Key().BizKey, n.TradeNo) {
					t.Errorf("key %+v, want channel:%s / %s…", n.Key(), n.Channel, n.TradeNo)
				}
				return
			}
			if !errors.Is(err, apperr.ErrInvalidRequest) {
				t.Errorf("Parse: %v, want invalid_request", err)
			}
		})
	}
}

// TestRespond checks the one answer both paths store: success for nil, the problem for a client
// error (stored and replayed), and the error itself for anything else (nothing stored).
func TestRespond(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		status  int
		code    string
		wantErr bool
	}{
		{"respond200", nil, http.StatusOK, "", false},
		{"respond400AmountMismatch", payment.ErrAmountMismatch, http.StatusBadRequest, "amount_mismatch", false},
		{"respond404UnknownOrder", order.ErrNotFound, http.StatusNotFound, "not_found", false},
		{"respondErrorOnInternal", errors.New("deadlock"), 0, "", true},
		{"respondErrorOn503", apperr.ErrUnavailable, 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := payment.Respond(tt.err)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Respond(%v) = %+v, want the error back so that nothing is stored", tt.err, resp)
				}
				return
			}
			if err != nil || resp.Status != tt.status {
				t.Fatalf("Respond(%v) = %d, %v; want %d", tt.err, resp.Status, err, tt.status)
			}
			body := string(resp.Body)
			if tt.code == "" && !strings.Contains(body, `"result":"success"`) {
				t.Errorf("body %s, want the success body", body)
			}
			if tt.code != "" && (!strings.Contains(body, `"code":"`+tt.code+`"`) || resp.Header["Content-Type"] != "application/problem+json") {
				t.Errorf("body %s headers %v, want a problem with code %s", body, resp.Header, tt.code)
			}
		})
	}
}
