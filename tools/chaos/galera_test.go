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
