package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	oncepay "github.com/oncepay/oncepay/client"
)

// The merchant's half of the chaos run. A user write — an order, a cancel, a payment, a
// refund, a recharge — is retried by oncepay's Go client (package client), as a merchant's
// program would retry it: one Idempotency-Key for every attempt, the same bytes, exponential
// backoff with jitter, the Retry-After of a 409 in_progress or a 503 honoured, a total
// deadline. Underneath it, the run's own transport sends each attempt the way deliver sends a
// copy (through the gateway) and records it in the history exactly as deliver records a
// delivery, so the checker sees every attempt. The channel's reports keep settle: a channel is not a merchant.

// The client's retry schedule: settle's (settleBackoff), so that a write and a report met by
// one fault come back alike.
const (
	clientFirstPause = 150 * time.Millisecond
	clientMaxPause   = 4800 * time.Millisecond
	clientJitter     = 33
)

// write delivers a user write until its answer is final: first copies copies at once to
// distinct instances (fanout: the same request arriving by several paths), then oncepay's
// client retries it under its key, each attempt through the gateway, until settleTimeout. It
// returns the final answer's event, or nil when none came.
func (wl *workload) write(ctx context.Context, c call, copies int) *event {
	if e := wl.fanout(ctx, c, copies); e != nil {
		return e
	}
	cl, err := oncepay.New(oncepay.Config{
		// The host is a placeholder: spread sends each attempt on as deliver sends a copy.
		BaseURL: "http://oncepay.chaos", APIKey: c.bearer, Transport: spread{wl},
		AttemptTimeout: clientTimeout, Deadline: settleTimeout,
		InitialBackoff: clientFirstPause, MaxBackoff: clientMaxPause, JitterPercent: clientJitter,
	})
	if err != nil {
		wl.h.add(&event{Kind: kindNote, Op: c.op, User: c.user, Key: c.key, Detail: "client: " + err.Error()})
		return nil
	}
	var body any
	if len(c.body) > 0 {
		body = c.body
	}
	wc := &writeCall{c: c}
	_, err = cl.Do(context.WithValue(ctx, writeCallKey{}, wc), oncepay.Request{Method: c.method, Path: c.path, Body: body, Keyed: true}, oncepay.WithKey(c.idemKey))
	var p *oncepay.Problem
	if err != nil && (errors.Is(err, oncepay.ErrIndefinite) || !errors.As(err, &p)) {
		return nil // no final answer: the write is left as it is, like settle's
	}
	return wc.lastEvent()
}

// writeCallKey is the context key under which write hands spread the call an attempt is of.
type writeCallKey struct{}

// writeCall is one user write the client is retrying, and the event of its last attempt.
type writeCall struct {
	c    call
	mu   sync.Mutex
	last *event
}

func (wc *writeCall) setLast(e *event) {
	wc.mu.Lock()
	wc.last = e
	wc.mu.Unlock()
}

func (wc *writeCall) lastEvent() *event {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	return wc.last
}

// spread is the client's transport. Every attempt goes where deliver sends a copy — through
// the gateway, which picks an instance in turn, or, in a world without one (tests), to a random
// instance — under an X-Request-Id of its own, by which annotateGateway finds it in nginx's log;
// it is recorded in the history like a delivery. The client's own request id, the same on
// every attempt of a write, is replaced: the run joins each delivery to the log by its id.
type spread struct{ wl *workload }

// RoundTrip sends req on and records the attempt.
func (s spread) RoundTrip(req *http.Request) (*http.Response, error) {
	wl := s.wl
	e := &event{Kind: kindHTTP, Method: req.Method, Path: req.URL.Path,
		ReqID: fmt.Sprintf("chaos-%d-%s", wl.deliveries.Add(1), randomHex(4))}
	target := ""
	if wl.w.gw != nil {
		target = wl.w.gw.base()
	} else {
		e.Inst = wl.randomInst()
		target = wl.w.insts[e.Inst-1].base
	}
	base, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = base.Scheme, base.Host, ""
	out.Header.Set("X-Request-Id", e.ReqID)
	wc, _ := req.Context().Value(writeCallKey{}).(*writeCall)
	if wc != nil {
		e.Op, e.User, e.Key, e.Req = wc.c.op, wc.c.user, wc.c.key, string(wc.c.body)
	}
	// The history keeps the key the client sent, so that the checker judges the client too.
	if k := req.Header.Get(oncepay.HeaderKey); k != "" {
		e.Key = k
	}
	start := time.Now()
	defer func() {
		e.Ms = float64(time.Since(start).Microseconds()) / 1000
		wl.h.add(e)
		if wc != nil {
			wc.setLast(e)
		}
	}()
	resp, err := wl.transport().RoundTrip(out)
	if err != nil {
		e.Err = shortErr(err)
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err != nil {
		e.Err = shortErr(err)
		return nil, err
	}
	e.Status, e.Resp = resp.StatusCode, string(b)
	e.Outcome = resp.Header.Get("Idempotency-Outcome")
	e.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// transport is the RoundTripper under the workload's HTTP client.
func (wl *workload) transport() http.RoundTripper {
	if wl.http != nil && wl.http.Transport != nil {
		return wl.http.Transport
	}
	return http.DefaultTransport
}
