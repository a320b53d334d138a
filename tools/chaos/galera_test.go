package chaos

import (
	"slices"
	"testing"
)

// views are three nodes' views after a run, all alike: synced, in one primary component of
// three, with the same checksums.
func views() []nodeView {
	out := make([]nodeView, 3)
	for i := range out {
		out[i] = nodeView{Node: i + 1, State: "Synced", Component: "Primary", Size: "3",
			Sums: map[string]string{"orders": "1111", "payments": "2222", "idempotency_records": "3333"}}
	}
	return out
}

// TestCheckGaleraNodes breaks galera_nodes_agree on purpose: a commit one node holds and
// another lost (a payment missing on node 2, as Jepsen's lost transactions would show), a
// node that never rejoined, and a node that cannot be read are each named; nodes alike are not.
func TestCheckGaleraNodes(t *testing.T) {
	t.Run("alike", func(t *testing.T) {
		c := &checker{}
		c.checkGaleraNodes(views())
		expectOnly(t, c, "galera_nodes_agree", 0)
	})
	t.Run("a lost commit", func(t *testing.T) {
		v := views()
		v[1].Sums["payments"] = "2221"
		c := &checker{}
		c.checkGaleraNodes(v)
		expectOnly(t, c, "galera_nodes_agree", 1)
		expectDetail(t, c, "galera_nodes_agree", "table payments differs", "node 2: 2221")
	})
	t.Run("a node left behind", func(t *testing.T) {
		v := views()
		v[2].State, v[2].Component, v[2].Size = "Joining", "non-Primary", "1"
		c := &checker{}
		c.checkGaleraNodes(v)
		expectOnly(t, c, "galera_nodes_agree", 1)
		expectDetail(t, c, "galera_nodes_agree", "galera node 3", "Joining")
	})
	t.Run("a node that cannot be read", func(t *testing.T) {
		v := views()
		v[0].Err = "dial tcp 127.0.0.1:4401: connection refused"
		c := &checker{}
		c.checkGaleraNodes(v)
		expectOnly(t, c, "galera_nodes_agree", 1)
		expectDetail(t, c, "galera_nodes_agree", "galera node 1 could not be read")
	})
}

// TestGaleraRotation: on Galera the scheduler kills and cuts off nodes instead of killing
// the one MariaDB server it does not have, and keeps every other fault.
func TestGaleraRotation(t *testing.T) {
	plain := (&faulter{w: &world{}}).rotation()
	if !slices.Equal(plain, allFaults) {
		t.Errorf("rotation without Galera = %v, want %v", plain, allFaults)
	}
	got := (&faulter{w: &world{galera: &galeraWorld{}}}).rotation()
	if slices.Contains(got, faultKillMariaDB) || !slices.Contains(got, faultKillGaleraNode) || !slices.Contains(got, faultPartitionGaleraNode) {
		t.Errorf("rotation on Galera = %v, want the Galera faults in place of %s", got, faultKillMariaDB)
	}
	if len(got) != len(allFaults)+1 {
		t.Errorf("rotation on Galera has %d faults, want %d", len(got), len(allFaults)+1)
	}
}

// TestViewsAgree: the re-read of the nodes stops once they agree, and not before.
func TestViewsAgree(t *testing.T) {
	v := views()
	if !viewsAgree(v) {
		t.Error("three alike views do not agree")
	}
	v[2].Sums["orders"] = "0"
	if viewsAgree(v) {
		t.Error("views with one checksum apart agree")
	}
	v = views()
	delete(v[1].Sums, "payments")
	if viewsAgree(v) {
		t.Error("views with a table missing on one node agree")
	}
}

// TestCheckNoStaleNotFound breaks no_stale_not_found on purpose: an order acknowledged as
// created, then its payment answered 404 by a node that had not seen it yet, and a recharge's
// report answered 404 likewise, are named; a 404 for an id nobody was told of, and a request
// sent before the creation was acknowledged, are not.
func TestCheckNoStaleNotFound(t *testing.T) {
	const notFound = `{"code":"not_found","detail":"no such order"}`
	events := []*event{
		{Kind: kindHTTP, Op: "order", Status: 201, AtMs: 100, Resp: `{"order_id":"1001","status":"PENDING_PAYMENT"}`},
		{Kind: kindHTTP, Op: "recharge", Status: 201, AtMs: 110, Resp: `{"recharge_id":"2002","status":"PENDING"}`},
		// Sent at 150 − 20 = 130, after the order's 201 at 100: stale.
		{Seq: 7, Kind: kindHTTP, Op: "pay", Method: "POST", Path: "/v1/orders/1001/payments", Status: 404, AtMs: 150, Ms: 20, Inst: 3, Resp: notFound},
		{Seq: 8, Kind: kindHTTP, Op: "recharge_notify", Method: "POST", Path: "/v1/recharges/notify", Status: 404, AtMs: 160, Ms: 5, Resp: notFound,
			Req: `{"channel":"simpay","trade_no":"T1","out_trade_no":"2002","amount":100,"status":"SUCCESS"}`},
		// Sent at 95, before the 201 at 100 arrived: the client could not know yet.
		{Kind: kindHTTP, Op: "pay", Method: "POST", Path: "/v1/orders/1001/payments", Status: 404, AtMs: 101, Ms: 6, Resp: notFound},
		// An id nobody was told of: not the checker's business.
		{Kind: kindHTTP, Op: "get_order", Method: "GET", Path: "/v1/orders/9999", Status: 404, AtMs: 200, Resp: notFound},
		{Kind: kindHTTP, Op: "pay", Method: "POST", Path: "/v1/orders/1001/payments", Status: 201, AtMs: 300, Ms: 5},
	}
	c := &checker{events: events}
	c.checkNoStaleNotFound()
	expectOnly(t, c, "no_stale_not_found", 2)
	expectDetail(t, c, "no_stale_not_found", "#7", "/v1/orders/1001/payments", "oncepay-3", "1001")
	expectDetail(t, c, "no_stale_not_found", "#8", "2002")
}
