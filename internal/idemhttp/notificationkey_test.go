package idemhttp_test

import (
	"testing"

	"github.com/oncepay/oncepay/internal/idemhttp"
)

// TestNotificationKeysNeverCollide: every pair of distinct reports — channel, number, status —
// gets a distinct key, as a database row (scope, biz type, biz key) and as the Redis key built
// from its string form, including a number that holds the other's "#STATUS" suffix (before,
// trade "T#WAIT_PAY" reported SUCCESS shared the key of trade "T" reported WAIT_PAY: its
// payment was refused as a key reused with another body).
func TestNotificationKeysNeverCollide(t *testing.T) {
	t.Parallel()
	type report struct{ channel, number, status string }
	reports := []report{
		{"simpay", "T", "SUCCESS"},
		{"simpay", "T", "WAIT_PAY"},
		{"simpay", "T#WAIT_PAY", "SUCCESS"},
		{"simpay", "T#WAIT_PAY", "WAIT_PAY"},
		{"simpay", "WAIT_PAY:payment.notify:T", "SUCCESS"},
		{"simpay", "payment.notify:T", "WAIT_PAY"},
		{"simpay", "T", "success"},
		{"simpay", "", "SUCCESS"},
		{"simpay2", "T", "SUCCESS"},
		{"simpay", "2:T", "SUCCESS"},
		{"alipay", "T", "TRADE_CLOSED"},
		{"alipay", "T", "TRADE"},
		{"alipay", "_CLOSED:T", "TRADE"},
	}
	rows := map[[3]string]report{}
	strs := map[string]report{}
	for _, r := range reports {
		k := idemhttp.NotificationKey(r.channel, "payment.notify", r.number, r.status, "SUCCESS")
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
	final := idemhttp.NotificationKey("simpay", "refund.notify", "R1", "SUCCESS", "SUCCESS")
	if final.Scope != "channel:simpay" || final.BizType != "refund.notify" || final.BizKey != "R1" {
		t.Errorf("the final report's key is %+v, want channel:simpay / refund.notify / R1", final)
	}
}
