package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
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
