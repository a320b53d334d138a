package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// The gateway of the chaos run: a private nginx in front of the oncepay instances, with the
// rules of deploy/nginx/nginx.conf (TestGatewayRulesMatchDeploy holds them together): it
// generates X-Request-Id where the client sent none and passes it on, and after an error or a
// timeout it sends the request, POST included, to the next instance (incident I11). Client
// traffic and the channel's notifications go through it; its access log tells which copies
// were gateway retries, and annotateGateway writes that into the history.

// defaultGateway is where the chaos run's nginx listens unless -gateway says otherwise; a
// port of 0 there takes a free one, so that runs side by side on one machine do not collide.
const defaultGateway = "127.0.0.1:8801"

// gatewayListen returns addr with a free port of 127.0.0.1 for port 0.
func gatewayListen(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("-gateway %q: %w", addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, fmt.Sprint(p)), nil
}

// The gateway's timeouts. A read timeout shorter than the slow instance's payments (the lock
// TTL and a second) and than a paused instance's pause makes gateway retries happen all run
// long; the whole of one request's tries stays within the client's own timeout, so that the
// client hears the gateway's answer (or its 502/504) before it gives up on it.
const (
	gatewayConnectTimeout = 300 * time.Millisecond
	gatewayReadTimeout    = 1200 * time.Millisecond
	gatewayTries          = 3
	gatewayTotalTimeout   = clientTimeout - 100*time.Millisecond
)

// gatewayConf is the nginx configuration of the chaos run's gateway; gatewayParams fill it.
var gatewayConf = template.Must(template.New("nginx.conf").Parse(`# The chaos run's gateway, written by tools/chaos (gateway.go); the rules of deploy/nginx/nginx.conf.
{{if .Root}}user root;
{{end}}worker_processes 1;
error_log {{.Prefix}}/error.log warn;

events {
    worker_connections 1024;
}

http {
    client_body_temp_path {{.Prefix}}/client_body;
    proxy_temp_path {{.Prefix}}/proxy;
    fastcgi_temp_path {{.Prefix}}/fastcgi;
    uwsgi_temp_path {{.Prefix}}/uwsgi;
    scgi_temp_path {{.Prefix}}/scgi;

    map $http_x_request_id $oncepay_request_id {
        ""      $request_id;
        default $http_x_request_id;
    }

    log_format chaos escape=json '{"rid":"$oncepay_request_id","method":"$request_method","uri":"$request_uri",'
                                 '"status":$status,"upstream":"$upstream_addr","ustatus":"$upstream_status",'
                                 '"rt":"$request_time","urt":"$upstream_response_time"}';
    access_log {{.Prefix}}/access.log chaos;

    upstream oncepay {
{{range .Upstreams}}        server {{.}} max_fails=0;
{{end}}        keepalive 64;
    }

    server {
        listen {{.Listen}};
        client_max_body_size 1m;

        location / {
            proxy_pass http://oncepay;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Request-Id $oncepay_request_id;

            proxy_connect_timeout {{.Connect}};
            proxy_read_timeout {{.Read}};
            proxy_send_timeout {{.Read}};
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries {{.Tries}};
            proxy_next_upstream_timeout {{.Total}};
        }
    }
}
`))

// gatewayParams are the blanks of gatewayConf.
type gatewayParams struct {
	Root                 bool
	Prefix, Listen       string
	Upstreams            []string
	Connect, Read, Total string
	Tries                int
}

// nginxDuration renders d in nginx's units (milliseconds).
func nginxDuration(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// gateway is the nginx process and where it keeps its files.
type gateway struct {
	*server
	prefix    string
	listen    string
	accessLog string
}

// base is the gateway's URL.
func (g *gateway) base() string { return "http://" + g.listen }

// newGateway describes the gateway listening on listen, with its prefix directory under dir;
// start starts it.
func newGateway(dir, listen string) *gateway {
	prefix := filepath.Join(dir, "nginx")
	return &gateway{prefix: prefix, listen: listen, accessLog: filepath.Join(prefix, "access.log")}
}

// start writes the gateway's configuration for the instances' addresses into its own prefix
// directory and starts nginx as a child process (nginx -p <prefix> -c <conf> -g 'daemon off;
// pid …;'); world.stopGateway stops it by its pid.
func (g *gateway) start(ctx context.Context, upstreams []string) error {
	for _, d := range []string{"", "client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		if err := os.MkdirAll(filepath.Join(g.prefix, d), 0o755); err != nil {
			return err
		}
	}
	var conf bytes.Buffer
	err := gatewayConf.Execute(&conf, gatewayParams{
		Root: os.Geteuid() == 0, Prefix: g.prefix, Listen: g.listen, Upstreams: upstreams,
		Connect: nginxDuration(gatewayConnectTimeout), Read: nginxDuration(gatewayReadTimeout),
		Total: nginxDuration(gatewayTotalTimeout), Tries: gatewayTries,
	})
	if err != nil {
		return err
	}
	confPath := filepath.Join(g.prefix, "nginx.conf")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o644); err != nil {
		return err
	}
	if c, err := net.DialTimeout("tcp", g.listen, 200*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("the gateway's address %s is taken: stop what listens there, or choose another with -gateway (127.0.0.1:0 for a free port)", g.listen)
	}
	g.server = &server{
		name: "nginx",
		args: []string{"nginx", "-p", g.prefix, "-c", confPath, "-e", filepath.Join(g.prefix, "error.log"),
			"-g", "daemon off; pid " + filepath.Join(g.prefix, "nginx.pid") + ";"},
		logf: filepath.Join(filepath.Dir(g.prefix), "nginx.log"),
	}
	g.ready = func(ctx context.Context) error {
		c, err := net.DialTimeout("tcp", g.listen, 200*time.Millisecond)
		if err != nil {
			return err
		}
		return c.Close()
	}
	return g.server.start(ctx)
}

// stopGateway stops the world's gateway (gateway.stop), if it runs.
func (w *world) stopGateway() {
	if w.gw != nil {
		w.gw.stop()
	}
}

// stop stops nginx with SIGQUIT (its master finishes the requests in flight and takes its
// workers down with it), by its pid, and with SIGKILL when it has not gone after a few
// seconds; SIGKILL alone would leave the workers behind, holding the port. Its logs are copied
// beside the other servers' (nginx-access.log, nginx-error.log).
func (g *gateway) stop() {
	if g.server == nil {
		return
	}
	s := g.server
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
	for _, f := range []string{"access.log", "error.log"} {
		if b, err := os.ReadFile(filepath.Join(g.prefix, f)); err == nil {
			_ = os.WriteFile(filepath.Join(filepath.Dir(g.prefix), "nginx-"+f), b, 0o644)
		}
	}
}

// gatewayLine is one line of the gateway's access log: one client request, and every
// instance nginx sent it to, in order, with each one's status ("504" for a timeout, "502" for
// a refused connection).
type gatewayLine struct {
	RID       string   `json:"rid"`
	Method    string   `json:"method"`
	URI       string   `json:"uri"`
	Status    int      `json:"status"`
	Upstream  string   `json:"upstream"`
	UStatus   string   `json:"ustatus"`
	Upstreams []string `json:"-"`
	UStatuses []string `json:"-"`
}

// retried reports whether nginx sent the request to more than one instance.
func (l gatewayLine) retried() bool { return len(l.Upstreams) > 1 }

// readAccessLog parses the gateway's access log.
func readAccessLog(path string) ([]gatewayLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []gatewayLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var l gatewayLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("access log line %q: %w", sc.Text(), err)
		}
		l.Upstreams, l.UStatuses = splitUpstreams(l.Upstream), splitUpstreams(l.UStatus)
		lines = append(lines, l)
	}
	return lines, sc.Err()
}

// splitUpstreams splits nginx's list of upstreams or their statuses: "a, b" for a retry, and
// "a : b" across an internal redirect; "-" is none.
func splitUpstreams(s string) []string {
	var out []string
	for _, group := range strings.Split(s, " : ") {
		for _, p := range strings.Split(group, ",") {
			if p = strings.TrimSpace(p); p != "" && p != "-" {
				out = append(out, p)
			}
		}
	}
	return out
}

// annotateGateway joins the gateway's access log to the history by request id: every client
// delivery learns the instances that served it (Via, and Inst, the one that answered), and
// every request nginx sent to more than one instance — a client's or the channel's — is added
// to the history as a gateway event. It returns how many requests the gateway retried.
func annotateGateway(h *history, w *world) (map[string]gatewayLine, int, error) {
	lines, err := readAccessLog(w.gw.accessLog)
	if err != nil {
		return nil, 0, err
	}
	byRID := map[string]gatewayLine{}
	for _, l := range lines {
		byRID[l.RID] = l
	}
	inst := map[string]int{}
	for _, in := range w.insts {
		inst[strings.TrimPrefix(in.base, "http://")] = in.n
	}
	for _, e := range h.snapshot() {
		if e.Kind != kindHTTP || e.ReqID == "" {
			continue
		}
		l, ok := byRID[e.ReqID]
		if !ok {
			continue
		}
		e.Via = l.Upstream
		e.GatewayRetry = l.retried()
		if n := len(l.Upstreams); n > 0 {
			e.Inst = inst[l.Upstreams[n-1]]
		}
	}
	retried := 0
	for _, l := range lines {
		if !l.retried() {
			continue
		}
		retried++
		h.add(&event{Kind: kindGateway, Op: "gateway_retry", ReqID: l.RID, Method: l.Method, Path: l.URI, Status: l.Status,
			Via: l.Upstream, Detail: fmt.Sprintf("%s %s (request id %s) sent to %s, answered %s", l.Method, l.URI, l.RID, l.Upstream, l.UStatus)})
	}
	return byRID, retried, nil
}

// checkGateway: the gateway passed every client request on under the client's own
// X-Request-Id — each answered delivery of the history is in its access log under the id it
// was sent with — so that a gateway retry reaches the instances as the same request, and the
// instance that answers a retry can be told (I11). A delivery with no answer (the client gave
// up, or was cancelled before it sent anything) is not checked: the gateway may never have
// seen it. It counts the copies the gateway retried. Without a gateway log (gatewayLog nil) it
// checks nothing.
func (c *checker) checkGateway() {
	if c.gatewayLog == nil {
		return
	}
	var vs []string
	checked, retried := 0, 0
	for _, e := range c.events {
		if e.Kind != kindHTTP || e.ReqID == "" || e.Status == 0 {
			continue
		}
		checked++
		l, ok := c.gatewayLog[e.ReqID]
		switch {
		case !ok:
			vs = append(vs, fmt.Sprintf("#%d %s %s key=%s: request id %s is not in the gateway's log (the gateway lost it or replaced it)", e.Seq, e.Method, e.Path, e.Key, e.ReqID))
		case l.retried():
			retried++
		}
	}
	c.add("gateway_keeps_request_id", fmt.Sprintf("every client request passes the gateway under its own X-Request-Id (%d of them retried on another instance)", retried), checked, vs)
}
