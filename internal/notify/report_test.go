package notify_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// TestParse checks the report limits of docs/contract.md, one field at a time, for the
// trade form; the refund form shares every rule but its field names (TestParseRefund).
func TestParse(t *testing.T) {
	t.Parallel()
	const ok = `{"channel":"alipay","trade_no":"T1","out_trade_no":"123","amount":100,"status":"SUCCESS"}`
	tests := []struct {
		name string
		body string
		want bool
	}{
		{"valid", ok, true},
		{"validKeysInAnotherOrder", `{"status":"SUCCESS","amount":100,"out_trade_no":"123","trade_no":"T1","channel":"alipay"}`, true},
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
		{"invalidLongOutTradeNo", strings.Replace(ok, `"out_trade_no":"123"`, `"out_trade_no":"`+strings.Repeat("1", 129)+`"`, 1), false},
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
		{"invalidRefundFieldInATradeReport", strings.Replace(ok, `"trade_no"`, `"refund_no"`, 1), false},
		{"invalidDuplicateField", strings.Replace(ok, `}`, `,"channel":"simpay"}`, 1), false},
		{"invalidFieldInAnotherCase", strings.Replace(ok, `"channel"`, `"Channel"`, 1), false},
		{"invalidTrailingData", ok + `{}`, false},
		{"invalidEmpty", ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := notify.Parse(notify.Trade, []byte(tt.body))
			if !tt.want {
				if !errors.Is(err, apperr.ErrInvalidRequest) {
					t.Errorf("Parse: %v, want invalid_request", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v, want a report", err)
			}
			scope := "channel:" + r.Channel
			if r.Status != notify.StatusSuccess {
				scope += "#" + r.Status
			}
			if k := r.Key(); k.Scope != scope || k.BizType != notify.BizTypeTrade || k.BizKey != r.Number {
				t.Errorf("key %+v, want %s / %s / %s", k, scope, notify.BizTypeTrade, r.Number)
			}
		})
	}
}

// TestParseRefund: the refund form has its own numbers, refund_no and out_refund_no, and a
// trade's field names are refused in it.
func TestParseRefund(t *testing.T) {
	t.Parallel()
	r, err := notify.Parse(notify.Refund, []byte(`{"channel":"simpay","refund_no":"R1","out_refund_no":"RF9","amount":5,"status":"SUCCESS"}`))
	if err != nil || r.Number != "R1" || r.OutNo != "RF9" || r.Kind != notify.Refund {
		t.Fatalf("Parse = %+v, %v", r, err)
	}
	if k := r.Key(); k.BizType != notify.BizTypeRefund || k.Scope != "channel:simpay" {
		t.Errorf("key %+v", k)
	}
	if _, err := notify.Parse(notify.Refund, []byte(`{"channel":"simpay","trade_no":"R1","out_refund_no":"RF9","amount":5,"status":"SUCCESS"}`)); !errors.Is(err, apperr.ErrInvalidRequest) {
		t.Errorf("a trade_no in a refund report: %v, want invalid_request", err)
	}
}

// TestOneKeyForOneTradeNumber: a trade number is one key whether it pays an order or a
// recharge (one number names one payment), but the two reports are two fingerprints, so the
// second is a key reused — never a replay of the first's answer.
func TestOneKeyForOneTradeNumber(t *testing.T) {
	t.Parallel()
	order := notify.Report{Kind: notify.Trade, Channel: "simpay", Number: "T1", OutNo: "11", Amount: 100, Status: "SUCCESS"}
	recharge := order
	recharge.Kind = notify.Recharge
	if order.Key() != recharge.Key() {
		t.Errorf("keys differ: %+v and %+v", order.Key(), recharge.Key())
	}
	if order.Fingerprint() == recharge.Fingerprint() {
		t.Error("an order's and a recharge's report of one number share a fingerprint")
	}
	body := []byte(`{ "status":"SUCCESS", "amount":100, "out_trade_no":"11", "trade_no":"T1", "channel":"simpay" }`)
	parsed, err := notify.Parse(notify.Trade, body)
	if err != nil || parsed.Fingerprint() != order.Fingerprint() {
		t.Errorf("another spelling of the same report: %v, fingerprints %s and %s", err, parsed.Fingerprint(), order.Fingerprint())
	}
}

// TestReportKeysNeverCollide: every pair of distinct reports — kind, channel, number, status
// — gets a distinct key, as a database row (scope, biz type, biz key) and as the Redis key
// built from its string form, including a number that holds the other's "#STATUS" suffix
// (before, trade "T#WAIT_PAY" reported SUCCESS shared the key of trade "T" reported WAIT_PAY:
// its payment was refused as a key reused with another body).
func TestReportKeysNeverCollide(t *testing.T) {
	t.Parallel()
	type report struct {
		kind                    notify.Kind
		channel, number, status string
	}
	reports := []report{
		{notify.Trade, "simpay", "T", "SUCCESS"},
		{notify.Trade, "simpay", "T", "WAIT_PAY"},
		{notify.Trade, "simpay", "T#WAIT_PAY", "SUCCESS"},
		{notify.Trade, "simpay", "T#WAIT_PAY", "WAIT_PAY"},
		{notify.Trade, "simpay", "WAIT_PAY:channel.trade:T", "SUCCESS"},
		{notify.Trade, "simpay", "channel.trade:T", "WAIT_PAY"},
		{notify.Trade, "simpay", "T", "success"},
		{notify.Trade, "simpay2", "T", "SUCCESS"},
		{notify.Trade, "simpay", "2:T", "SUCCESS"},
		{notify.Trade, "alipay", "T", "TRADE_CLOSED"},
		{notify.Trade, "alipay", "T", "TRADE"},
		{notify.Trade, "alipay", "_CLOSED:T", "TRADE"},
		{notify.Refund, "simpay", "T", "SUCCESS"},
		{notify.Refund, "simpay", "T", "FAILED"},
	}
	rows := map[[3]string]report{}
	strs := map[string]report{}
	for _, r := range reports {
		k := notify.Report{Kind: r.kind, Channel: r.channel, Number: r.number, Status: r.status}.Key()
		row := [3]string{k.Scope, k.BizType, k.BizKey}
		if other, ok := rows[row]; ok {
			t.Errorf("%+v and %+v share the key row %v", r, other, row)
		}
		rows[row] = r
		if other, ok := strs[k.String()]; ok {
			t.Errorf("%+v and %+v share the Redis key %q", r, other, k.String())
		}
		strs[k.String()] = r
		if k.BizKey != r.number {
			t.Errorf("%+v: biz key %q, want the number itself", r, k.BizKey)
		}
	}
}
