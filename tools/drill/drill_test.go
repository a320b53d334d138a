package drill

import (
	"slices"
	"testing"
)

// runNames names runs like the progress lines do, e.g. "I5 payment after close/oncepay".
func runNames(runs []planned, idx []int) []string {
	var names []string
	for _, i := range idx {
		names = append(names, runs[i].s.id+" "+runs[i].s.name+"/"+runs[i].rt.target)
	}
	return names
}

func TestScheduleKeepsTheCloseJobAndSlowPaymentsApart(t *testing.T) {
	d := &drill{lab: true}
	runs := d.plan()
	if len(runs) != len(catalog)+labScenarios() {
		t.Fatalf("%d runs, want every scenario plus %d lab runs", len(runs), labScenarios())
	}
	free, paying, alone := schedule(runs, false)
	wantFree := []string{
		"I1 triple delivery/lab",
		"I2 concurrent recharge callbacks/oncepay", "I2 concurrent recharge callbacks/lab",
		"I3 same key, concurrent creates/oncepay", "I3 same key, concurrent creates/lab",
		"I4 lock expiry under a slow payment/lab",
		"I5 late close of a paid order/oncepay", // pays at once; the close job it shares waits for the others
		"I5 late close of a paid order/lab",     // closes its one order by id and pays through the lab
		"I5 payment after close/oncepay",        // starts at once, shares the close job
		"I6 purge before redelivery/lab",
		"I7 double click/oncepay", "I7 double click/lab",
		"flash-sale flash sale/oncepay", "flash-sale flash sale/lab",
		"I10 paused holder writes late/oncepay", "I10 paused holder writes late/lab", // both pause under /lab/, outside any payment delay
		"I11 gateway retries a slow POST/oncepay", "I11 gateway retries a slow POST/lab", // an order through the drill's gateway, no payment
		"I14 a failover that forgets/oncepay", "I14 a failover that forgets/lab", // servers of their own
		"I15 two holders after a Redis failover/oncepay", "I15 two holders after a Redis failover/lab", // like I10
		"I8 refund call times out/lab",
		"I9 lost notification, then close/oncepay", // like I5: shares the close job
		"I9 lost notification, then close/lab",     // closes its one order by id
		"I12 side effect before the key/lab",       // the buyer's payment is refused: nothing for oncepay to apply
		"I13 purged fence on a money path/lab",     // paid through the lab's own route
		"I16 webhook processed twice/lab",          // the naive receiver; its order is paid through oncepay, but no run is slowed more for it
		"I17 event announced before its commit/oncepay", "I17 event announced before its commit/lab",
		"I18 client retries under a new key/oncepay", "I18 client retries under a new key/lab", // both order through /lab/, no payment
	}
	wantPaying := []string{"I1 triple delivery/oncepay", "I4 lock expiry under a slow payment/oncepay", "I6 purge before redelivery/oncepay",
		"I8 refund call times out/oncepay", "I12 side effect before the key/oncepay", "I13 purged fence on a money path/oncepay",
		"I16 webhook processed twice/oncepay"}
	var wantAlone []string
	for _, g := range []struct {
		name      string
		got, want []string
	}{{"free", runNames(runs, free), wantFree}, {"paying", runNames(runs, paying), wantPaying}, {"alone", runNames(runs, alone), wantAlone}} {
		if !slices.Equal(g.got, g.want) {
			t.Errorf("%s:\n got  %q\n want %q", g.name, g.got, g.want)
		}
	}

	free, paying, alone = schedule(runs, true)
	if len(free)+len(paying) != 0 || len(alone) != len(runs) || !slices.IsSorted(alone) {
		t.Errorf("--serial: free %v, paying %v, alone %v; want every run alone in plan order", free, paying, alone)
	}
}

func TestOverlapsMarksBothRuns(t *testing.T) {
	var o overlaps
	o.begin(1)
	if o.end(1) {
		t.Error("a run alone was marked overlapped")
	}
	o.begin(2)
	o.begin(3)
	if !o.end(2) {
		t.Error("the first of two overlapping runs was not marked")
	}
	o.begin(4) // starts after 2 ended, while 3 still runs
	if !o.end(3) || !o.end(4) {
		t.Error("runs 3 and 4 overlapped and were not both marked")
	}
	o.begin(5)
	if o.end(5) {
		t.Error("a run after all others ended was marked overlapped")
	}
}
