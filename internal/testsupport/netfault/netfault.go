// Package netfault puts a real TCP proxy — toxiproxy (github.com/Shopify/toxiproxy/v2),
// embedded — between a process and what it talks to, and breaks the network there on demand:
// latency and jitter, a partition that drops every byte, a reset right after the request was
// sent, a slow close, a bandwidth limit, and a cut right after a MySQL COMMIT went out (the
// COMMIT whose answer is lost, Jepsen's indefinite outcome).
//
// The chaos run routes every oncepay instance's MariaDB, Redis and channel connections through
// proxies of its own; the service's tests use it to break a connection on purpose. (The kit, a module of its own, has its own proxy for the same COMMIT
// cut: idempotent/internal/testnet.) Every fault returns the function that heals it.
package netfault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"
)

// Net is one embedded toxiproxy server: a set of proxies, each a listener on 127.0.0.1 that
// forwards to one upstream.
type Net struct {
	srv *toxiproxy.ApiServer
}

// New starts no listener of its own: the proxies are driven from Go, not over toxiproxy's
// HTTP API. It silences zerolog's global logger, which some of toxiproxy's toxics (bandwidth)
// log through at trace level whatever logger the server was given: a chaos run's output had
// a line for every interrupted bandwidth pipe.
func New() *Net {
	silence.Do(func() { log.Logger = zerolog.Nop() })
	return &Net{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
}

// silence sets zerolog's global logger once, before any toxic reads it.
var silence sync.Once

// Proxy is one route: connections to Addr reach upstream through toxiproxy.
type Proxy struct {
	p    *toxiproxy.Proxy
	seq  atomic.Int64
	name string
}

// Proxy starts a proxy named name on a free port of 127.0.0.1 that forwards to upstream
// (host:port).
func (n *Net) Proxy(name, upstream string) (*Proxy, error) {
	p := toxiproxy.NewProxy(n.srv, name, "127.0.0.1:0", upstream)
	if err := n.srv.Collection.Add(p, true); err != nil {
		return nil, fmt.Errorf("netfault: proxy %s to %s: %w", name, upstream, err)
	}
	return &Proxy{p: p, name: name}, nil
}

// Close stops every proxy and closes their connections.
func (n *Net) Close() {
	_ = n.srv.Collection.Clear()
}

// Addr is the proxy's listen address, 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.p.Listen }

// Name is the proxy's name.
func (p *Proxy) Name() string { return p.name }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.p.Upstream }

// Heal undoes one fault. Calling it more than once does nothing more.
type Heal func()

// add attaches a toxic of typ to the given streams and returns the function that removes it.
func (p *Proxy) add(typ string, toxicity float32, attrs any, streams ...stream.Direction) (Heal, error) {
	var names []string
	for _, dir := range streams {
		name := fmt.Sprintf("%s-%s-%d", typ, dir, p.seq.Add(1))
		body, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": dir.String(), "toxicity": toxicity, "attributes": attrs})
		if err != nil {
			return nil, err
		}
		if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			p.remove(names)
			return nil, fmt.Errorf("netfault: %s on %s: %w", typ, p.name, err)
		}
		names = append(names, name)
	}
	var once sync.Once
	return func() { once.Do(func() { p.remove(names) }) }, nil
}

func (p *Proxy) remove(names []string) {
	for _, name := range names {
		_ = p.p.Toxics.RemoveToxic(context.Background(), name)
	}
}

// Latency delays every chunk both ways by latency ± jitter.
func (p *Proxy) Latency(latency, jitter time.Duration) (Heal, error) {
	return p.add("latency", 1, map[string]int64{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()},
		stream.Upstream, stream.Downstream)
}

// Partition drops every byte both ways, on the open connections and on new ones (which
// connect to the proxy and then hear nothing), as a network partition does. Healing closes
// the connections that were cut: their peers learn of the partition as a broken connection.
func (p *Proxy) Partition() (Heal, error) {
	return p.add("timeout", 1, map[string]int64{"timeout": 0}, stream.Upstream, stream.Downstream)
}

// ResetAfterSend resets a share (toxicity, 0–1) of the connections with a TCP RST at the
// next chunk the upstream sends back: the request went out and was acted on, its answer is
// lost.
func (p *Proxy) ResetAfterSend(toxicity float32) (Heal, error) {
	return p.add("reset_peer", toxicity, map[string]int64{"timeout": 0}, stream.Downstream)
}

// SlowClose holds a closing connection open for delay before the close reaches the peer.
func (p *Proxy) SlowClose(delay time.Duration) (Heal, error) {
	return p.add("slow_close", 1, map[string]int64{"delay": delay.Milliseconds()}, stream.Upstream, stream.Downstream)
}

// Bandwidth limits both ways to kbps kilobytes a second.
func (p *Proxy) Bandwidth(kbps int64) (Heal, error) {
	return p.add("bandwidth", 1, map[string]int64{"rate": kbps}, stream.Upstream, stream.Downstream)
}

// CutAfterCommit cuts the next n connections that send a MySQL COMMIT the moment the COMMIT
// has gone out to the server, before its answer can come back: the server commits (it read
// the whole statement before it sees the connection close), the client gets a broken
// connection and cannot tell whether its transaction committed. onCut, if not nil, is called
// for each cut. The fault heals by itself after n cuts; Heal disarms it sooner.
func (p *Proxy) CutAfterCommit(n int, onCut func()) (Heal, error) {
	return p.cutCommit(n, 0, onCut)
}

// CommitLate is CutAfterCommit with the next n COMMITs held back for delay before they go out
// to the server, then the connection cut. A client whose read timeout is shorter than delay
// gives up on its COMMIT while the server has not yet received it, and the commit lands later:
// the window in which a client that asks "did it commit?" at once hears "no".
func (p *Proxy) CommitLate(n int, delay time.Duration, onCut func()) (Heal, error) {
	return p.cutCommit(n, delay, onCut)
}

func (p *Proxy) cutCommit(n int, delay time.Duration, onCut func()) (Heal, error) {
	id := fmt.Sprintf("%s-%d", p.name, p.seq.Add(1))
	b := &commitBudget{onCut: onCut, delay: delay}
	b.left.Store(int64(n))
	commitBudgets.Store(id, b)
	heal, err := p.add(commitCutType, 1, map[string]string{"budget": id}, stream.Upstream)
	if err != nil {
		commitBudgets.Delete(id)
		return nil, err
	}
	return func() { heal(); commitBudgets.Delete(id) }, nil
}

// commitCutType is the custom toxic's registered name.
const commitCutType = "oncepay_commit_cut"

// commitBudgets holds how many cuts each armed CutAfterCommit has left, by its id: toxiproxy
// makes a fresh toxic value from the attributes for each link, so the budget lives here.
var commitBudgets sync.Map // id → *commitBudget

type commitBudget struct {
	left  atomic.Int64
	onCut func()
	delay time.Duration // how long a COMMIT is held back before it goes out (CommitLate)
}

// take spends one cut; it reports false when none is left.
func (b *commitBudget) take() bool {
	if b.left.Add(-1) < 0 {
		return false
	}
	if b.onCut != nil {
		b.onCut()
	}
	return true
}

// commitCut is the toxic of CutAfterCommit, on the client-to-server stream.
type commitCut struct {
	Budget string `json:"budget"`
}

// Pipe forwards every chunk; after a chunk that is a COMMIT (held back for the budget's delay
// first) it closes the link, which closes the proxy's connection to the server at once and
// then the client's — before the server's answer (which waits for the commit's redo log
// flush) is read.
func (t *commitCut) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if !isCommit(c.Data) {
				stub.Output <- c
				continue
			}
			b, ok := commitBudgets.Load(t.Budget)
			budget, _ := b.(*commitBudget)
			if !ok || !budget.take() {
				stub.Output <- c
				continue
			}
			time.Sleep(budget.delay)
			stub.Output <- c
			stub.Close()
			return
		}
	}
}

// isCommit reports whether data, the packets of one write, ends with a MySQL COM_QUERY
// whose statement is COMMIT. Each packet is a three-byte length, the sequence id and the
// payload; the driver may send a statement's close (COM_STMT_CLOSE, which has no answer) in
// the same write ahead of it.
func isCommit(data []byte) bool {
	const header = 4
	for len(data) >= header {
		size := int(data[0]) | int(data[1])<<8 | int(data[2])<<16
		if len(data) < header+size {
			return false
		}
		payload := data[header : header+size]
		data = data[header+size:]
		if len(data) == 0 {
			return len(payload) > 1 && payload[0] == comQuery &&
				strings.EqualFold(strings.TrimSpace(string(payload[1:])), "COMMIT")
		}
	}
	return false
}

// comQuery is the MySQL protocol's COM_QUERY command byte.
const comQuery = 0x03

func init() {
	toxics.Register(commitCutType, new(commitCut))
}
