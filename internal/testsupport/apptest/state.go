package apptest

import (
	"testing"

	"github.com/oncepay/oncepay/internal/inventory"
)

// StateTables are the business tables a refused request must leave alone: a request the
// server turns away (4xx) adds, removes and changes no row of any of them, except where the
// contract asks for an anomaly.
var StateTables = []string{"orders", "order_items", "inventory", "inventory_movements", "payments", "recharges",
	"accounts", "account_ledger", "ledger_transfers", "ledger_postings", "outbox", "events", "anomalies"}

// State is a Snapshot of the business state, finer than Snapshot: the row count of every
// table in StateTables ("orders": 3), plus what a request could change without adding a row —
// orders and recharges by status ("orders.PAID": 1), anomalies by kind
// ("anomalies.trade_conflict": 1), the sum of the accounts' balances ("accounts.balance") and
// every SKU's price, stock and version ("SKU-1001.price"). The dedup records are not part of
// it: a stored refusal is the idempotency layer's own business (see Snapshot).
func (s *Server) State(tb testing.TB) Snapshot {
	tb.Helper()
	snap := Snapshot{}
	for _, t := range StateTables {
		snap[t] = s.Count(tb, t, "")
	}
	type group struct {
		Name string
		N    int64
	}
	for _, g := range []struct{ table, column string }{{"orders", "status"}, {"recharges", "status"}, {"anomalies", "kind"}} {
		var rows []group
		if err := s.DB.Table(g.table).Select(g.column + " AS name, COUNT(*) AS n").Group(g.column).Scan(&rows).Error; err != nil {
			tb.Fatalf("count %s by %s: %v", g.table, g.column, err)
		}
		for _, r := range rows {
			snap[g.table+"."+r.Name] = r.N
		}
	}
	var sum struct{ Total int64 }
	if err := s.DB.Table("accounts").Select("COALESCE(SUM(balance), 0) AS total").Scan(&sum).Error; err != nil {
		tb.Fatalf("sum balances: %v", err)
	}
	snap["accounts.balance"] = sum.Total
	var items []inventory.Item
	if err := s.DB.Order("sku").Find(&items).Error; err != nil {
		tb.Fatalf("read inventory: %v", err)
	}
	for _, it := range items {
		snap[it.SKU+".price"] = it.Price
		snap[it.SKU+".available"] = it.Available
		snap[it.SKU+".reserved"] = it.Reserved
		snap[it.SKU+".sold"] = it.Sold
		snap[it.SKU+".version"] = it.Version
	}
	return snap
}
