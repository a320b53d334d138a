package chaos

import (
	"context"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// The checker against the faults of the gateway and of -redis-cluster: each case puts the
// fault into the history with the damage it would do if oncepay let it, and the checker must
// name the damage.

// TestCheckGateway: every answered client delivery must be in the gateway's access log under
// the request id it was sent with; one that is missing (the gateway replaced or lost the id)
// is a violation, one the client gave up on before an answer is not checked, and the
// gateway's retries are counted. Without a gateway log nothing is checked.
func TestCheckGateway(t *testing.T) {
	sent := func(seq int64, rid string) *event {
		e := answer("order", "u1", "k"+rid, 201, "executed", "{}")
		e.Seq, e.ReqID = seq, rid
		return e
	}
	gaveUp := &event{Seq: 4, Kind: kindHTTP, Op: "order", User: "u1", Key: "k4", ReqID: "chaos-4", Err: "canceled"}
	events := []*event{sent(1, "chaos-1"), sent(2, "chaos-2"), sent(3, "chaos-3"), gaveUp, {Kind: kindNote, Detail: "settle"}}
	log := map[string]gatewayLine{
		"chaos-1": {RID: "chaos-1", Upstreams: []string{"a"}},
		"chaos-2": {RID: "chaos-2", Upstreams: []string{"a", "b"}, UStatuses: []string{"504", "201"}},
		// chaos-3 reached the instances under an id the gateway made up.
		"3f2a9c": {RID: "3f2a9c", Upstreams: []string{"b"}},
	}
	c := &checker{events: events, gatewayLog: log}
	c.checkGateway()
	expectOnly(t, c, "gateway_keeps_request_id", 1)
	expectDetail(t, c, "gateway_keeps_request_id", "#3", "chaos-3", "not in the gateway's log")
	if r := c.results[0]; r.Checked != 3 || r.Invariant == "" {
		t.Errorf("result %+v, want 3 deliveries checked", r)
	}

	log["chaos-3"] = gatewayLine{RID: "chaos-3", Upstreams: []string{"b"}}
	c = &checker{events: events, gatewayLog: log}
	c.checkGateway()
	expectOnly(t, c, "gateway_keeps_request_id", 0)

	c = &checker{events: events}
	c.checkGateway()
	if len(c.results) != 0 {
		t.Errorf("without a gateway log: results %+v, want none", c.results)
	}
}

// TestCheckerNamesTheGatewaysDoubleExecution: the gateway timed out on a POST and sent it to
// the next instance (I11); had both instances executed it, the key would have two executed
// answers, and replays_byte_identical names the key and shows the gateway's retry in its
// evidence.
func TestCheckerNamesTheGatewaysDoubleExecution(t *testing.T) {
	first := answer("order", "u1", "order-k-gateway-1", 201, "executed", `{"order_id":"1900000000000000007"}`)
	first.Seq, first.Inst, first.ReqID = 1, 1, "chaos-1"
	retry := answer("order", "u1", "order-k-gateway-1", 201, "executed", `{"order_id":"1900000000000000008"}`)
	retry.Seq, retry.Inst, retry.ReqID, retry.Via, retry.GatewayRetry = 2, 2, "chaos-2", "127.0.0.1:1, 127.0.0.1:2", true
	c := &checker{events: []*event{first, retry,
		{Seq: 3, Kind: kindGateway, Op: "gateway_retry", ReqID: "chaos-2", Method: "POST", Path: "/v1/orders", Status: 201,
			Detail: "POST /v1/orders (request id chaos-2) sent to 127.0.0.1:1, 127.0.0.1:2, answered 504, 201"}}}
	if err := c.checkReplays(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectOnly(t, c, "replays_byte_identical", 2) // executed twice, and two different answers
	expectDetail(t, c, "replays_byte_identical", "order-k-gateway-1", "executed 2 times")
	found := false
	for _, l := range c.violations[0].History {
		found = found || strings.Contains(l, "gateway retry via 127.0.0.1:1, 127.0.0.1:2")
	}
	if !found {
		t.Errorf("the violation's history %q does not show the gateway's retry", c.violations[0].History)
	}
}

// TestCheckerNamesTwoHoldersAfterAFailover: a Redis master was killed (or a replica forced to
// take over) and the promoted replica granted a payment's lease again (I15); had the dedup
// record not fenced the second holder, its key would have two executed answers from two
// instances, and the checker names it — for both failover faults.
func TestCheckerNamesTwoHoldersAfterAFailover(t *testing.T) {
	for _, fault := range redisClusterFaults {
		t.Run(fault, func(t *testing.T) {
			holder := answer("pay", "u1", "pay-k-failover-1", 201, "executed", `{"trade_no":"T-1"}`)
			holder.Seq, holder.Inst = 1, 1
			second := answer("pay", "u1", "pay-k-failover-1", 201, "executed", `{"trade_no":"T-1"}`)
			second.Seq, second.Inst = 3, 2
			c := &checker{events: []*event{holder, {Seq: 2, Kind: kindFault, Op: fault, Detail: "the lease's master failed over"}, second}}
			if err := c.checkReplays(context.Background()); err != nil {
				t.Fatal(err)
			}
			expectOnly(t, c, "replays_byte_identical", 1)
			expectDetail(t, c, "replays_byte_identical", "pay-k-failover-1", "executed 2 times")
		})
	}
}

// TestKeyGoneIsPTTLOfAMissingKey: checkLeases skips a lock that expired between its SCAN and
// its PTTL (a job's lease, released or lapsed a moment before), which go-redis answers with
// keyGone; a lease with no TTL (-1) stays a violation.
func TestKeyGoneIsPTTLOfAMissingKey(t *testing.T) {
	rdb := testenv.Redis(t).Client
	ctx := context.Background()
	if ttl, err := rdb.PTTL(ctx, "oncepay:idem:{nothing}:lock").Result(); err != nil || ttl != keyGone {
		t.Fatalf("PTTL of a missing key = %v, %v; want keyGone (%v)", ttl, err, keyGone)
	}
	if err := rdb.Set(ctx, "oncepay:idem:{forever}:lock", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if ttl, err := rdb.PTTL(ctx, "oncepay:idem:{forever}:lock").Result(); err != nil || ttl == keyGone || ttl >= 0 {
		t.Fatalf("PTTL of a key without expiry = %v, %v; want -1, which is not keyGone", ttl, err)
	}
}

// TestCheckerNamesTheNetworksDoubleExecution: a network fault lost a request's answer (a
// COMMIT cut once sent, a reset after the request went out, a partition past the client's
// timeout) or cut a lease holder from Redis past its TTL (another instance took the lease);
// had the retry with the same key run the work again, its key would have two executed
// answers from two instances, and replays_byte_identical names it — for every network fault.
func TestCheckerNamesTheNetworksDoubleExecution(t *testing.T) {
	for _, fault := range netFaults {
		t.Run(fault, func(t *testing.T) {
			first := answer("pay", "u1", "pay-k-net-1", 201, "executed", `{"trade_no":"T-1","n":1}`)
			first.Seq, first.Inst = 1, 1
			lost := &event{Seq: 3, Kind: kindHTTP, Op: "pay", User: "u1", Key: "pay-k-net-1", Status: 503, Inst: 1, Outcome: "unavailable"}
			retry := answer("pay", "u1", "pay-k-net-1", 201, "executed", `{"trade_no":"T-1","n":2}`)
			retry.Seq, retry.Inst = 4, 2
			c := &checker{events: []*event{first, {Seq: 2, Kind: kindFault, Op: fault, Detail: "oncepay-1's route broken"}, lost, retry}}
			if err := c.checkReplays(context.Background()); err != nil {
				t.Fatal(err)
			}
			expectOnly(t, c, "replays_byte_identical", 2)
			expectDetail(t, c, "replays_byte_identical", "pay-k-net-1", "executed 2 times")
		})
	}
}

// TestCheckerNamesA500AfterALostCommit: an instance whose COMMIT lost its answer must answer
// the attempt from the record (executed or replayed) or 503 — a 500 is named by no_500.
func TestCheckerNamesA500AfterALostCommit(t *testing.T) {
	cut := &event{Seq: 1, Kind: kindFault, Op: faultCommitLost + "_cut", Detail: "oncepay-1: a COMMIT went out to MariaDB and its connection was cut before the answer"}
	answered := &event{Seq: 2, Kind: kindHTTP, Op: "order", Method: "POST", Path: "/v1/orders", User: "u1", Key: "k1", Inst: 1, Status: 500, Resp: `{"code":"internal"}`}
	c := &checker{events: []*event{cut, answered}}
	c.checkAnswers()
	expectOnly(t, c, "no_500", 1)
	expectDetail(t, c, "no_500", "#2", "oncepay-1", "500")
}
