package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The checks of issue 27's receiver faults, each broken on purpose: a checker that cannot fail
// proves nothing.

var t0 = time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// req is a receiver request of event id arriving at s seconds, answered d seconds later.
func req(id, event string, s, d float64, answer int) hookAttempt {
	return hookAttempt{ID: id, EventID: event, At: at(s), Done: at(s + d), Answer: answer, SigValid: true}
}

// named reports which of ids the violations name, in order.
func named(vs []string, ids ...string) []string {
	var out []string
	for _, id := range ids {
		for _, v := range vs {
			if strings.Contains(v, "event "+id+" ") {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

func TestDeliveredNamesEveryEventNotDelivered(t *testing.T) {
	evs := []committedEvent{{id: "E1", typ: "order.paid"}, {id: "E2", typ: "order.paid"}, {id: "E3", typ: "order.created"}, {id: "E4", typ: "refund.succeeded"}}
	deliveries := map[string]deliveryRow{
		"E1": {status: "succeeded", attempts: 2},
		"E2": {status: "failed", attempts: 11},
		"E4": {status: "succeeded", attempts: 1},
	}
	attempts := []hookAttempt{
		req("r1", "E1", 1, 0.1, 500), req("r2", "E1", 2, 0.1, 200),
		req("r3", "E2", 1, 0.1, 500), req("r3b", "E2", 3, 4, 200), // a 2xx after the attempt's timeout: no acknowledgement
		req("r4", "E4", 1, 2, 0), // a lost 2xx, yet the delivery says succeeded
	}
	vs := deliveredViolations(evs, deliveries, attempts)
	if got := named(vs, "E1", "E2", "E3", "E4"); !slices.Equal(got, []string{"E2", "E3", "E4"}) {
		t.Errorf("named %v, want E2 (failed), E3 (no delivery), E4 (never answered 2xx); violations:\n%s", got, strings.Join(vs, "\n"))
	}
	if !strings.Contains(strings.Join(vs, "\n"), "r3 at 08:00:01.000 answered 500") {
		t.Errorf("a violation does not list the event's requests:\n%s", strings.Join(vs, "\n"))
	}
	// The same run, every event delivered: nothing to say.
	deliveries["E2"], deliveries["E3"] = deliveryRow{status: "succeeded"}, deliveryRow{status: "succeeded"}
	attempts = append(attempts, req("r5", "E2", 3, 0.1, 200), req("r6", "E3", 3, 0.1, 200), req("r7", "E4", 4, 0.1, 200))
	if vs := deliveredViolations(evs, deliveries, attempts); len(vs) != 0 {
		t.Errorf("every event delivered, yet:\n%s", strings.Join(vs, "\n"))
	}
}

func TestResendAfter2xxNamesEveryCopyOutsideARedelivery(t *testing.T) {
	attempts := []hookAttempt{
		// E1: answered 200 and acknowledged, then sent again: a violation.
		req("r1", "E1", 1, 0.1, 500), req("r2", "E1", 3, 0.1, 200), req("r3", "E1", 9, 0.1, 200),
		// E2: acknowledged, then redelivered by the operator at 20 s: its copies after it are
		// a new round; that round's 2xx is held too (r6 after r5).
		req("r4", "E2", 2, 0.1, 200), req("r5", "E2", 21, 0.1, 200), req("r6", "E2", 25, 0.1, 200),
		// E3: answered 200 after the attempt's timeout (a paused receiver): oncepay never
		// recorded it, so the next attempt is owed.
		req("r7", "E3", 2, 5, 200), req("r8", "E3", 6, 0.1, 200),
		// E4: a second copy arrived while the acknowledged one was being answered.
		req("r9", "E4", 2, 1, 200), req("r10", "E4", 2.5, 0.1, 200),
		// E5: acknowledged, then sent again after a redelivery that did not name it.
		req("r11", "E5", 2, 0.1, 200), req("r12", "E5", 22, 0.1, 200),
		// E6: acknowledged while the redelivery's call was under way (20–20.8 s): the copy
		// after it is the redelivery's.
		req("r13", "E6", 20.3, 0.1, 200), req("r14", "E6", 21, 0.1, 200),
	}
	acked := map[string]string{"r2": "attempt 2", "r4": "attempt 1", "r5": "attempt 2", "r8": "attempt 2", "r9": "attempt 1", "r11": "attempt 1", "r13": "attempt 1"}
	reds := []redeliveredSet{{at: at(20), done: at(20.8), events: map[string]bool{"E2": true, "E3": true, "E6": true}}}
	vs := resendViolations(attempts, acked, nil, reds)
	if got := named(vs, "E1", "E2", "E3", "E4", "E5", "E6"); !slices.Equal(got, []string{"E1", "E2", "E4", "E5"}) {
		t.Errorf("named %v, want E1, E2 (within its redelivered round), E4, E5; violations:\n%s", got, strings.Join(vs, "\n"))
	}
	if len(vs) != 4 {
		t.Errorf("%d violations, want 4:\n%s", len(vs), strings.Join(vs, "\n"))
	}
	all := strings.Join(vs, "\n")
	for _, want := range []string{"then r3 at 08:00:09.000 answered 200", "then r6 at 08:00:25.000", "two at once", "then r12 at 08:00:22.000"} {
		if !strings.Contains(all, want) {
			t.Errorf("no violation says %q:\n%s", want, all)
		}
	}
	// Without the resends: nothing to say.
	clean := slices.DeleteFunc(slices.Clone(attempts), func(a hookAttempt) bool { return slices.Contains([]string{"r3", "r6", "r10", "r12"}, a.ID) })
	if vs := resendViolations(clean, acked, nil, reds); len(vs) != 0 {
		t.Errorf("no copy after an acknowledged 2xx, yet:\n%s", strings.Join(vs, "\n"))
	}
}

func TestFeedLagExcusesOnlyTheFeedsOwnFaults(t *testing.T) {
	ms := func(s float64) float64 { return s * 1000 }
	history := []*event{
		{Kind: kindFault, Op: faultPauseInstance, AtMs: ms(10)},
		{Kind: kindFault, Op: faultKillReceiver, AtMs: ms(11)},
		{Kind: kindFault, Op: faultKillReceiver + "_healed", AtMs: ms(13)},
		{Kind: kindFault, Op: faultPauseInstance + "_healed", AtMs: ms(15)},
		{Kind: kindFault, Op: faultPauseReceiver, AtMs: ms(30)},
		{Kind: kindFault, Op: faultPauseReceiver + "_healed", AtMs: ms(34)},
		{Kind: kindHTTP, AtMs: ms(40)},
	}
	windows := faultWindows(history, t0, feedStallFaults)
	if len(windows) != 1 || windows[0].kind != faultPauseInstance || !windows[0].start.Equal(at(10)) || !windows[0].end.Equal(at(15)) {
		t.Fatalf("windows %+v, want pause_instance 10–15 s alone", windows)
	}
	lags := []eventLag{
		{id: "E1", typ: "order.paid", created: at(1), sequenced: at(1.5)},
		{id: "E2", typ: "order.paid", created: at(2), sequenced: at(9)},    // 7 s, nothing of the feed's path meanwhile
		{id: "E3", typ: "order.paid", created: at(9.5), sequenced: at(19)}, // 9.5 s through a 5 s pause of an instance
		{id: "E4", typ: "order.paid", created: at(30), sequenced: at(36)},  // 6 s while the receiver was paused: no excuse
	}
	vs, longest := lagViolations(lags, windows, feedLagBound)
	if got := named(vs, "E1", "E2", "E3", "E4"); !slices.Equal(got, []string{"E2", "E4"}) {
		t.Errorf("named %v, want E2 and E4; violations:\n%s", got, strings.Join(vs, "\n"))
	}
	if longest != 9500*time.Millisecond {
		t.Errorf("longest wait %s, want 9.5s", longest)
	}
}

func TestFirstRoundStartsWithTheModesOwnFaults(t *testing.T) {
	rotation := append(slices.Clone(allFaults), faultNetPartition, faultKillReceiver, faultPauseReceiver, faultKillRedisMaster, faultFailoverForce)
	own := (&faulter{w: &world{}}).ownFaults(true)
	for range 50 {
		got := firstRound(rotation, own)
		if len(got) != len(rotation) {
			t.Fatalf("first round %v: %d faults, want %d", got, len(got), len(rotation))
		}
		if head := slices.Sorted(slices.Values(got[:len(own)])); !slices.Equal(head, slices.Sorted(slices.Values(own))) {
			t.Fatalf("first round %v does not start with the own faults %v", got, own)
		}
	}
	if m := missingFaults(own, map[string]int{faultKillReceiver: 1, faultPauseReceiver: 2, faultKillRedisMaster: 1}); !slices.Equal(m, []string{faultFailoverForce}) {
		t.Errorf("missing %v, want the forced failover", m)
	}
	galera := (&faulter{w: &world{galera: &galeraWorld{}}}).ownFaults(false)
	if !slices.Contains(galera, faultKillGaleraNode) || !slices.Contains(galera, faultPartitionGaleraNode) || slices.Contains(galera, faultKillRedisMaster) {
		t.Errorf("a -galera run's own faults %v", galera)
	}
}

func TestRequestOfA2xxBody(t *testing.T) {
	if got := requestOf(`{"duplicate":false,"request":"r42"}`); got != "r42" {
		t.Errorf("requestOf = %q", got)
	}
	if got := requestOf(`{"dupl`); got != "" {
		t.Errorf("a cut snippet: %q", got)
	}
}

// TestResendExcusesOnlyAnEarlierAttemptAPauseHeld: a stopped receiver process reads its backlog
// in no order, so a request sent before the acknowledged attempt (a smaller
// Oncepay-Delivery-Attempt) and held by the pause may be read after it — no copy. The same
// late read of a larger attempt number, or of a smaller one outside a pause, is.
func TestResendExcusesOnlyAnEarlierAttemptAPauseHeld(t *testing.T) {
	held := func(id, event string, s float64, attempt int, fault string, answer int) hookAttempt {
		a := req(id, event, s, 0.1, answer)
		a.Attempt, a.Fault = attempt, fault
		return a
	}
	attempts := []hookAttempt{
		held("r1", "E1", 5, 2, "paused", 200), held("r2", "E1", 5.01, 1, "paused", 200), // excused
		held("r3", "E2", 5, 2, "paused", 200), held("r4", "E2", 5.01, 3, "paused", 200), // sent after
		held("r5", "E3", 5, 2, "", 200), held("r6", "E3", 5.01, 1, "", 200), // no pause to explain it
	}
	acked := map[string]string{"r1": "attempt 2", "r3": "attempt 2", "r5": "attempt 2"}
	vs := resendViolations(attempts, acked, nil, nil)
	if got := named(vs, "E1", "E2", "E3"); !slices.Equal(got, []string{"E2", "E3"}) {
		t.Errorf("named %v, want E2 and E3; violations:\n%s", got, strings.Join(vs, "\n"))
	}
}

// TestAnAttemptInFlightAtARedeliveryIsOfTheRoundBefore: an attempt claimed before a redelivery
// committed is of the round before it, and the redelivery follows it even when it is answered
// 2xx (webhook.Sender.record). Seen in CI: the redelivery's call ran 47.165–47.266, the attempt
// claimed before its commit reached the receiver at 47.267 and was answered 200, and the
// redelivered round sent the event again at 56.198. Its claim time, from the delivery log,
// excuses the copy; an acknowledged attempt claimed after the call returned still does not.
func TestAnAttemptInFlightAtARedeliveryIsOfTheRoundBefore(t *testing.T) {
	attempts := []hookAttempt{
		// E7: claimed at 20.5, during the call (20–20.8), arrived after it: the copy at 30 is
		// the redelivery's.
		req("r15", "E7", 20.9, 0.1, 200), req("r16", "E7", 30, 0.1, 200),
		// E8: claimed at 21, after the call returned: the copy at 30 is a resend.
		req("r17", "E8", 21.2, 0.1, 200), req("r18", "E8", 30, 0.1, 200),
	}
	acked := map[string]string{"r15": "attempt 3", "r17": "attempt 3"}
	claimed := map[string]time.Time{"r15": at(20.5), "r17": at(21)}
	reds := []redeliveredSet{{at: at(20), done: at(20.8), events: map[string]bool{"E7": true, "E8": true}}}
	vs := resendViolations(attempts, acked, claimed, reds)
	if got := named(vs, "E7", "E8"); !slices.Equal(got, []string{"E8"}) {
		t.Errorf("named %v, want E8 alone; violations:\n%s", got, strings.Join(vs, "\n"))
	}
	// Without the claim times, the arrival decides: both are resends.
	if got := named(resendViolations(attempts, acked, nil, reds), "E7", "E8"); !slices.Equal(got, []string{"E7", "E8"}) {
		t.Errorf("without claim times: named %v, want E7 and E8", got)
	}
}
