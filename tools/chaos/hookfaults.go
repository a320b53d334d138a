package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"time"
)

// The merchant receiver's faults (docs/chaos.md, "The merchant's receiver"). The receiver is a
// process of its own (receiverproc.go): a kill is SIGKILL — the kernel closes its sockets,
// every answer in flight is lost — and a start of the same command on the same port 0.5–2.5 s
// later; a pause is SIGSTOP past the attempt timeout, then SIGCONT.
const (
	faultKillReceiver  = "kill_receiver"  // SIGKILL the receiver mid-traffic, start it again on its port 0.5–2.5 s later
	faultPauseReceiver = "pause_receiver" // SIGSTOP the receiver past the attempt timeout, then SIGCONT
)

// The operator's webhook actions the run takes once each, mid-run, recorded like faults.
const (
	opRotateSecret   = "rotate_secret"   // POST …/rotate-secret: a new secret, the old one signing beside it for rotationGrace
	opRedeliverRange = "redeliver_range" // POST …/redeliver {from, to}: every event created in the range sent again
)

// rotationGrace is the grace of the run's rotation: short, so that the run sees attempts
// signed with both secrets and, after it, with the new one alone.
const rotationGrace = 15 * time.Second

// receiverFaults are the receiver's faults, in every mode's rotation.
var receiverFaults = []string{faultKillReceiver, faultPauseReceiver}

// ownFaults are the faults a run of this mode must inject, whatever its length: the receiver's
// and, with -redis-cluster, the failovers, with -galera, the node kills and partitions. The
// rotation's first round starts with them (faulter.run).
func (f *faulter) ownFaults(cluster bool) []string {
	own := slices.Clone(receiverFaults)
	if cluster {
		own = append(own, redisClusterFaults...)
	}
	if f.w.galera != nil {
		own = append(own, faultKillGaleraNode, faultPartitionGaleraNode)
	}
	return own
}

// firstRound is the order of the rotation's first round: the own faults first, shuffled, then
// the others, shuffled. A short run has about 10 faults of 14 or so kinds; a shuffled round
// alone left the failovers out of a short -redis-cluster run (issue 27).
func firstRound(rotation, own []string) []string {
	var head, tail []string
	for _, k := range rotation {
		if slices.Contains(own, k) {
			head = append(head, k)
		} else {
			tail = append(tail, k)
		}
	}
	mrand.Shuffle(len(head), func(i, j int) { head[i], head[j] = head[j], head[i] })
	mrand.Shuffle(len(tail), func(i, j int) { tail[i], tail[j] = tail[j], tail[i] })
	return append(head, tail...)
}

// missingFaults is the own faults counts has none of.
func missingFaults(own []string, counts map[string]int) []string {
	var out []string
	for _, k := range own {
		if counts[k] == 0 {
			out = append(out, k)
		}
	}
	return out
}

// injectReceiver runs a receiver fault to its end, and reports whether kind was one.
func (f *faulter) injectReceiver(ctx context.Context, kind string) bool {
	m := f.m
	if m == nil {
		return false
	}
	switch kind {
	case faultKillReceiver:
		m.kill()
		f.record(kind, "the receiver process killed with SIGKILL, answers in flight lost", nil)
		sleepCtx(ctx, time.Duration(500+mrand.IntN(2000))*time.Millisecond)
		err := m.restart()
		f.record(kind+"_healed", "the receiver process started again on "+m.addr, err)
	case faultPauseReceiver:
		pause := hookTimeout + time.Duration(1000+mrand.IntN(1500))*time.Millisecond
		m.pause()
		f.record(kind, fmt.Sprintf("the receiver process stopped with SIGSTOP for %s (attempt timeout %s)", pause, hookTimeout), nil)
		sleepCtx(context.WithoutCancel(ctx), pause)
		m.resume()
		f.record(kind+"_healed", "the receiver process continued with SIGCONT", nil)
	default:
		return false
	}
	return true
}

// redelivery is an operator's redelivery of a time range, as the checker needs it: when it
// was asked for and when its answer came (it took effect in between), and the range of the
// events' created_at it named.
type redelivery struct {
	At, Done time.Time
	From, To time.Time
	Queued   int
}

// operator is the merchant's operator: mid-run it rotates the endpoint's secret and redelivers
// a range of events, through oncepay's admin API, as a person would during an incident.
type operator struct {
	w        *world
	h        *history
	m        *merchant
	endpoint string
	// count counts an action among the run's faults (faulter.count).
	count func(string)

	redeliveries []redelivery
}

// run rotates the secret at 30 % of d and redelivers the events created between 10 % of d and
// 5 s ago at 55 %.
func (o *operator) run(ctx context.Context, start time.Time, d time.Duration) {
	sleepCtx(ctx, time.Until(start.Add(d*30/100)))
	if ctx.Err() != nil {
		return
	}
	o.rotate(ctx)
	sleepCtx(ctx, time.Until(start.Add(d*55/100)))
	if ctx.Err() != nil {
		return
	}
	o.redeliver(ctx, start.Add(d*10/100).UTC(), time.Now().Add(-5*time.Second).UTC())
}

// rotate rotates the endpoint's secret and hands the new one to the receiver, which accepts
// the old one until the grace ends.
func (o *operator) rotate(ctx context.Context) {
	body := fmt.Appendf(nil, `{"grace":%q}`, rotationGrace.String())
	at := time.Now()
	b, err := o.call(ctx, "/v1/admin/webhook-endpoints/"+o.endpoint+"/rotate-secret", body, http.StatusOK)
	var out struct {
		Secret string `json:"secret"`
	}
	if err == nil {
		if err = json.Unmarshal(b, &out); err == nil && out.Secret == "" {
			err = fmt.Errorf("no secret in %s", b)
		}
	}
	if err == nil {
		o.m.rotated(out.Secret, at.Add(rotationGrace))
	}
	o.count(opRotateSecret)
	o.h.add(faultEvent(opRotateSecret, fmt.Sprintf("the endpoint's secret rotated; the old one signs beside it for %s", rotationGrace), err))
}

// redeliver asks for the endpoint's events created in [from, to) again.
func (o *operator) redeliver(ctx context.Context, from, to time.Time) {
	body := fmt.Appendf(nil, `{"from":%q,"to":%q}`, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	r := redelivery{At: time.Now(), From: from, To: to}
	b, err := o.call(ctx, "/v1/admin/webhook-endpoints/"+o.endpoint+"/redeliver", body, http.StatusAccepted)
	var out struct {
		Queued int `json:"queued"`
	}
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	r.Queued, r.Done = out.Queued, time.Now()
	// Recorded even when the call failed: it may have queued them, and the checker must not
	// hold a redelivered copy against the sender.
	o.redeliveries = append(o.redeliveries, r)
	o.count(opRedeliverRange)
	o.h.add(faultEvent(opRedeliverRange, fmt.Sprintf("the events created in [%s, %s) redelivered: %d queued",
		from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), out.Queued), err))
}

// call POSTs body to path under one Idempotency-Key, instance after instance, until one
// answers want (a retry with the key rotates or queues once) or 30 s have passed.
func (o *operator) call(ctx context.Context, path string, body []byte, want int) ([]byte, error) {
	key := "chaos-operator-" + randomHex(8)
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		in := o.w.insts[i%len(o.w.insts)]
		b, status, err := o.post(ctx, in.base+path, key, body)
		switch {
		case err == nil && status == want:
			return b, nil
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("%d %s", status, b)
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	return nil, fmt.Errorf("POST %s: no %d within 30 s, last: %s", path, want, last)
}

func (o *operator) post(ctx context.Context, url, key string, body []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+o.w.adminKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resp.StatusCode, err
}

// faultEvent is a fault event of the history.
func faultEvent(kind, detail string, err error) *event {
	e := &event{Kind: kindFault, Op: kind, Detail: detail}
	if err != nil {
		e.Err = err.Error()
	}
	return e
}
