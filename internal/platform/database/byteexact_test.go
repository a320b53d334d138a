package database_test

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"
)

// TestKeysCompareByteForByte is the parity test of docs/contract.md's byte-exact keys: on both
// dialects, values that differ only in case or in a trailing space are distinct rows under
// every unique key that names a write (idempotency keys, SKUs, channel + trade_no, user names,
// ledger facts), and an equality lookup finds exactly one of them. MySQL's default collation
// would have refused the second insert as a duplicate (and matched it on lookup).
func TestKeysCompareByteForByte(t *testing.T) {
	now := time.Now().UTC()
	variants := []string{"CaseKey-1", "casekey-1", "CaseKey-1 "}
	inserts := []struct {
		table, column string
		row           func(i int, v string) map[string]any
	}{
		{"idempotency_records", "biz_key", func(i int, v string) map[string]any {
			return map[string]any{"id": i + 1, "scope": "user:1", "biz_type": "idempotency-key", "biz_key": v, "request_id": "",
				"fingerprint": "f", "status": "COMPLETED", "created_at": now, "updated_at": now, "expires_at": now}
		}},
		{"inventory", "sku", func(_ int, v string) map[string]any {
			return map[string]any{"sku": v, "name": v, "price": 1, "available": 1, "reserved": 0, "sold": 0, "version": 0, "updated_at": now}
		}},
		{"payments", "trade_no", func(i int, v string) map[string]any {
			return map[string]any{"id": i + 1, "channel": "alipay", "trade_no": v, "order_id": 1, "amount": 1, "status": "SUCCESS", "request_id": "", "created_at": now}
		}},
		{"users", "name", func(i int, v string) map[string]any {
			return map[string]any{"id": i + 1, "name": v, "created_at": now}
		}},
		{"account_ledger", "biz_id", func(i int, v string) map[string]any {
			return map[string]any{"id": i + 1, "user_id": 1, "biz_type": "recharge", "biz_id": v, "amount": 1, "balance_after": 1, "created_at": now}
		}},
	}
	eachDialect(t, func(t *testing.T, db *gorm.DB) {
		for _, in := range inserts {
			for i, v := range variants {
				if err := db.Table(in.table).Create(in.row(i, v)).Error; err != nil {
					t.Fatalf("%s: insert %q after %q: %v (compared as equal)", in.table, v, variants[:i], err)
				}
			}
			for _, v := range variants {
				var n int64
				if err := db.Table(in.table).Where(fmt.Sprintf("%s = ?", in.column), v).Count(&n).Error; err != nil {
					t.Fatal(err)
				}
				if n != 1 {
					t.Errorf("%s.%s = %q matches %d rows, want 1", in.table, in.column, v, n)
				}
			}
		}
	})
}
