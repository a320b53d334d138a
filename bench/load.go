package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"
)

// target is what the load generator sends: POST url with body, a fresh or fixed
// Idempotency-Key, and any static headers.
type target struct {
	url    string
	body   []byte
	header http.Header
	// key returns the Idempotency-Key of the next request.
	key func() string
	// check, when set, is what a 2xx answer must also pass to count as a success.
	check func(answer) error
	// cpu, when set, reads the CPU time used so far by the processes of the variant, by
	// name; the stats then carry what each used during the measured period.
	cpu func() (map[string]time.Duration, error)
}

// answer is one response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// send sends one request of t with client and reads the whole answer.
func (t target) send(ctx context.Context, client *http.Client) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(t.body))
	if err != nil {
		return answer{}, err
	}
	for k, v := range t.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerKey, t.key())
	res, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, header: res.Header, body: body}, err
}

// stats are the figures of one variant's measured period.
type stats struct {
	ok      int
	elapsed time.Duration
	p50     time.Duration
	p99     time.Duration
	// errors counts the failed requests by reason ("409 {...}", "check: ...", "transport: ...").
	errors map[string]int
	// cpu is the CPU time each of the target's processes used during the measured period;
	// cpuErr is why it could not be read.
	cpu    map[string]time.Duration
	cpuErr error
	// latencies are the successful requests' latencies, sorted: merge needs them.
	latencies []time.Duration
}

// merge adds the figures of b, another chunk of the same variant, to those of s: the counts,
// times and CPU add up, the percentiles are those of both chunks' latencies together.
func (s stats) merge(b stats) stats {
	if s.errors == nil {
		return b
	}
	out := stats{ok: s.ok + b.ok, elapsed: s.elapsed + b.elapsed, errors: maps.Clone(s.errors), cpuErr: errors.Join(s.cpuErr, b.cpuErr)}
	for reason, n := range b.errors {
		out.errors[reason] += n
	}
	if s.cpu != nil && b.cpu != nil {
		out.cpu = maps.Clone(s.cpu)
		for name, d := range b.cpu {
			out.cpu[name] += d
		}
	}
	out.latencies = append(slices.Clone(s.latencies), b.latencies...)
	slices.Sort(out.latencies)
	out.p50 = percentile(out.latencies, 0.50)
	out.p99 = percentile(out.latencies, 0.99)
	return out
}

// cpuPerRequest is the CPU time process name used per successful request.
func (s stats) cpuPerRequest(name string) (time.Duration, bool) {
	d, ok := s.cpu[name]
	if !ok || s.ok == 0 {
		return 0, false
	}
	return d / time.Duration(s.ok), true
}

// rate is the successful requests per second.
func (s stats) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ok) / s.elapsed.Seconds()
}

// failed is the number of failed requests.
func (s stats) failed() int {
	n := 0
	for _, c := range s.errors {
		n += c
	}
	return n
}

// newClient returns a keep-alive client that keeps an idle connection for each of conns
// concurrent requests.
func newClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        conns * 2,
			MaxIdleConnsPerHost: conns * 2,
			IdleConnTimeout:     60 * time.Second,
			DisableCompression:  true,
		},
	}
}

// warmupOf is how long a variant runs unmeasured before its measured period, so that every
// variant starts with open connections and a warm pool.
func warmupOf(d time.Duration) time.Duration { return min(d/5, time.Second) }

// measure warms t up, then runs conc workers against it for d and returns the figures of the
// measured period only.
func measure(ctx context.Context, t target, conc int, d time.Duration) stats {
	client := newClient(conc)
	defer client.CloseIdleConnections()
	load(ctx, t, client, conc, warmupOf(d))
	if t.cpu == nil {
		return load(ctx, t, client, conc, d)
	}
	before, err := t.cpu()
	s := load(ctx, t, client, conc, d)
	after, err2 := t.cpu()
	if s.cpuErr = errors.Join(err, err2); s.cpuErr == nil {
		s.cpu = map[string]time.Duration{}
		for name, d := range after {
			s.cpu[name] = d - before[name]
		}
	}
	return s
}

// load runs conc workers, each sending requests one after another until d has passed, and
// returns their figures.
func load(ctx context.Context, t target, client *http.Client, conc int, d time.Duration) stats {
	workers := make([]worker, conc)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { workers[i].run(ctx, t, client, deadline) })
	}
	wg.Wait()
	return summarize(workers, time.Since(start))
}

// worker is one client connection's sequential loop and what it saw.
type worker struct {
	latencies []time.Duration
	errors    map[string]int
}

// run sends requests until deadline or until ctx ends.
func (w *worker) run(ctx context.Context, t target, client *http.Client, deadline time.Time) {
	w.errors = map[string]int{}
	for ctx.Err() == nil && time.Now().Before(deadline) {
		began := time.Now()
		a, err := t.send(ctx, client)
		took := time.Since(began)
		if reason := failure(t, a, err); reason != "" {
			w.errors[reason]++
			continue
		}
		w.latencies = append(w.latencies, took)
	}
}

// failure says why an answer does not count as a success, or "" when it does.
func failure(t target, a answer, err error) string {
	switch {
	case err != nil:
		return "transport: " + err.Error()
	case a.status < 200 || a.status > 299:
		return fmt.Sprintf("%d %s", a.status, truncate(bytes.TrimSpace(a.body), 120))
	case t.check != nil:
		if err := t.check(a); err != nil {
			return "check: " + err.Error()
		}
	}
	return ""
}

// summarize merges the workers' latencies and errors.
func summarize(workers []worker, elapsed time.Duration) stats {
	s := stats{elapsed: elapsed, errors: map[string]int{}}
	var all []time.Duration
	for _, w := range workers {
		all = append(all, w.latencies...)
		for reason, n := range w.errors {
			s.errors[reason] += n
		}
	}
	slices.Sort(all)
	s.latencies = all
	s.ok = len(all)
	s.p50 = percentile(all, 0.50)
	s.p99 = percentile(all, 0.99)
	return s
}

// percentile returns the p-quantile of sorted latencies (nearest rank), 0 when there are none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// truncate shortens b to at most n bytes for an error reason.
func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
