package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
)

// orderPath finds the order id of a /v1/orders/{id}/… route.
var orderPath = regexp.MustCompile(`^/v1/orders/(\d+)(/|$)`)

// checkNoStaleNotFound: no request about an order or a recharge the client had already been
// told was created is answered 404 not_found. A database node that answers from before the
// latest commit does that — MariaDB Galera with wsrep_sync_wait=0: an order created on node 1,
// its payment opened at once on node 3, "no such order" — and for a client write the 404 is a
// business refusal stored under its Idempotency-Key and replayed to every retry; for a channel
// report it stores nothing, but the channel is told its report is wrong (a Kafka copy goes to
// the DLQ). Only a read that waits for the cluster (wsrep_sync_wait=1) keeps it from happening.
func (c *checker) checkNoStaleNotFound() {
	created := map[string]float64{} // order or recharge id → when its 201 arrived
	for _, e := range c.events {
		if e.Kind != kindHTTP || e.Status != http.StatusCreated || (e.Op != "order" && e.Op != "recharge") {
			continue
		}
		var v struct {
			OrderID    string `json:"order_id"`
			RechargeID string `json:"recharge_id"`
		}
		if json.Unmarshal([]byte(e.Resp), &v) != nil {
			continue
		}
		for _, id := range []string{v.OrderID, v.RechargeID} {
			if at, seen := created[id]; id != "" && (!seen || e.AtMs < at) {
				created[id] = e.AtMs
			}
		}
	}
	var vs []string
	n := 0
	for _, e := range c.events {
		if e.Kind != kindHTTP || e.Status == 0 {
			continue
		}
		id := aboutID(e)
		if id == "" {
			continue
		}
		at, known := created[id]
		sent := e.AtMs - e.Ms
		if !known || at > sent {
			continue
		}
		n++
		if e.Status == http.StatusNotFound {
			vs = append(vs, fmt.Sprintf("#%d %s %s on oncepay-%d answered 404 %s for %s, acknowledged as created %.0f ms before it was sent", e.Seq, e.Method, e.Path, e.Inst, clip(e.Resp), id, sent-at))
		}
	}
	c.add("no_stale_not_found", "no request about an order or recharge the client was told exists is answered 404 not_found", n, vs)
}

// aboutID is the order or recharge a request names: in its path, or as a channel report's
// out_trade_no.
func aboutID(e *event) string {
	if m := orderPath.FindStringSubmatch(e.Path); m != nil {
		return m[1]
	}
	if e.Op != "notify" && e.Op != "recharge_notify" {
		return ""
	}
	var r struct {
		OutTradeNo string `json:"out_trade_no"`
	}
	if json.Unmarshal([]byte(e.Req), &r) != nil {
		return ""
	}
	return r.OutTradeNo
}
