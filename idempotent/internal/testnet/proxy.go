package testnet

import (
	"net"
	"strings"
	"sync"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one upstream (a MariaDB server) that breaks
// its connections on demand: right after a COMMIT went out (CutAfterCommit, CommitLate) or
// at the next bytes the server sends back (ResetAfterSend). Every fault returns the function
// that heals it; a fault applies to the connections already open as well as to new ones.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	cuts  []*commitCut // armed COMMIT cuts, oldest first
	reset bool         // ResetAfterSend armed
	links map[*link]struct{}
	wg    sync.WaitGroup
}

// commitCut is an armed CutAfterCommit or CommitLate.
type commitCut struct {
	left  int
	delay time.Duration
	onCut func()
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	once           sync.Once
}

func (l *link) close(reset bool) {
	l.once.Do(func() {
		if reset {
			if tc, ok := l.client.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // the client reads a TCP RST
			}
		}
		_ = l.server.Close()
		_ = l.client.Close()
	})
}

// Listen starts a proxy to upstream (host:port) on a free port of 127.0.0.1.
func Listen(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address to dial instead of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for l := range p.links {
		l.close(false)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		l := &link{client: client, server: server}
		p.mu.Lock()
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.up(l)
		go p.down(l)
	}
}

func (p *Proxy) forget(l *link, reset bool) {
	l.close(reset)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// up forwards what the client sends; after a chunk that is a COMMIT, when a cut is armed, it
// holds the COMMIT back for the cut's delay, sends it, and closes the link before the
// server's answer (which waits for the commit's redo log flush) can be read.
func (p *Proxy) up(l *link) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if cut := p.takeCut(chunk); cut != nil {
				if cut.onCut != nil {
					cut.onCut()
				}
				time.Sleep(cut.delay)
				_, _ = l.server.Write(chunk)
				p.forget(l, false)
				return
			}
			if _, werr := l.server.Write(chunk); werr != nil {
				p.forget(l, false)
				return
			}
		}
		if err != nil {
			p.forget(l, false)
			return
		}
	}
}

// down forwards what the server sends back, unless a reset is armed: then the link is reset
// and the answer is lost.
func (p *Proxy) down(l *link) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := l.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			reset := p.reset
			p.mu.Unlock()
			if reset {
				p.forget(l, true)
				return
			}
			if _, werr := l.client.Write(buf[:n]); werr != nil {
				p.forget(l, false)
				return
			}
		}
		if err != nil {
			p.forget(l, false)
			return
		}
	}
}

// takeCut spends one cut of the oldest armed fault when chunk is a COMMIT.
func (p *Proxy) takeCut(chunk []byte) *commitCut {
	if !isCommit(chunk) {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.cuts {
		if c.left > 0 {
			c.left--
			return c
		}
	}
	return nil
}

// CutAfterCommit cuts the next n connections that send a MySQL COMMIT the moment the COMMIT
// has gone out to the server, before its answer can come back: the server commits (it read
// the whole statement before it sees the connection close), the client gets a broken
// connection and cannot tell whether its transaction committed. onCut, if not nil, is called
// for each cut. The fault heals by itself after n cuts; the returned function disarms it
// sooner.
func (p *Proxy) CutAfterCommit(n int, onCut func()) func() {
	return p.cutCommit(n, 0, onCut)
}

// CommitLate is CutAfterCommit with the next n COMMITs held back for delay before they go out
// to the server, then the connection cut. A client whose read timeout is shorter than delay
// gives up on its COMMIT while the server has not yet received it, and the commit lands later.
func (p *Proxy) CommitLate(n int, delay time.Duration, onCut func()) func() {
	return p.cutCommit(n, delay, onCut)
}

func (p *Proxy) cutCommit(n int, delay time.Duration, onCut func()) func() {
	c := &commitCut{left: n, delay: delay, onCut: onCut}
	p.mu.Lock()
	p.cuts = append(p.cuts, c)
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		c.left = 0
		p.mu.Unlock()
	}
}

// ResetAfterSend resets every connection with a TCP RST at the next bytes the server sends
// back: the request went out and was acted on, its answer is lost. The returned function
// disarms it.
func (p *Proxy) ResetAfterSend() func() {
	p.mu.Lock()
	p.reset = true
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.reset = false
		p.mu.Unlock()
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
