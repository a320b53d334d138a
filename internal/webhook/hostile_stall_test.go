package webhook_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/webhook"
)

// hangingDNS answers hang.example only when the lookup's context ends (a resolver that never
// answers), and loopback for every other name.
type hangingDNS struct{}

func (hangingDNS) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	if host == "hang.example" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// silentTCP accepts connections and never says a word: a TLS handshake or an HTTP answer
// that never comes. It returns its host:port.
func silentTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// hostileReceiver serves one of the ways a receiver can hold an attempt: trickle (200 and a
// byte every 100 ms), flood (200 and an endless body at full speed), slowHeaders (the status
// line a byte at a time), hugeHeaders (a megabyte of headers, slowly).
func hostileReceiver(t *testing.T, kind string) string {
	t.Helper()
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		switch kind {
		case "slowHeaders", "hugeHeaders":
			c, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			line, step := "HTTP/1.1 200 OK\r\n", 1
			if kind == "hugeHeaders" {
				line, step = "HTTP/1.1 200 OK\r\nX-Pad: "+strings.Repeat("a", 1<<20), 4096
			}
			for i := 0; i < len(line); i += step {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				_, _ = buf.WriteString(line[i:min(i+step, len(line))])
				_ = buf.Flush()
			}
			return
		}
		w.WriteHeader(http.StatusOK)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			default:
			}
			if kind == "trickle" {
				<-tick.C
				chunk = chunk[:1]
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	return srv.URL
}

// TestHostileReceiversDelayOnlyThemselves: one instance, and beside a healthy receiver every
// kind of receiver a hostile admin can register — silent, TLS handshake that never ends,
// trickling body, endless body, status line a byte at a time, a megabyte of headers, a name
// whose DNS never answers, and 5 more silent endpoints. Each event committed must be in the
// feed within 1 s and at the healthy receiver within 2 s (p99; asserted with half again as
// margin for a loaded machine), and every hostile attempt ends within the attempt timeout.
func TestHostileReceiversDelayOnlyThemselves(t *testing.T) {
	f := newFixture(t)
	healthy := newReceiver(t, nil)
	urls := []string{
		"http://" + silentTCP(t) + "/hook",
		"https://" + silentTCP(t) + "/hook",
		hostileReceiver(t, "trickle"),
		hostileReceiver(t, "flood"),
		hostileReceiver(t, "slowHeaders"),
		hostileReceiver(t, "hugeHeaders"),
		"http://hang.example:9/hook",
	}
	for range 5 {
		urls = append(urls, "http://"+silentTCP(t)+"/hook")
	}
	var hostile []webhook.Endpoint
	for _, u := range urls {
		hostile = append(hostile, f.endpoint(t, u, outbox.OrderPaid))
	}
	good := f.endpoint(t, healthy.srv.URL, outbox.OrderPaid)

	const timeout = 3 * time.Second
	s := webhook.NewSender(f.db, f.gen, anomaly.NewRecorder(f.db, f.gen), []time.Duration{time.Hour}, timeout).
		UsePolicy(webhook.AddressPolicy{Dev: true, Resolver: hangingDNS{}}).UseKeys(testKeys())
	loop := &webhook.Loop{Sequencer: webhook.NewSequencer(f.db, f.gen), Sender: s, Interval: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = loop.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	committed := measureLags(t, f, healthy, 20, 200*time.Millisecond)
	if n := f.db.Where("endpoint_id = ? AND status = ?", good.ID, webhook.Succeeded).Find(&[]webhook.Delivery{}).RowsAffected; n != int64(len(committed)) {
		t.Errorf("%d healthy deliveries succeeded, want %d", n, len(committed))
	}
	for _, e := range hostile[:7] {
		var n int64
		f.db.Table("webhook_attempts").Where("endpoint_id = ?", e.ID).Count(&n)
		if n == 0 {
			t.Errorf("%s: no attempt recorded, the test did not exercise it", e.URL)
		}
	}
	// Every hostile attempt recorded so far ended within the attempt timeout (plus the
	// record's own time): none held its slot longer.
	var slow int64
	f.db.Table("webhook_attempts").Where("latency_ms > ?", (timeout + time.Second).Milliseconds()).Count(&slow)
	if slow != 0 {
		t.Errorf("%d attempts lasted longer than the timeout", slow)
	}
}

// measureLags commits n events of order.paid, interval apart, while a loop runs, and fails
// the test unless each is in the feed within 1 s and at the healthy receiver within 2 s (p99;
// asserted with half again as margin for a loaded machine). It returns when each event was
// committed, by event id.
func measureLags(t *testing.T, f *fixture, healthy *receiver, n int, interval time.Duration) map[string]time.Time {
	t.Helper()
	committed := map[string]time.Time{}
	var feedLags []time.Duration
	for i := range n {
		id := f.announce(t, outbox.OrderPaid, map[string]int{"n": i})
		at := time.Now()
		committed[ids.Format(id)] = at
		for {
			var seq *int64
			if err := f.db.Table("events").Select("seq").Where("id = ?", id).Scan(&seq).Error; err != nil {
				t.Fatal(err)
			}
			if seq != nil {
				feedLags = append(feedLags, time.Since(at))
				break
			}
			if time.Since(at) > 10*time.Second {
				feedLags = append(feedLags, time.Hour)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(interval)
	}
	deadline := time.Now().Add(10 * time.Second)
	var lags []time.Duration
	for time.Now().Before(deadline) {
		lags = lags[:0]
		seen := map[string]bool{}
		for _, h := range healthy.got() {
			if c, ok := committed[h.eventID]; ok && !seen[h.eventID] {
				seen[h.eventID] = true
				lags = append(lags, h.at.Sub(c))
			}
		}
		if len(lags) == len(committed) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	slices.Sort(lags)
	slices.Sort(feedLags)
	p99 := func(d []time.Duration) time.Duration { return d[max(0, (len(d)*99+99)/100-1)] }
	if len(lags) == 0 {
		t.Fatalf("the healthy receiver got none of %d events within 10 s", len(committed))
	}
	t.Logf("feed lag p50 %v p99 %v (target 1s); healthy receiver p50 %v p99 %v of %d (target 2s)",
		feedLags[len(feedLags)/2], p99(feedLags), lags[len(lags)/2], p99(lags), len(lags))
	if len(lags) != len(committed) {
		t.Fatalf("the healthy receiver got %d of %d events within 10 s", len(lags), len(committed))
	}
	if p := p99(feedLags); p > 1500*time.Millisecond {
		t.Errorf("feed lag p99 %v, want ≤ 1 s (1.5 s with margin)", p)
	}
	if p := p99(lags); p > 3*time.Second {
		t.Errorf("healthy receiver p99 %v, want ≤ 2 s (3 s with margin)", p)
	}
	return committed
}

// TestManyHungEndpointsDelayOnlyThemselves: 150 endpoints whose receivers accept the
// connection and never answer, retried every second, beside one healthy receiver, on three
// instances (on SQLite, one: its pool is the one database). The hung endpoints must not take the healthy one's capacity — neither the
// sender's attempts in flight nor its database pool nor its claiming round — so each event is
// in the feed within 1 s and at the healthy receiver within 2 s (p99), as with 5 hung ones
// (issue 27: with 150 hung endpoints the healthy receiver's p99 was 6.5 s, with 40 1.4 s).
func TestManyHungEndpointsDelayOnlyThemselves(t *testing.T) {
	if testing.Short() {
		t.Skip("150 hung receivers: not in -short")
	}
	f := newFixture(t)
	instances := 3
	if f.dsn == "" {
		instances = 1
	}
	healthy := newReceiver(t, nil)
	const hung = 150
	var silent []webhook.Endpoint
	for range hung {
		silent = append(silent, f.endpoint(t, "http://"+silentTCP(t)+"/hook", outbox.OrderPaid))
	}
	good := f.endpoint(t, healthy.srv.URL, outbox.OrderPaid)

	const timeout = 3 * time.Second
	schedule := slices.Repeat([]time.Duration{time.Second}, 30)
	var loops []*webhook.Loop
	for i := range instances {
		db := f.db
		if i > 0 {
			db = apptest.OpenPool(t, f.db, f.dsn) // another instance: a pool of its own
		}
		s := webhook.NewSender(db, f.gen, anomaly.NewRecorder(db, f.gen), schedule, timeout).
			UsePolicy(webhook.AddressPolicy{Dev: true}).UseKeys(testKeys())
		loops = append(loops, &webhook.Loop{Sequencer: webhook.NewSequencer(db, f.gen), Sender: s, Interval: 20 * time.Millisecond})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() { cancel(); running.Wait() }) // before the pools close
	for _, l := range loops {
		running.Go(func() { _ = l.Run(ctx) })
	}

	committed := measureLags(t, f, healthy, 30, 250*time.Millisecond)
	var succeeded int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		// The receiver has them all; the last records may still be on their way.
		if f.db.Model(&webhook.Delivery{}).Where("endpoint_id = ? AND status = ?", good.ID, webhook.Succeeded).Count(&succeeded); succeeded == int64(len(committed)) {
			break
		}
	}
	if succeeded != int64(len(committed)) {
		t.Errorf("%d healthy deliveries succeeded, want %d", succeeded, len(committed))
	}
	// The hung endpoints were tried: the test exercised them, it did not just skip them.
	var tried int64
	f.db.Table("webhook_attempts").Where("endpoint_id <> ?", good.ID).Distinct("endpoint_id").Count(&tried)
	var attempts []webhook.Attempt
	f.db.Where("endpoint_id <> ?", good.ID).Order("endpoint_id, sent_at").Find(&attempts)
	t.Logf("%d of %d hung endpoints were tried, %d attempts in all", tried, len(silent), len(attempts))
	if tried < hung/2 {
		t.Errorf("only %d of %d hung endpoints were tried", tried, hung)
	}
	// Tried once per back-off, not with every event: an attempt, 3 s without an answer, a
	// pause of about 1 s, another, 3 s, about 2 s, a third — at most 4 each per instance in
	// this run's time. Without the circuit each had 8 in flight per instance within the first
	// seconds.
	if len(attempts) > 4*hung*instances {
		t.Errorf("%d attempts to %d hung endpoints, want at most %d", len(attempts), hung, 4*hung*instances)
	}
	// Once an attempt of a hung endpoint has timed out, each instance's circuit is open: an
	// attempt that starts later has at most one beside it per other instance.
	byEndpoint := map[int64][]webhook.Attempt{}
	for _, a := range attempts {
		byEndpoint[a.EndpointID] = append(byEndpoint[a.EndpointID], a)
	}
	end := func(a webhook.Attempt) time.Time { return a.SentAt.Add(time.Duration(a.LatencyMS) * time.Millisecond) }
	overlaps := 0
	for _, as := range byEndpoint {
		firstEnd := end(as[0])
		for i, a := range as {
			firstEnd = minTime(firstEnd, end(a))
			if !a.SentAt.After(firstEnd.Add(100 * time.Millisecond)) {
				continue
			}
			beside := 0
			for _, b := range as[:i] {
				if end(b).After(a.SentAt.Add(100 * time.Millisecond)) {
					beside++
				}
			}
			if beside >= instances {
				overlaps++
			}
		}
	}
	if overlaps > 0 {
		t.Errorf("%d attempts to a hung endpoint started beside %d others or more after its first timeout", overlaps, instances)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
