package webhook

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestCircuit: an endpoint not heard from gets one attempt at a time; an answer proves it (8);
// the attempts in flight when it stops answering open its circuit once, with one back-off;
// each failed probe doubles the back-off up to MaxBackoff; any answer closes the circuit.
func TestCircuit(t *testing.T) {
	s := NewSender(nil, nil, nil, nil, time.Second)
	s.Jitter = func(d time.Duration) time.Duration { return d }
	s.Metrics = NewMetrics(prometheus.NewRegistry(), nil)
	open := func() float64 {
		var m dto.Metric
		if err := s.Metrics.circuit.WithLabelValues("7").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
	now := time.Now()
	const ep = 7
	if n := s.free(ep, now); n != 1 {
		t.Fatalf("unheard: room %d, want 1", n)
	}
	s.observe(ep, unheard, OutcomeStatus, now) // a 500 is an answer
	if n := s.free(ep, now); n != 8 {
		t.Fatalf("proven: room %d, want 8", n)
	}
	var held []class
	for range 8 {
		c, ok := s.reserve(ep, now)
		if !ok {
			t.Fatal("no room for 8")
		}
		held = append(held, c)
	}
	for _, c := range held {
		s.observe(ep, c, OutcomeTimeout, now)
		s.release(ep, c)
	}
	if open() != 1 {
		t.Fatal("oncepay_webhook_circuit_open is not 1 with the circuit open")
	}
	if n := s.free(ep, now.Add(900*time.Millisecond)); n != 0 {
		t.Fatalf("open circuit within its 1 s back-off: room %d, want 0", n)
	}
	if n := s.free(ep, now.Add(time.Second)); n != 1 {
		t.Fatalf("open circuit after its back-off: room %d, want 1 (8 failures in flight doubled it)", n)
	}
	// Failed probes: 2 s, 4 s, …, capped at MaxBackoff.
	at := now.Add(time.Second)
	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		c, ok := s.reserve(ep, at)
		if !ok || c != failing {
			t.Fatalf("probe at %v: ok %v class %v", at.Sub(now), ok, c)
		}
		if _, ok := s.reserve(ep, at); ok {
			t.Fatal("a second attempt beside the probe")
		}
		s.observe(ep, c, OutcomeError, at)
		s.release(ep, c)
		if n := s.free(ep, at.Add(want-time.Millisecond)); n != 0 {
			t.Fatalf("back-off after the probe at %v shorter than %v", at.Sub(now), want)
		}
		at = at.Add(want)
	}
	s.observe(ep, failing, OutcomeOK, at)
	if n := s.free(ep, at); n != 8 {
		t.Fatalf("closed again: room %d, want 8", n)
	}
	if open() != 0 {
		t.Fatal("oncepay_webhook_circuit_open is not 0 once an answer closed the circuit")
	}
}

// TestFailingShare: failing endpoints together hold at most a quarter of MaxInFlight, unheard
// and failing ones half, and the rest is left to proven ones.
func TestFailingShare(t *testing.T) {
	s := NewSender(nil, nil, nil, nil, time.Second)
	s.MaxInFlight = 16
	now := time.Now()
	for ep := range int64(20) {
		s.entry(ep).failures = 1 // open circuits, back-off passed
	}
	got := 0
	for ep := range int64(20) {
		if _, ok := s.reserve(ep, now); ok {
			got++
		}
	}
	if got != 4 {
		t.Fatalf("failing endpoints took %d slots of 16, want 4", got)
	}
	for ep := int64(100); ep < 120; ep++ {
		if _, ok := s.reserve(ep, now); ok {
			got++
		}
	}
	if got != 8 {
		t.Fatalf("failing and unheard endpoints took %d slots of 16, want 8", got)
	}
	s.entry(200).heard = true
	if n := s.free(200, now); n != 8 {
		t.Fatalf("a proven endpoint has room %d, want 8", n)
	}
}
