package webhook

import (
	"time"
)

// class is what a sender knows of an endpoint from its own attempts: it decides how many
// attempts the endpoint may have in flight and which share of the sender's bound it draws on.
type class int

const (
	// proven: the endpoint's last attempt got an answer (any status, quickly or not). It may
	// have PerEndpoint attempts in flight, and its claims are made first in every round.
	proven class = iota
	// slow: the endpoint's last attempt got an answer, but only after more than half the
	// attempt timeout. It keeps PerEndpoint attempts in flight, and draws on the same half of
	// MaxInFlight as unheard and failing endpoints: receivers that answer just within the
	// timeout, 8 attempts each, took every slot of the sender in waves that began and ended
	// together, and a healthy receiver's events waited for each wave's end (hostile pass of
	// issue 27: p50 4 s with 8 of them against 32 slots, TestSlowAnsweringEndpointsDelayOnlyThemselves).
	slow
	// unheard: no attempt of this sender has ended yet (a new endpoint, or a new instance).
	// It may have one attempt in flight until the first answer proves it (a slow start), and
	// all unheard, slow and failing endpoints together hold at most half of MaxInFlight: 150
	// endpoints that hang from the start would otherwise take 8 slots each before the first
	// of their attempts times out.
	unheard
	// failing: its last attempt got no answer — a timeout, a refused or reset connection, a
	// TLS or DNS failure, an address the policy refuses. Its circuit is open: one attempt at a
	// time, none before its back-off has passed, and all failing endpoints together hold at
	// most a quarter of MaxInFlight.
	failing
)

// health is one endpoint's entry in the sender's books.
type health struct {
	busy      int       // attempts in flight: claimed, not yet recorded
	heard     bool      // the last attempt that ended got an answer
	slow      bool      // and that answer took more than half the attempt timeout
	failures  int       // the attempt that opened the circuit and each probe that failed since
	notBefore time.Time // while failing: no attempt starts before
}

func (h *health) class() class {
	switch {
	case h.failures > 0:
		return failing
	case h.heard && h.slow:
		return slow
	case h.heard:
		return proven
	}
	return unheard
}

// room is how many more attempts the sender may start to the endpoint of h at now: its own
// limit, then the sender's bound and the share its class draws on. Called with s.mu held.
func (s *Sender) room(h *health, now time.Time) int {
	c := h.class()
	n := max(1, s.PerEndpoint) - h.busy
	switch c {
	case failing:
		if now.Before(h.notBefore) {
			return 0
		}
		n = 1 - h.busy
	case unheard:
		n = 1 - h.busy
	}
	n = min(n, s.MaxInFlight-s.inFlight)
	if c != proven {
		n = min(n, s.MaxInFlight/2-s.unproven)
	}
	if c == failing {
		n = min(n, max(1, s.MaxInFlight/4)-s.failingHeld)
	}
	// An endpoint's first attempt in flight may take any free slot; its further ones (up to
	// PerEndpoint) draw on half of MaxInFlight, shared by every endpoint, so that an endpoint
	// with nothing in flight always finds a slot while fewer than half as many endpoints as
	// MaxInFlight are busy. Without it, receivers answering just under the slow mark with a
	// backlog, 8 attempts each, took every slot in waves (hostile pass of issue 27).
	burst := max(0, s.MaxInFlight/2-s.extra)
	if h.busy == 0 {
		n = min(n, 1+burst)
	} else {
		n = min(n, burst)
	}
	return max(0, n)
}

// entry is endpoint's health, made on first use. Called with s.mu held.
func (s *Sender) entry(endpoint int64) *health {
	h := s.health[endpoint]
	if h == nil {
		h = &health{}
		s.health[endpoint] = h
	}
	return h
}

// free is how many more attempts this sender may start to endpoint now (at most BatchSize).
func (s *Sender) free(endpoint int64, now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return min(s.room(s.entry(endpoint), now), s.BatchSize)
}

// probing reports whether endpoint's next attempt is a probe: its circuit is open.
func (s *Sender) probing(endpoint int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.entry(endpoint).class() == failing
}

// full lists the endpoints that have no room now, for the claim's query to leave out.
func (s *Sender) full(now time.Time) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int64
	for ep, h := range s.health {
		if s.room(h, now) == 0 {
			out = append(out, ep)
		}
	}
	return out
}

// reserve takes one slot of endpoint if it has room, and reports the class it was taken
// under, which release gives it back to.
func (s *Sender) reserve(endpoint int64, now time.Time) (class, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.entry(endpoint)
	if s.room(h, now) == 0 {
		return 0, false
	}
	c := h.class()
	if h.busy > 0 {
		s.extra++
	}
	h.busy++
	s.inFlight++
	if c != proven {
		s.unproven++
	}
	if c == failing {
		s.failingHeld++
	}
	return c, true
}

// release gives back a slot reserve took under c.
func (s *Sender) release(endpoint int64, c class) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.entry(endpoint)
	if h.busy > 1 {
		s.extra--
	}
	h.busy--
	s.inFlight--
	if c != proven {
		s.unproven--
	}
	if c == failing {
		s.failingHeld--
	}
}

// paced enters how long an attempt that got an answer took: more than half the attempt
// timeout makes endpoint slow, a quicker answer proven again.
func (s *Sender) paced(endpoint int64, latency time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entry(endpoint).slow = latency > s.Timeout/2
}

// observe enters an attempt's outcome in endpoint's health: an answer of any status closes
// its circuit; no answer opens it, or keeps it open with a back-off doubled from Backoff up
// to MaxBackoff and jittered, so that a receiver that hangs or is gone is tried once per
// back-off, not once per event, and endpoints that failed together are not tried together. An attempt this sender abandoned (its lease lost, the instance stopping)
// says nothing of the receiver and is not entered. Only the attempt that opens the circuit
// and the probes sent while it is open count towards the back-off: the 8 attempts in flight
// when a receiver died are one failure, not 8 doublings.
func (s *Sender) observe(endpoint int64, claimedAs class, outcome string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.entry(endpoint)
	if outcome != OutcomeTimeout && outcome != OutcomeError {
		if h.failures > 0 {
			s.Metrics.circuitOpen(endpoint, false)
		}
		h.heard, h.failures = true, 0
		return
	}
	h.heard = false
	s.Metrics.circuitOpen(endpoint, true)
	if h.failures > 0 && claimedAs != failing {
		return // in flight before the circuit opened: the same outage
	}
	h.failures++
	pause := s.Backoff
	for i := 1; i < h.failures && pause < s.MaxBackoff; i++ {
		pause *= 2
	}
	h.notBefore = now.Add(s.Jitter(min(pause, s.MaxBackoff)))
}
