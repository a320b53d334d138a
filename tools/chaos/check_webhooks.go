package chaos

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// committedEvent is a row of oncepay's events table.
type committedEvent struct {
	id       string
	typ      string
	hash     string // hex SHA-256 of the payload
	seq      int64
	hasSeq   bool
	bodySize int
}

// committedEvents reads oncepay's events table in feed order (unsequenced ones last).
func (c *checker) committedEvents(ctx context.Context) ([]committedEvent, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT CAST(id AS CHAR), type, payload, seq FROM events ORDER BY seq IS NULL, seq, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []committedEvent
	for rows.Next() {
		var e committedEvent
		var payload []byte
		var seq *int64
		if err := rows.Scan(&e.id, &e.typ, &payload, &seq); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(payload)
		e.hash, e.bodySize = hex.EncodeToString(sum[:]), len(payload)
		if seq != nil {
			e.seq, e.hasSeq = *seq, true
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// checkWebhooks holds the merchant's three invariants of webhooks and the events API. It does
// nothing without a hookView (a checker built by a test of other checks).
func (c *checker) checkWebhooks(ctx context.Context) error {
	if c.hooks == nil {
		return nil
	}
	evs, err := c.committedEvents(ctx)
	if err != nil {
		return err
	}
	byEvent := map[string][]hookAttempt{}
	for _, a := range c.hooks.attempts {
		byEvent[a.EventID] = append(byEvent[a.EventID], a)
	}
	committed := map[string]committedEvent{}
	for _, e := range evs {
		committed[e.id] = e
	}

	// Every committed event delivered with a valid signature and processed exactly once; no
	// effect of an event oncepay has no record of.
	var vs []string
	for _, e := range evs {
		as := byEvent[e.id]
		valid := 0
		for _, a := range as {
			if a.SigValid {
				valid++
			}
		}
		switch {
		case len(as) == 0:
			vs = append(vs, fmt.Sprintf("event %s (%s) was never delivered to the receiver", e.id, e.typ))
		case valid == 0:
			vs = append(vs, fmt.Sprintf("event %s (%s) reached the receiver %d times, never with a valid signature", e.id, e.typ, len(as)))
		}
		if n := c.hooks.effects[e.id]; n != 1 {
			vs = append(vs, fmt.Sprintf("event %s (%s) was processed %d times by the receiver (%d attempts): want exactly once", e.id, e.typ, n, len(as)))
		}
	}
	var stray []string
	for id := range c.hooks.effects {
		if _, ok := committed[id]; !ok {
			stray = append(stray, id)
		}
	}
	sort.Strings(stray)
	for _, id := range stray {
		vs = append(vs, fmt.Sprintf("the receiver processed event %s, which oncepay has no record of", id))
	}
	c.add("webhooks_processed_once", "every committed event reached the receiver with a valid signature and was processed exactly once", len(evs), vs)

	// Every attempt of one event carried the same body: the stored payload, byte for byte.
	vs = nil
	ids := make([]string, 0, len(byEvent))
	for id := range byEvent {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		as := byEvent[id]
		hashes := map[string]int{}
		for _, a := range as {
			hashes[a.BodyHash]++
		}
		e, ok := committed[id]
		switch {
		case !ok:
			vs = append(vs, fmt.Sprintf("the receiver was sent event %s %d times, which oncepay has no record of", id, len(as)))
		case len(hashes) > 1:
			vs = append(vs, fmt.Sprintf("event %s was sent with %d different bodies over %d attempts", id, len(hashes), len(as)))
		case hashes[e.hash] == 0:
			vs = append(vs, fmt.Sprintf("event %s was sent with a body that is not its stored payload (%d bytes)", id, e.bodySize))
		}
	}
	c.add("webhook_bodies_identical", "every attempt of one event carried the same body, its stored payload", len(ids), vs)

	if err := c.checkWebhookDeliveries(ctx, evs); err != nil {
		return err
	}

	// The events API, from the first cursor to the end, is the committed events in feed order,
	// each once.
	vs = nil
	if c.hooks.feedErr != "" {
		// One violation, not one per event the broken read never reached.
		vs = append(vs, fmt.Sprintf("reading the events API stopped after %d of %d events: %s", len(c.hooks.feed), len(evs), c.hooks.feedErr))
		c.add("events_feed_in_order", "the events API from the first cursor to the end is every committed event, in feed order, once", len(evs), vs)
		return nil
	}
	var want []string
	for _, e := range evs {
		if !e.hasSeq {
			vs = append(vs, fmt.Sprintf("event %s (%s) committed but was never given its place in the feed", e.id, e.typ))
			continue
		}
		want = append(want, e.id)
	}
	served := map[string]int{}
	for i, id := range c.hooks.feed {
		served[id]++
		if served[id] == 2 {
			vs = append(vs, fmt.Sprintf("the events API served event %s twice (again at position %d)", id, i))
		}
		if _, ok := committed[id]; !ok {
			vs = append(vs, fmt.Sprintf("the events API served event %s, which oncepay has no record of", id))
		}
	}
	for _, id := range want {
		if served[id] == 0 {
			vs = append(vs, fmt.Sprintf("the events API never served event %s", id))
		}
	}
	if len(vs) == 0 {
		for i := range want {
			if c.hooks.feed[i] != want[i] {
				vs = append(vs, fmt.Sprintf("the events API served event %s at position %d, where the feed's order has event %s", c.hooks.feed[i], i, want[i]))
				break
			}
		}
	}
	c.add("events_feed_in_order", "the events API from the first cursor to the end is every committed event, in feed order, once", len(want), vs)
	return nil
}

// feedLagBound is how long after its creation every event must have its place in the feed,
// beyond the faults that stop the feed's own path (feedStallFaults). The contract promises
// about ONCEPAY_WEBHOOK_INTERVAL (500 ms); 5 s is what three instances, MariaDB, Redis, Kafka,
// nginx and the workload on one loaded 2-core CI machine hold with room to spare, and is an
// order of magnitude below the stall a slow receiver caused before sequencing and sending were
// apart (49.6 s, issue 27).
const feedLagBound = 5 * time.Second

// feedStallFaults stop the feed's own path — its database, or an instance that may hold the
// sequencer's lock — for as long as they last: an event that waited through one may wait that
// much longer. The receiver's faults are not among them: the feed never waits for a receiver.
var feedStallFaults = []string{
	faultKillMariaDB, faultKillGaleraNode, faultPartitionGaleraNode, faultKillInstance, faultPauseInstance,
	faultCommitLost, faultNetPartition, faultNetReset, faultNetLatency, faultNetSlowClose, faultNetBandwidth,
}

// faultWindow is a fault from its start to its healing.
type faultWindow struct {
	kind       string
	start, end time.Time
}

// faultWindows pairs each fault of kinds in the history with its next healing; a fault never
// healed lasts until the history's last event.
func faultWindows(events []*event, start time.Time, kinds []string) []faultWindow {
	at := func(e *event) time.Time { return start.Add(time.Duration(e.AtMs * float64(time.Millisecond))) }
	var out []faultWindow
	open := map[string][]int{}
	var last time.Time
	for _, e := range events {
		last = at(e)
		if e.Kind != kindFault {
			continue
		}
		if k, ok := strings.CutSuffix(e.Op, "_healed"); ok && slices.Contains(kinds, k) {
			if q := open[k]; len(q) > 0 {
				out[q[0]].end = at(e)
				open[k] = q[1:]
			}
			continue
		}
		if slices.Contains(kinds, e.Op) {
			open[e.Op] = append(open[e.Op], len(out))
			out = append(out, faultWindow{kind: e.Op, start: at(e)})
		}
	}
	for _, q := range open {
		for _, i := range q {
			out[i].end = last
		}
	}
	return out
}

// eventLag is when an event was created and when it got its place in the feed.
type eventLag struct {
	id, typ            string
	created, sequenced time.Time
}

// lagViolations names every event that waited longer than bound plus the faults of windows
// it waited through; it returns the longest wait too.
func lagViolations(lags []eventLag, windows []faultWindow, bound time.Duration) ([]string, time.Duration) {
	var vs []string
	var longest time.Duration
	for _, l := range lags {
		wait := l.sequenced.Sub(l.created)
		longest = max(longest, wait)
		allowed := bound
		var excuses []string
		for _, w := range windows {
			if w.start.Before(l.sequenced) && w.end.After(l.created.Add(-bound)) {
				allowed += w.end.Sub(w.start)
				excuses = append(excuses, fmt.Sprintf("%s %s–%s", w.kind, clockOf(w.start), clockOf(w.end)))
			}
		}
		if wait > allowed {
			why := "no fault of the feed's path meanwhile"
			if len(excuses) > 0 {
				why = "through " + strings.Join(excuses, ", ")
			}
			vs = append(vs, fmt.Sprintf("event %s (%s) created %s got its place in the feed %s later, at %s: more than %s allowed (%s plus the faults it waited through; %s)",
				l.id, l.typ, clockOf(l.created), wait.Round(time.Millisecond), clockOf(l.sequenced), allowed.Round(time.Millisecond), feedLagBound, why))
		}
	}
	return vs, longest
}

// clockOf is t as the time of day to the millisecond, UTC.
func clockOf(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// deliveryRow is the endpoint's delivery of one event, as oncepay ended it.
type deliveryRow struct {
	status   string
	attempts int
}

// deliveredViolations names every committed event whose delivery did not end succeeded, or
// whose requests the receiver answered none 2xx (an event it was never sent is
// webhooks_processed_once's).
func deliveredViolations(evs []committedEvent, deliveries map[string]deliveryRow, attempts []hookAttempt) []string {
	answered := map[string]int{}
	sent := map[string][]string{}
	for _, a := range attempts {
		sent[a.EventID] = append(sent[a.EventID], a.summary())
		if a.Answer >= 200 && a.Answer < 300 {
			answered[a.EventID]++
		}
	}
	var vs []string
	for _, e := range evs {
		d, ok := deliveries[e.id]
		switch {
		case !ok:
			vs = append(vs, fmt.Sprintf("event %s (%s) has no delivery to the receiver's endpoint; the receiver was sent it %d times: %s", e.id, e.typ, len(sent[e.id]), strings.Join(sent[e.id], "; ")))
		case d.status != "succeeded":
			vs = append(vs, fmt.Sprintf("event %s (%s): its delivery ended %s after %d attempts; the receiver was sent it %d times: %s", e.id, e.typ, d.status, d.attempts, len(sent[e.id]), strings.Join(sent[e.id], "; ")))
		case answered[e.id] == 0 && len(sent[e.id]) > 0:
			// (An event never sent at all is webhooks_processed_once's "never delivered".)
			vs = append(vs, fmt.Sprintf("event %s (%s): its delivery succeeded after %d attempts, but the receiver answered none of its %d requests 2xx: %s", e.id, e.typ, d.attempts, len(sent[e.id]), strings.Join(sent[e.id], "; ")))
		}
	}
	return vs
}

// summary is a request on one line: its id, arrival, answer and fault.
func (a hookAttempt) summary() string {
	s := fmt.Sprintf("%s at %s answered %d", a.ID, clockOf(a.At), a.Answer)
	if a.Fault != "" {
		s += " (" + a.Fault + ")"
	}
	if !a.SigValid {
		s += " (signature invalid)"
	}
	return s
}

// redeliveredSet is a redelivery as the checker holds it: when it was asked for, when its
// answer came, and the events it may have queued again (every event created in its range).
type redeliveredSet struct {
	at, done time.Time
	events   map[string]bool
}

// resendViolations names every request the receiver was sent for an event after oncepay had
// acted on a 2xx answer of that event — acked maps the id of each receiver request whose 2xx
// oncepay's delivery log recorded (the answer's body names its request) to that log line —
// unless an operator's redelivery of the event was asked for before the copy came and took
// effect after the acknowledged attempt was claimed: an attempt in flight when a redelivery
// commits is of the round before it, and the redelivery follows it even when it is answered
// 2xx (docs/contract.md, webhooks). claimed holds each acknowledged request's claim time from
// the delivery log (the database's clock); a request without one counts from its arrival. A
// 2xx the sender never recorded (the instance was killed -9 before it could, or the answer
// came after the attempt's timeout, as after a pause of the receiver) did not acknowledge
// anything, and the contract asks for the next attempt then.
func resendViolations(attempts []hookAttempt, acked map[string]string, claimed map[string]time.Time, reds []redeliveredSet) []string {
	byEvent := map[string][]hookAttempt{}
	for _, a := range attempts {
		byEvent[a.EventID] = append(byEvent[a.EventID], a)
	}
	ids := slices.Sorted(maps.Keys(byEvent))
	var vs []string
	for _, id := range ids {
		as := byEvent[id]
		slices.SortStableFunc(as, func(a, b hookAttempt) int { return a.At.Compare(b.At) })
		var ack *hookAttempt
		for i := range as {
			a := &as[i]
			if ack != nil {
				since := ack.At
				if c, ok := claimed[ack.ID]; ok && c.Before(since) {
					since = c
				}
				for _, r := range reds {
					// Asked for before the copy came, and in effect after the acknowledged
					// attempt was claimed.
					if r.events[id] && r.done.After(since) && !r.at.After(a.At) {
						ack = nil // the operator asked for it again: a new round
						break
					}
				}
			}
			// A request sent before the acknowledged attempt but read after it (the stopped
			// receiver's backlog has no order) is no copy.
			if ack != nil && !sentBefore(*a, *ack) {
				when := "after"
				if a.At.Before(ack.Done) {
					when = "while it was still being answered (two at once), before"
				}
				vs = append(vs, fmt.Sprintf("event %s was sent again %s its 2xx was acknowledged: request %s (oncepay's log: %s), then %s; every request: %s",
					id, when, ack.summary(), acked[ack.ID], a.summary(), summaries(as)))
			}
			if _, ok := acked[a.ID]; ok {
				ack = a
			}
		}
	}
	return vs
}

// sentBefore reports whether a, handled by the receiver after ack, was sent before it: a
// request a pause held (in flight when the receiver process stopped, or queued in its backlog
// meanwhile) whose attempt number is smaller than the acknowledged one's. A copy sent after
// the acknowledgement has a larger attempt number (each claim counts one), and one sent beside
// it by a second sender does too, so neither is excused.
func sentBefore(a, ack hookAttempt) bool {
	return a.Attempt > 0 && ack.Attempt > 0 && a.Attempt < ack.Attempt && strings.Contains(a.Fault, "paused")
}

func summaries(as []hookAttempt) string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.summary()
	}
	return strings.Join(out, "; ")
}

// requestOf is the receiver's request id in a 2xx answer's body ({"duplicate":…,"request":"r7"}).
func requestOf(snippet string) string {
	var b struct {
		Request string `json:"request"`
	}
	if json.Unmarshal([]byte(snippet), &b) != nil {
		return ""
	}
	return b.Request
}

// checkWebhookDeliveries holds the webhook invariants of issue 27 (docs/chaos.md): every event
// delivered, no acknowledged attempt sent again outside a redelivery, and the feed's lag.
func (c *checker) checkWebhookDeliveries(ctx context.Context, evs []committedEvent) error {
	h := c.hooks
	// The id as a number: a BIGINT compared with a string is compared as a DOUBLE, which
	// cannot tell 19-digit ids apart.
	endpoint, err := strconv.ParseInt(h.endpoint, 10, 64)
	if err != nil {
		return fmt.Errorf("the receiver's endpoint id %q: %w", h.endpoint, err)
	}
	deliveries := map[string]deliveryRow{}
	rows, err := c.db.QueryContext(ctx, `SELECT CAST(event_id AS CHAR), status, attempts FROM webhook_deliveries WHERE endpoint_id = ?`, endpoint)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id string
		var d deliveryRow
		if err := rows.Scan(&id, &d.status, &d.attempts); err != nil {
			rows.Close()
			return err
		}
		deliveries[id] = d
	}
	rows.Close()
	c.add("webhooks_delivered", "every committed event's delivery ended succeeded, and the receiver answered one of its requests 2xx", len(evs),
		deliveredViolations(evs, deliveries, h.attempts))

	acked, claimed := map[string]string{}, map[string]time.Time{}
	rows, err = c.db.QueryContext(ctx, `SELECT CAST(event_id AS CHAR), attempt, status_code, claimed_at, sent_at, COALESCE(response_snippet, '') FROM webhook_attempts WHERE endpoint_id = ? AND status_code BETWEEN 200 AND 299`, endpoint)
	if err != nil {
		return err
	}
	for rows.Next() {
		var id, snippet string
		var attempt, status int
		var claim sql.NullTime
		var sent time.Time
		if err := rows.Scan(&id, &attempt, &status, &claim, &sent, &snippet); err != nil {
			rows.Close()
			return err
		}
		if r := requestOf(snippet); r != "" {
			acked[r] = fmt.Sprintf("attempt %d of event %s, claimed at %s, signed at %s, answered %d", attempt, id, clockOf(claim.Time), clockOf(sent), status)
			if claim.Valid {
				claimed[r] = claim.Time
			}
		}
	}
	rows.Close()
	var reds []redeliveredSet
	for _, r := range h.redeliveries {
		set := redeliveredSet{at: r.At, done: r.Done, events: map[string]bool{}}
		rows, err := c.db.QueryContext(ctx, `SELECT CAST(id AS CHAR) FROM events WHERE created_at >= ? AND created_at < ?`, r.From, r.To)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			set.events[id] = true
		}
		rows.Close()
		reds = append(reds, set)
	}
	c.add("webhooks_no_resend_after_2xx", "no event was sent again after oncepay acted on a 2xx of it, but by an operator's redelivery", len(acked),
		resendViolations(h.attempts, acked, claimed, reds))

	// The feed's lag: each event's creation (on its instance's clock; the skewed instance's
	// taken back by its known offset) to its fan-out, which stamps the delivery's created_at
	// with the database's clock in the fan-out transaction, right after the sequencing one
	// (never before the event's place in the feed).
	var lags []eventLag
	rows, err = c.db.QueryContext(ctx, `SELECT CAST(e.id AS CHAR), e.type, e.created_at, d.created_at FROM events e JOIN webhook_deliveries d ON d.event_id = e.id AND d.endpoint_id = ?`, endpoint)
	if err != nil {
		return err
	}
	for rows.Next() {
		var l eventLag
		if err := rows.Scan(&l.id, &l.typ, &l.created, &l.sequenced); err != nil {
			rows.Close()
			return err
		}
		if l.sequenced.Sub(l.created) < -clockSkew/2 {
			l.created = l.created.Add(-clockSkew)
		}
		lags = append(lags, l)
	}
	rows.Close()
	vs, longest := lagViolations(lags, faultWindows(c.events, c.start, feedStallFaults), feedLagBound)
	c.feedLag = longest
	c.add("webhook_feed_lag", fmt.Sprintf("every event got its place in the feed within %s of its creation, plus the faults of the feed's own path it waited through", feedLagBound), len(lags), vs)
	return nil
}
