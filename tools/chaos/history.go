package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Event kinds of the history.
const (
	kindHTTP  = "http"  // one HTTP request to one instance and its answer (or error)
	kindKafka = "kafka" // one message published to payment.notifications
	kindFault = "fault" // a fault injected, or healed
	kindNote  = "note"  // a phase of the run (start, settle, check)
	// kindGateway is a request the gateway sent to more than one instance (a gateway retry,
	// I11), read from its access log after the run: a client's or the channel's.
	kindGateway = "gateway"
)

// event is one line of the history: every request, answer and timing, every message
// published and every fault, in the order they finished.
type event struct {
	Seq  int64   `json:"seq"`
	AtMs float64 `json:"at_ms"` // since the run started, when the event finished
	Kind string  `json:"kind"`
	// Op names the business operation a delivery belongs to: order, pay, cancel, refund,
	// recharge, notify (a payment notification copy), recharge_notify, job.
	Op   string `json:"op,omitempty"`
	User string `json:"user,omitempty"`
	// Key is the business key of the delivery: the Idempotency-Key, or the trade_no of a
	// notification. Every copy of one write carries the same key.
	Key    string `json:"key,omitempty"`
	Inst   int    `json:"inst,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Req    string `json:"req,omitempty"`
	Status int    `json:"status,omitempty"`
	// Outcome is the Idempotency-Outcome header; Replayed is Idempotent-Replayed: true.
	Outcome  string `json:"outcome,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	// Degraded is the Idempotency-Degraded header: the layers that stepped aside without Redis.
	Degraded string  `json:"degraded,omitempty"`
	Resp     string  `json:"resp,omitempty"`
	Err      string  `json:"err,omitempty"`
	Ms       float64 `json:"ms,omitempty"`
	Detail   string  `json:"detail,omitempty"`
	// ReqID is the X-Request-Id a client delivery carried (the gateway keeps it); on a
	// gateway event, the request id of the request nginx retried.
	ReqID string `json:"request_id,omitempty"`
	// Via lists the instances the gateway sent the request to, in order ($upstream_addr),
	// and GatewayRetry says it was more than one: the copy was retried by the gateway.
	Via          string `json:"via,omitempty"`
	GatewayRetry bool   `json:"gateway_retry,omitempty"`
}

// line renders e on one line, for a violation's evidence.
func (e *event) line() string {
	switch e.Kind {
	case kindHTTP:
		answer := fmt.Sprintf("%d %s", e.Status, e.Outcome)
		if e.Err != "" {
			answer = "error " + e.Err
		}
		via := ""
		if e.GatewayRetry {
			via = " (gateway retry via " + e.Via + ")"
		}
		return fmt.Sprintf("#%d %.0fms %s oncepay-%d%s %s %s key=%s %s → %s %s (%.0fms)", e.Seq, e.AtMs, e.Op, e.Inst, via, e.Method, e.Path, e.Key, clip(e.Req), answer, clip(e.Resp), e.Ms)
	case kindKafka:
		return fmt.Sprintf("#%d %.0fms kafka %s key=%s %s %s", e.Seq, e.AtMs, e.Op, e.Key, clip(e.Req), e.Err)
	}
	return fmt.Sprintf("#%d %.0fms %s %s %s", e.Seq, e.AtMs, e.Kind, e.Op, e.Detail)
}

// final reports whether an HTTP answer settles its write: a client must retry a network
// error, a timeout, a 5xx and a 409 idempotency_key_in_use; every other answer is final.
func (e *event) final() bool {
	if e.Kind != kindHTTP || e.Err != "" || e.Status == 0 || e.Status >= 500 {
		return false
	}
	return e.Outcome != "in_progress"
}

// history collects events in memory for the checker and writes them as JSON lines.
type history struct {
	mu     sync.Mutex
	start  time.Time
	events []*event
	f      *os.File
	w      *bufio.Writer
}

func newHistory(path string) (*history, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &history{start: time.Now(), f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

// add stamps e and appends it.
func (h *history) add(e *event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.Seq = int64(len(h.events) + 1)
	e.AtMs = float64(time.Since(h.start).Microseconds()) / 1000
	h.events = append(h.events, e)
	b, _ := json.Marshal(e)
	_, _ = h.w.Write(append(b, '\n'))
}

// note records a phase of the run.
func (h *history) note(detail string) { h.add(&event{Kind: kindNote, Detail: detail}) }

// snapshot returns the events so far.
func (h *history) snapshot() []*event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*event(nil), h.events...)
}

// rewrite writes the whole history again, for the fields learnt after the run
// (annotateGateway): the file then holds every event as it is now.
func (h *history) rewrite() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.f.Seek(0, 0); err != nil {
		return err
	}
	if err := h.f.Truncate(0); err != nil {
		return err
	}
	h.w.Reset(h.f)
	for _, e := range h.events {
		b, _ := json.Marshal(e)
		_, _ = h.w.Write(append(b, '\n'))
	}
	return h.w.Flush()
}

func (h *history) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.w.Flush(); err != nil {
		return err
	}
	return h.f.Close()
}
