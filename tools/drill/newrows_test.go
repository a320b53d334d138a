package drill

import (
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/deploy"
)

// TestCheckGatewayRetry is I11's verdict: two copies that made one order hold; two orders, or
// the stock taken twice, are the incident; a gateway that did not retry replays nothing.
func TestCheckGatewayRetry(t *testing.T) {
	created := func(n int, ref, outcome string) gatewayAttempt {
		return gatewayAttempt{instance: n, rec: copyRecord{Status: http.StatusCreated, Ref: ref, Outcome: outcome}, held: n == 1}
	}
	once := stockDelta{-1, 1, 0}
	for _, c := range []struct {
		name             string
		seen             gatewaySeen
		wantErr          bool
		effects, answers int
	}{
		{name: "oncepay: the retry replayed the first order",
			seen: gatewaySeen{attempts: []gatewayAttempt{created(1, "7", "executed"), created(2, "7", "replayed")},
				client: copyRecord{Status: http.StatusCreated, Ref: "7", Outcome: "replayed"}, delta: once, qty: 1}},
		{name: "the naive form: the retry made a second order", effects: 2, answers: 1,
			seen: gatewaySeen{attempts: []gatewayAttempt{created(1, "7", ""), created(2, "8", "")},
				client: copyRecord{Status: http.StatusCreated, Ref: "8"}, delta: stockDelta{-2, 2, 0}, qty: 1}},
		{name: "one order id but the stock taken twice", effects: 1,
			seen: gatewaySeen{attempts: []gatewayAttempt{created(1, "7", "executed"), created(2, "7", "replayed")},
				client: copyRecord{Status: http.StatusCreated, Ref: "7"}, delta: stockDelta{-2, 2, 0}, qty: 1}},
		{name: "the retry executed under its own outcome", answers: 1,
			seen: gatewaySeen{attempts: []gatewayAttempt{created(1, "7", "executed"), created(2, "7", "executed")},
				client: copyRecord{Status: http.StatusCreated, Ref: "7"}, delta: once, qty: 1}},
		{name: "the client got the gateway's 504", answers: 1,
			seen: gatewaySeen{attempts: []gatewayAttempt{created(1, "7", "executed"), {instance: 2, rec: copyRecord{Status: http.StatusConflict, Code: "idempotency_key_in_use"}}},
				client: copyRecord{Status: http.StatusGatewayTimeout}, delta: once, qty: 1}},
		{name: "a slow first copy: the retry and the client get 409 idempotency_key_in_use",
			seen: gatewaySeen{attempts: []gatewayAttempt{created(1, "7", "executed"), {instance: 2, rec: copyRecord{Status: http.StatusConflict, Code: "idempotency_key_in_use", Outcome: "in_progress"}}},
				client: copyRecord{Status: http.StatusConflict, Code: "idempotency_key_in_use"}, delta: once, qty: 1}},
		{name: "the gateway did not retry", wantErr: true,
			seen: gatewaySeen{attempts: []gatewayAttempt{created(1, "7", "executed")}, client: copyRecord{Status: http.StatusCreated, Ref: "7"}, delta: once, qty: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f findings
			err := checkGatewayRetry(&f, c.seen)
			if (err != nil) != c.wantErr {
				t.Fatalf("error %v, want one: %t", err, c.wantErr)
			}
			if len(f.effect) != c.effects || len(f.answers) != c.answers {
				t.Errorf("effect findings %q, answer findings %q; want %d and %d", f.effect, f.answers, c.effects, c.answers)
			}
		})
	}
}

// TestNginxConfKeepsDeploysRules: the drill's nginx is deploy/nginx/nginx.conf with its own
// listen address, upstreams and files, and every retry rule as the file has it.
func TestNginxConfKeepsDeploysRules(t *testing.T) {
	conf, err := nginxConf(deploy.NginxConf, "/tmp/p", "127.0.0.1:5555", []string{"127.0.0.1:1", "127.0.0.1:2"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"listen 127.0.0.1:5555;",
		"server 127.0.0.1:1 max_fails=0;\n        server 127.0.0.1:2 max_fails=0;\n        keepalive",
		"proxy_next_upstream error timeout non_idempotent;",
		"proxy_next_upstream_tries 2;",
		"proxy_set_header X-Request-Id $oncepay_request_id;",
		"proxy_read_timeout 5s;",
		"access_log /tmp/p/access.log oncepay;",
		"error_log /tmp/p/error.log warn;",
		"proxy_temp_path /tmp/p/proxy;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("the drill's nginx.conf lacks %q:\n%s", want, conf)
		}
	}
	for _, gone := range []string{"app:8080", "app-2:8080", "listen 8080;", "/dev/stdout"} {
		if strings.Contains(conf, gone) {
			t.Errorf("the drill's nginx.conf still has %q", gone)
		}
	}
}

// TestCheckFailover is I14's verdict: an acknowledged key answered with another order after the
// failover is the incident; a semi-synchronous primary that acknowledged an order its only
// replica could not have is one too.
func TestCheckFailover(t *testing.T) {
	acked := map[string]string{"k1": "1", "k2": "2", "k3": "3"}
	for _, c := range []struct {
		name             string
		seen             failoverSeen
		effects, answers int
	}{
		{name: "every key replayed", seen: failoverSeen{acked: acked, retried: map[string]string{"k1": "1", "k2": "2", "k3": "3"}, semiSync: true}},
		{name: "two keys executed again", effects: 1, seen: failoverSeen{acked: acked, retried: map[string]string{"k1": "1", "k2": "9", "k3": "8"}}},
		{name: "a retry answered no order", answers: 1, seen: failoverSeen{acked: acked, retried: map[string]string{"k1": "1", "k2": "2"}}},
		{name: "acknowledged while cut off", effects: 1, seen: failoverSeen{acked: acked, retried: acked, semiSync: true, cutAcked: true}},
		{name: "asynchronous: acknowledging while cut off is the default", seen: failoverSeen{acked: acked, retried: acked, cutAcked: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f findings
			checkFailover(&f, c.seen)
			if len(f.effect) != c.effects || len(f.answers) != c.answers {
				t.Errorf("effect findings %q, answer findings %q; want %d and %d", f.effect, f.answers, c.effects, c.answers)
			}
		})
	}
}
