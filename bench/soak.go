package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncepay/oncepay/internal/channelsim"
	"github.com/oncepay/oncepay/internal/platform/kafka"
)

// The soak (-soak D): one oncepay process under D of mixed load — new orders, replays of one
// key, and payments (a trade opened, the buyer paying at the channel, whose report comes back
// over HTTP; every order's event goes out through the outbox to Kafka) — with its resident
// memory sampled from /proc every 5 s. After a warm-up of a fifth of D (at least a minute),
// the memory must stay flat: the last sample within 10 % of the warm-up's end.
//
// The channel simulator and the Kafka broker (kfake) run in the bench process, as a
// deployment runs them outside oncepay: embedded, both keep every trade and every message in
// memory by design, and the soak would measure their history instead of oncepay's.

// soakSample is one reading of the process's memory.
type soakSample struct {
	at       time.Duration
	rssKB    int64
	heapKB   int64
	requests int64
}

// runSoak runs the soak and prints its samples and verdict.
func runSoak(ctx context.Context, e *env, opts options, out io.Writer) error {
	outside, err := startOutside(ctx)
	if err != nil {
		return err
	}
	defer outside.close()
	c, err := e.startCluster(ctx, "soak", 1,
		"ONCEPAY_KAFKA_BROKERS="+outside.broker,
		"ONCEPAY_CHANNELS="+channelsim.DefaultChannel,
		"ONCEPAY_CHANNEL_URL="+outside.channelURL,
		"ONCEPAY_CHANNEL_SECRET="+outside.secret)
	if err != nil {
		return err
	}
	url, pid := c.urls[0], c.pids[0]
	client := newClient(opts.concurrency)
	defer client.CloseIdleConnections()
	replay := serverTarget(e, url)
	replayKey := e.newKey()
	replay.key = func() string { return replayKey }
	if _, err := replay.send(ctx, client); err != nil {
		return err
	}

	var requests, failures atomic.Int64
	loadCtx, stop := context.WithTimeout(ctx, opts.soak)
	defer stop()
	var wg sync.WaitGroup
	for i := range opts.concurrency {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				var err error
				switch n := rand.IntN(4); {
				case n == 0:
					_, err = replay.send(loadCtx, client)
				case n == 1 && i%2 == 0:
					err = e.soakPayment(loadCtx, client, url)
				default:
					_, err = serverTarget(e, url).send(loadCtx, client)
				}
				requests.Add(1)
				if err != nil && loadCtx.Err() == nil {
					failures.Add(1)
				}
			}
		})
	}

	warmup := max(opts.soak/5, time.Minute)
	var samples []soakSample
	began := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	fmt.Fprintf(out, "soak: one oncepay process (pid %d), %d clients, %s; warm-up %s\n", pid, opts.concurrency, opts.soak, warmup)
	for loadCtx.Err() == nil {
		select {
		case <-loadCtx.Done():
		case <-tick.C:
			rss, err := processRSS(pid)
			if err != nil {
				return err
			}
			heap, _ := heapInUse(ctx, url)
			s := soakSample{at: time.Since(began).Round(time.Second), rssKB: rss, heapKB: heap, requests: requests.Load()}
			samples = append(samples, s)
			if len(samples)%6 == 0 {
				fmt.Fprintf(out, "  %6s  rss %6.1f MB  heap in use %6.1f MB  %d requests\n", s.at, float64(s.rssKB)/1024, float64(s.heapKB)/1024, s.requests)
			}
		}
	}
	wg.Wait()
	return printSoak(out, samples, warmup, failures.Load())
}

// soakPayment orders, opens the order's trade, and pays it at the channel as the buyer; the
// channel then reports the payment to oncepay.
func (e *env) soakPayment(ctx context.Context, client *http.Client, url string) error {
	a, err := serverTarget(e, url).send(ctx, client)
	if err != nil || a.status != http.StatusCreated {
		return fmt.Errorf("order: %v %d", err, a.status)
	}
	var o struct {
		ID string `json:"order_id"`
	}
	if err := json.Unmarshal(a.body, &o); err != nil {
		return err
	}
	pay := target{url: url + "/v1/orders/" + o.ID + "/payments", header: http.Header{"Authorization": {"Bearer " + aliceKey}}, key: e.newKey}
	a, err = pay.send(ctx, client)
	if err != nil || a.status != http.StatusCreated {
		return fmt.Errorf("open trade: %v %d %s", err, a.status, a.body)
	}
	var t struct {
		PayURL string `json:"pay_url"`
	}
	if err := json.Unmarshal(a.body, &t); err != nil {
		return err
	}
	// The cashier page is …/sim/cashier/{out_trade_no}; the buyer's pay is …/sim/trades/{out_trade_no}/pay.
	payNow := strings.Replace(t.PayURL, "/sim/cashier/", "/sim/trades/", 1) + "/pay"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, payNow, nil)
	if err != nil {
		return err
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("pay at the channel: %d", res.StatusCode)
	}
	return nil
}

// printSoak prints the verdict: the last sample's RSS against the RSS at the end of warm-up.
func printSoak(out io.Writer, samples []soakSample, warmup time.Duration, failures int64) error {
	var base, last soakSample
	for _, s := range samples {
		if s.at <= warmup {
			base = s
		}
		last = s
	}
	if base.rssKB == 0 || last.at <= warmup {
		return fmt.Errorf("the soak took %d samples, too few to compare after a warm-up of %s", len(samples), warmup)
	}
	growth := float64(last.rssKB)/float64(base.rssKB) - 1
	verdict := "met"
	if growth > 0.10 {
		verdict = "NOT MET"
	}
	fmt.Fprintf(out, "rss after warm-up (%s) %.1f MB, at the end (%s) %.1f MB: %+.1f %% (≤ +10 %%) %s; heap in use %.1f → %.1f MB; %d requests, %d failed\n",
		base.at, float64(base.rssKB)/1024, last.at, float64(last.rssKB)/1024, growth*100, verdict,
		float64(base.heapKB)/1024, float64(last.heapKB)/1024, last.requests, failures)
	return nil
}

// processRSS is pid's resident set size in kB (VmRSS of /proc/<pid>/status).
func processRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// heapInUse reads go_memstats_heap_inuse_bytes from the server's /metrics, in kB.
func heapInUse(ctx context.Context, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return int64(v / 1024), err
		}
	}
	return 0, fmt.Errorf("no go_memstats_heap_inuse_bytes in /metrics")
}

// outside is what the soak runs beside oncepay instead of inside it: the channel simulator
// and a Kafka broker.
type outside struct {
	broker, channelURL, secret string
	close                      func()
}

// startOutside starts a kfake broker with the contract's topics and a channel simulator,
// both on free ports of 127.0.0.1.
func startOutside(ctx context.Context) (outside, error) {
	k, err := kafka.Open(ctx, nil, kafka.EmbeddedOptions{Addr: "127.0.0.1:0"})
	if err != nil {
		return outside{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		k.Close()
		return outside{}, err
	}
	o := outside{broker: strings.Join(k.Brokers, ","), channelURL: "http://" + ln.Addr().String(), secret: "bench-channel-" + randomHex(8)}
	sim, err := channelsim.New(channelsim.Config{Secret: o.secret, PublicURL: o.channelURL, Schedule: []time.Duration{}})
	if err != nil {
		_ = ln.Close()
		k.Close()
		return outside{}, err
	}
	srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	o.close = func() {
		_ = srv.Close()
		_ = sim.Close()
		k.Close()
	}
	return o, nil
}
