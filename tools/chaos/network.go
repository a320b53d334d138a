package chaos

import (
	"bufio"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/oncepay/oncepay/internal/testsupport/netfault"
)

// The network faults: a toxiproxy proxy (internal/testsupport/netfault) stands between every
// oncepay instance and each of MariaDB, Redis (one server, or every node of a cluster: the
// instance dials each node's announced address through its own proxy, ONCEPAY_CHAOS_REDIS_ROUTES)
// and the channel, and the faults break one instance's routes there while the others' stay
// whole.
const (
	faultNetLatency   = "net_latency"          // 20–150 ms ± jitter both ways on every route of an instance
	faultNetPartition = "net_partition"        // every byte dropped between an instance and one service for 2–5 s
	faultNetReset     = "net_reset_after_send" // a share of an instance's connections reset at their next answer
	faultNetSlowClose = "net_slow_close"       // an instance's closing connections held open for 2 s
	faultNetBandwidth = "net_bandwidth"        // an instance's routes limited to 16 KB/s
	// faultCommitLost cuts an instance from MariaDB right after it sent COMMIT, a few times:
	// the commit applies, its answer is lost (the guard's resolveCommit, idempotent/guard.go).
	faultCommitLost = "commit_answer_lost"
	// faultLeaseHolderCut cuts the instance whose payments outlast the lock TTL from Redis
	// for twice the TTL while its payments run: its watchdog cannot renew, the lease lapses,
	// another instance may take it, and the dedup record must fence the two.
	faultLeaseHolderCut = "lease_holder_cut"
	// faultKafkaPartition drops every byte between the Kafka broker and all its clients — the
	// instances' relays and consumers, the run's own producer — for 2–5 s: one proxy stands
	// in front of the broker for everyone, since the broker announces one address.
	faultKafkaPartition = "kafka_partition"
)

// netFaults are the network faults of the rotation.
var netFaults = []string{faultNetLatency, faultNetPartition, faultNetReset, faultNetSlowClose, faultNetBandwidth, faultCommitLost, faultLeaseHolderCut, faultKafkaPartition}

// The services an instance reaches through a proxy of its own.
const (
	routeMariaDB = "mariadb"
	routeRedis   = "redis"
	routeChannel = "channel"
)

// routes are one instance's proxies, by service.
type routes map[string]route

// route is one service's proxies for an instance: one, or one per node of a Redis Cluster.
type route []*netfault.Proxy

// each applies fault to every proxy of the route, and returns one Heal for them all.
func (r route) each(fault func(*netfault.Proxy) (netfault.Heal, error)) (netfault.Heal, error) {
	var heals []netfault.Heal
	all := func() {
		for _, h := range heals {
			h()
		}
	}
	for _, p := range r {
		h, err := fault(p)
		if err != nil {
			all()
			return nil, err
		}
		heals = append(heals, h)
	}
	return all, nil
}

// route puts a proxy between instance n and upstream (host:port) for service, and returns
// the address the instance dials instead.
func (w *world) route(n int, service, upstream string) (string, error) {
	p, err := w.network().Proxy(fmt.Sprintf("oncepay-%d-%s-%s", n, service, upstream), upstream)
	if err != nil {
		return "", err
	}
	if w.routes == nil {
		w.routes = map[int]routes{}
	}
	if w.routes[n] == nil {
		w.routes[n] = routes{}
	}
	w.routes[n][service] = append(w.routes[n][service], p)
	return p.Addr(), nil
}

// network is the run's toxiproxy, started at its first use.
func (w *world) network() *netfault.Net {
	if w.net == nil {
		w.net = netfault.New()
	}
	return w.net
}

// routeDSN is dsn with its address replaced by instance n's proxy to it.
func (w *world) routeDSN(n int, dsn string) (string, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	if cfg.Addr, err = w.route(n, routeMariaDB, cfg.Addr); err != nil {
		return "", err
	}
	return cfg.FormatDSN(), nil
}

// routeRedis is instance n's Redis environment: ONCEPAY_REDIS_ADDR its proxy to the one Redis
// server; or, on a cluster, the nodes' own addresses with ONCEPAY_CHAOS_REDIS_ROUTES sending
// each through a proxy of the instance's (the client dials the addresses CLUSTER SLOTS
// announces, so only a dialer that maps them keeps it behind the proxies).
func (w *world) routeRedis(n int) ([]string, error) {
	if len(w.redis) == 1 {
		addr, err := w.route(n, routeRedis, w.redis[0].addr())
		return []string{"ONCEPAY_REDIS_ADDR=" + addr}, err
	}
	var to []string
	for _, s := range w.redis {
		addr, err := w.route(n, routeRedis, s.addr())
		if err != nil {
			return nil, err
		}
		to = append(to, s.addr()+"="+addr)
	}
	return []string{"ONCEPAY_REDIS_ADDR=" + w.redisAddrs(), "ONCEPAY_CHAOS_REDIS_ROUTES=" + strings.Join(to, ",")}, nil
}

// routeChannelURL is ONCEPAY_CHANNEL_URL for instance n: its proxy to the simulator.
func (w *world) routeChannelURL(n int) (string, error) {
	addr, err := w.route(n, routeChannel, strings.TrimPrefix(w.simURL, "http://"))
	if err != nil {
		return "", err
	}
	return "http://" + addr, nil
}

// closeNetwork stops every proxy.
func (w *world) closeNetwork() {
	if w.net != nil {
		w.net.Close()
	}
}

// injectNetwork runs a network fault to its end, and reports whether kind was one.
func (f *faulter) injectNetwork(ctx context.Context, kind string) bool {
	if !slices.Contains(netFaults, kind) {
		return false
	}
	heal := context.WithoutCancel(ctx)
	if kind == faultKafkaPartition {
		f.partitionKafka(heal)
		return true
	}
	in := f.w.insts[mrand.IntN(len(f.w.insts))]
	rs := f.w.routes[in.n]
	services := rs.services()
	one := services[mrand.IntN(len(services))]
	var (
		undo   []netfault.Heal
		detail string
		err    error
		hold   = 3*time.Second + time.Duration(mrand.IntN(2000))*time.Millisecond
		done   <-chan struct{} // closed when the fault has done its work before hold
	)
	apply := func(h netfault.Heal, e error) {
		if e != nil {
			err = e
			return
		}
		undo = append(undo, h)
	}
	switch kind {
	case faultNetLatency:
		lat, jit := time.Duration(20+mrand.IntN(130))*time.Millisecond, time.Duration(10+mrand.IntN(50))*time.Millisecond
		for _, s := range services {
			apply(rs[s].each(func(p *netfault.Proxy) (netfault.Heal, error) { return p.Latency(lat, jit) }))
		}
		detail = fmt.Sprintf("%s ± %s both ways between oncepay-%d and %s", lat, jit, in.n, strings.Join(services, ", "))
	case faultNetPartition:
		hold = time.Duration(2000+mrand.IntN(3000)) * time.Millisecond
		apply(rs[one].each((*netfault.Proxy).Partition))
		detail = fmt.Sprintf("oncepay-%d cut from %s for %s (every byte dropped, new connections too)", in.n, one, hold)
	case faultNetReset:
		apply(rs[one].each(func(p *netfault.Proxy) (netfault.Heal, error) { return p.ResetAfterSend(0.3) }))
		detail = fmt.Sprintf("30%% of oncepay-%d's connections to %s reset at their next answer, after the request went out", in.n, one)
	case faultNetSlowClose:
		for _, s := range services {
			apply(rs[s].each(func(p *netfault.Proxy) (netfault.Heal, error) { return p.SlowClose(2 * time.Second) }))
		}
		detail = fmt.Sprintf("oncepay-%d's closing connections to %s held open 2 s", in.n, strings.Join(services, ", "))
	case faultNetBandwidth:
		for _, s := range services {
			apply(rs[s].each(func(p *netfault.Proxy) (netfault.Heal, error) { return p.Bandwidth(16) }))
		}
		detail = fmt.Sprintf("oncepay-%d's routes to %s limited to 16 KB/s", in.n, strings.Join(services, ", "))
	case faultCommitLost:
		const cuts = 3
		n, left, all := in.n, cuts, make(chan struct{})
		var mu sync.Mutex
		apply(rs[routeMariaDB][0].CutAfterCommit(cuts, func() {
			f.record(kind+"_cut", fmt.Sprintf("oncepay-%d: a COMMIT went out to MariaDB and its connection was cut before the answer", n), nil)
			mu.Lock()
			defer mu.Unlock()
			if left--; left == 0 {
				close(all)
			}
		}))
		hold, done = 2*f.every, all
		before := metric(heal, in, "oncepay_idempotency_tx_indefinite_total")
		defer func() {
			after := metric(heal, in, "oncepay_idempotency_tx_indefinite_total")
			f.record(kind+"_resolved", fmt.Sprintf("oncepay-%d's guard read %s lost COMMITs' outcome from their records (oncepay_idempotency_tx_indefinite_total %s → %s; the other cuts struck the background jobs)", n, diff(before, after), before, after), nil)
		}()
		detail = fmt.Sprintf("oncepay-%d's next %d COMMITs lose their answer (cut once sent), for up to %s", in.n, cuts, hold)
	case faultLeaseHolderCut:
		in = f.w.insts[len(f.w.insts)-1] // the instance whose payments outlast the lock TTL
		rs = f.w.routes[in.n]
		before := metric(heal, in, "oncepay_idempotency_lock_lost_total")
		hold = 2*f.lockTTL + time.Duration(mrand.IntN(1000))*time.Millisecond
		apply(rs[routeRedis].each((*netfault.Proxy).Partition))
		detail = fmt.Sprintf("oncepay-%d (payments hold their lease past the lock TTL %s) cut from Redis for %s while its payments run", in.n, f.lockTTL, hold)
		defer func() {
			after := metric(heal, in, "oncepay_idempotency_lock_lost_total")
			f.record(kind+"_leases", fmt.Sprintf("oncepay-%d lost %s leases while it worked (oncepay_idempotency_lock_lost_total %s → %s)", in.n, diff(before, after), before, after), nil)
		}()
	}
	f.record(kind, detail, err)
	if err == nil {
		select {
		case <-done:
		case <-time.After(hold):
		}
	}
	for _, h := range undo {
		h()
	}
	f.record(kind+"_healed", fmt.Sprintf("oncepay-%d's routes whole again", in.n), nil)
	return true
}

// partitionKafka is kafka_partition: the broker's proxy drops every byte for 2–5 s, then
// closes the connections it cut. Producers (the outbox relays, the run's Kafka copies) and the
// consumer group hang until their timeouts and resume once it heals.
func (f *faulter) partitionKafka(heal context.Context) {
	hold := time.Duration(2000+mrand.IntN(3000)) * time.Millisecond
	undo, err := f.w.kafkaProxy.Partition()
	f.record(faultKafkaPartition, fmt.Sprintf("the Kafka broker cut from every client for %s (every byte dropped, new connections too)", hold), err)
	if err != nil {
		return
	}
	sleepCtx(heal, hold)
	undo()
	f.record(faultKafkaPartition+"_healed", "the broker's route whole again", nil)
}

// services lists the routes' services in a stable order.
func (rs routes) services() []string {
	var out []string
	for _, s := range []string{routeMariaDB, routeRedis, routeChannel} {
		if rs[s] != nil {
			out = append(out, s)
		}
	}
	return out
}

// metric reads one unlabelled counter from the instance's /metrics ("?" when it cannot be
// read).
func metric(ctx context.Context, in *instance, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "?"
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return "?"
}

// diff is after − before of two counter readings, or "?" .
func diff(before, after string) string {
	b, err1 := strconv.ParseFloat(before, 64)
	a, err2 := strconv.ParseFloat(after, 64)
	if err1 != nil || err2 != nil {
		return "?"
	}
	return strconv.FormatFloat(a-b, 'f', -1, 64)
}
