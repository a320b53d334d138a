package payment_test

import (
	"context"
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
		{"validChannel32", strings.Replace(ok, `"channel":"alipay"`, `"channel":"`+strings.Repeat("c", 32)+`"`, 1), true},
		{"validChannelDigitsUnderscore", strings.Replace(ok, `"channel":"alipay"`, `"channel":"wechat_pay2"`, 1), true},
		{"invalidChannel33", strings.Replace(ok, `"channel":"alipay"`, `"channel":"`+strings.Repeat("c", 33)+`"`, 1), false},
		{"invalidChannelUpper", strings.Replace(ok, `"channel":"alipay"`, `"channel":"ALIPAY"`, 1), false},
		{"invalidChannelTitle", strings.Replace(ok, `"channel":"alipay"`, `"channel":"Alipay"`, 1), false},
		{"invalidChannelTrailingSpace", strings.Replace(ok, `"channel":"alipay"`, `"channel":"alipay "`, 1), false},
		{"invalidChannelLeadingDigit", strings.Replace(ok, `"channel":"alipay"`, `"channel":"1pay"`, 1), false},
		{"invalidChannelDash", strings.Replace(ok, `"channel":"alipay"`, `"channel":"ali-pay"`, 1), false},
		{"invalidChannelNonASCII", strings.Replace(ok, `"channel":"alipay"`, `"channel":"alipaý"`, 1), false},
		{"invalidChannelColon", strings.Replace(ok, `"channel":"alipay"`, `"channel":"alipay:x"`, 1), false},
		{"invalidNoTradeNo", strings.Replace(ok, `"trade_no":"T1"`, `"trade_no":""`, 1), false},
		{"invalidLongTradeNo", strings.Replace(ok, `"trade_no":"T1"`, `"trade_no":"`+strings.Repeat("t", 129)+`"`, 1), false},
		{"invalidNoOutTradeNo", strings.Replace(ok, `"out_trade_no":"123"`, `"out_trade_no":""`, 1), false},
		{"invalidNoStatus", strings.Replace(ok, `"status":"SUCCESS"`, `"status":""`, 1), false},
		{"validOtherStatus", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"`+strings.Repeat("W", 32)+`"`, 1), true},
		{"invalidLongStatus", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"`+strings.Repeat("W", 33)+`"`, 1), false},
		{"validStatusLowerDigits", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"wait_pay_2"`, 1), true},
		{"invalidStatusColon", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"WAIT:PAY"`, 1), false},
		{"invalidStatusHash", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"WAIT#PAY"`, 1), false},
		{"invalidStatusSpace", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"SUCCESS "`, 1), false},
		{"invalidStatusNonASCII", strings.Replace(ok, `"status":"SUCCESS"`, `"status":"SUCCÉS"`, 1), false},
		{"validTradeNoWithHash", strings.Replace(ok, `"trade_no":"T1"`, `"trade_no":"T1#WAIT_PAY"`, 1), true},
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
				scope := "channel:" + n.Channel
				if n.Status != payment.StatusSuccess {
					scope += "#" + n.Status
				}
				if k := n.Key(); k.Scope != scope || k.BizType != payment.BizType || k.BizKey != n.TradeNo {
					t.Errorf("key %+v, want %s / %s / %s", k, scope, payment.BizType, n.TradeNo)
				}
				return
			}
			if !errors.Is(err, apperr.ErrInvalidRequest) {
				t.Errorf("Parse: %v, want invalid_request", err)
			}
		})
	}
}

// TestAnswer checks the one answer both paths store: success (marked state_rejected when the
// order had moved on), an amount mismatch committed with its anomaly as a 400, and every other
// error handed back to the guard, which stores a client error alone and nothing else.
func TestAnswer(t *testing.T) {
	tests := []struct {
		name    string
		result  payment.Result
		err     error
		status  int
		code    string
		outcome string
	}{
		{"answer200Applied", payment.Applied, nil, http.StatusOK, "", ""},
		{"answer200Refused", payment.Refused, nil, http.StatusOK, "", "state_rejected"},
		{"answer400AmountMismatch", "", payment.ErrAmountMismatch, http.StatusBadRequest, "amount_mismatch", ""},
		{"answerErrorOnUnknownOrder", "", order.ErrNotFound, 0, "", ""},
		{"answerErrorOnInternal", "", errors.New("deadlock"), 0, "", ""},
		{"answerErrorOn503", "", apperr.ErrUnavailable, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := payment.Answer(context.Background(), tt.result, tt.err)
			if tt.status == 0 {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Answer(%v) = %+v, %v; want the error back for the guard", tt.err, resp, err)
				}
				return
			}
			if err != nil || resp.Status != tt.status {
				t.Fatalf("Answer(%v) = %d, %v; want %d", tt.err, resp.Status, err, tt.status)
			}
			body := string(resp.Body)
			if tt.code == "" && !strings.Contains(body, `"result":"success"`) {
				t.Errorf("body %s, want the success body", body)
			}
			if tt.code != "" && (!strings.Contains(body, `"code":"`+tt.code+`"`) || resp.Header["Content-Type"] != "application/problem+json") {
				t.Errorf("body %s headers %v, want a problem with code %s", body, resp.Header, tt.code)
			}
			if got := resp.Header["Idempotency-Outcome"]; got != tt.outcome {
				t.Errorf("stored Idempotency-Outcome %q, want %q", got, tt.outcome)
			}
		})
	}
}
