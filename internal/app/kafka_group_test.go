package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	kafkax "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// The shape of TestKafkaGroupMemberKilledMidBatch.
const (
	// groupOrders is how many orders are paid.
	groupOrders = 60
	// groupMembers is how many instances share the consumer group.
	groupMembers = 3
	// victimDelay slows every payment the victim applies (ONCEPAY_CHAOS_PAYMENT_DELAY), so that
	// it is in the middle of its batch, with messages fetched and not committed, when it dies.
	victimDelay = 2 * time.Second
	// groupSKU is the SKU every order buys one of.
	groupSKU = "SKU-1002"
)

// TestKafkaGroupMemberKilledMidBatch is I1 across a consumer group: three instances, each with
// its own connection pools and its own Kafka connections, consume payment.notifications (six
// partitions) in group oncepay-payments. Every order's SUCCESS notification is published two or
// three times, keyed by trade_no, and half of them are also posted over HTTP to random
// instances at the same time. One member is killed in the middle of its batch: its Kafka
// connections are cut first, so that its LeaveGroup never arrives and the coordinator has to
// notice the death by the session timeout, then the process stops. The survivors must take its
// partitions over and handle what it had not committed, in offset order; in the end every
// order is PAID once, by one payment row, its stock sold once, with no anomaly, no dead letter
// and no lag.
func TestKafkaGroupMemberKilledMidBatch(t *testing.T) {
	consumed := captureConsumed(t)
	members := startGroup(t)
	victim, survivors := members[0], members[1:]
	s := survivors[0].srv
	kc := newGroupClient(members[0].cluster.Brokers)
	ctx := context.Background()

	ends, err := kc.ends(ctx, kafkax.TopicPaymentNotifications)
	if err != nil || len(ends) < 3 {
		t.Fatalf("payment.notifications has %d partitions (%v), want at least 3", len(ends), err)
	}
	stockBefore := s.Inventory(t, groupSKU)
	orders := createOrders(t, members)
	stable := kc.waitStable(t, groupMembers)
	victimID, victimParts := stable.memberOf(victim.net)
	_, start, _, err := kc.lag(ctx, kafkax.TopicPaymentNotifications)
	if err != nil {
		t.Fatalf("committed offsets: %v", err)
	}

	// Wave 1: two copies of every notification on Kafka, and an HTTP copy of every other one
	// to a random instance, all at once.
	// The channel's producer has connections of its own, like the channel's message queue.
	w := (&kafkax.Cluster{Brokers: victim.cluster.Brokers}).Writer()
	t.Cleanup(func() { _ = w.Close() })
	var posts sync.WaitGroup
	answers := make([]apptest.Response, len(orders))
	for i, o := range orders {
		if i%2 == 0 {
			posts.Go(func() { answers[i] = notifyAnyLive(members, notificationOf(o)) })
		}
	}
	publishCopies(t, w, orders, 2)

	// The kill, once the victim is in the middle of its batch.
	// What the victim leaves is measured once it is cut off: it can commit nothing more, and
	// nobody else owns its partitions before the coordinator notices.
	kc.waitVictimMidBatch(t, victimParts, start)
	killedAt := time.Now()
	victim.net.cut()
	stopped := make(chan struct{})
	go func() { defer close(stopped); victim.stop(t) }()
	endAtKill, doneAtKill, _, err := kc.lag(ctx, kafkax.TopicPaymentNotifications)
	if err != nil {
		t.Fatalf("offsets at the kill: %v", err)
	}
	var redelivered int64
	for _, p := range victimParts {
		redelivered += endAtKill[p] - doneAtKill[p]
	}

	// Wave 2: a third copy of every third notification, published while the group has not yet
	// noticed the death.
	var third []order.View
	for i, o := range orders {
		if i%3 == 0 {
			third = append(third, o)
		}
	}
	publishCopies(t, w, third, 1)

	rebalanced := kc.waitRebalanced(t, victimID, groupMembers-1)
	rebalance := rebalanced.Sub(killedAt)
	<-stopped
	posts.Wait()
	kc.waitNoLag(t, kafkax.TopicPaymentNotifications)

	for i, r := range answers {
		if i%2 == 0 && (r.Status != http.StatusOK || r.Code() != "") {
			t.Errorf("HTTP copy of order %d: %s, want 200 success", i, r)
		}
	}
	wantPaidOnceEach(t, s, orders, stockBefore)
	if ends, err := kc.ends(ctx, kafkax.TopicPaymentNotificationsDLQ); err != nil || total(ends) != 0 {
		t.Errorf("dead letters: %d (%v), want none", total(ends), err)
	}
	endsNow, err := kc.ends(ctx, kafkax.TopicPaymentNotifications)
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	twice := consumed.check(t, endsNow)
	t.Logf("partitions %d; victim owned %v; rebalance %s after the kill (session timeout %s); "+
		"%d messages left uncommitted by the victim were redelivered to the survivors; %d handled twice",
		len(endsNow), victimParts, rebalance.Round(10*time.Millisecond), kafkax.SessionTimeout, redelivered, twice)
	if redelivered == 0 {
		t.Errorf("the victim left no uncommitted message: it was not killed mid-batch")
	}
	if limit := kafkax.SessionTimeout + kafkax.RebalanceTimeout; rebalance > limit {
		t.Errorf("rebalance took %s after the kill, want within %s", rebalance, limit)
	}
}

// member is one instance of the group: an app with its own connection pools, its own Kafka
// connections (net) and its own HTTP server, stopped by stop.
type member struct {
	srv     *apptest.Server
	cluster *kafkax.Cluster
	net     *netSwitch
	cancel  context.CancelFunc
	done    chan struct{}
	runErr  error
	live    bool
	mu      sync.Mutex
}

// startGroup starts groupMembers instances on one database, one Redis and one Kafka broker, as
// separate processes would run them; the first one, the victim, applies payments slowly.
func startGroup(t *testing.T) []*member {
	t.Helper()
	db, dsn := testenv.DBWithDSN(t)
	shared := testenv.Redis(t)
	broker := testenv.Kafka(t)
	members := make([]*member, groupMembers)
	for i := range members {
		sw := &netSwitch{}
		rdb := redisx.NewClient(shared.Addrs()[0], shared.DB())
		t.Cleanup(func() { _ = rdb.Close() })
		cluster := &kafkax.Cluster{Brokers: broker.Brokers, Dial: sw.dial}
		deps := app.Deps{DB: apptest.OpenPool(t, db, dsn), Redis: &redisx.Conn{Client: rdb}, Kafka: cluster}
		if i == 0 {
			deps = apptest.SlowTrades(deps, victimDelay)
		}
		members[i] = startMember(t, deps, func(c *config.Config) { c.NodeID = int64(i + 1) })
		members[i].net = sw
	}
	return members
}

// startMember builds an instance on deps and runs it until the test ends or stop is called.
func startMember(t *testing.T, deps app.Deps, opt apptest.Option) *member {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	url := "http://" + ln.Addr().String()
	cfg := apptest.Config(t, opt, func(c *config.Config) { c.PublicURL = url })
	a, err := app.New(context.Background(), cfg, deps)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(a.Close)
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{srv: apptest.At(t, url, cfg, deps.DB), cluster: deps.Kafka, cancel: cancel, done: make(chan struct{}), live: true}
	go func() {
		defer close(m.done)
		m.runErr = a.Run(ctx, ln)
	}()
	t.Cleanup(func() { m.stop(t) })
	apptest.Eventually(t, 30*time.Second, "instance ready", func() (bool, string) {
		r := m.srv.Do(http.MethodGet, "/readyz", "", nil, nil)
		return r.Status == http.StatusOK, r.String()
	})
	return m
}

// stop ends the instance's context and waits for Run to return; it is safe to call twice.
func (m *member) stop(t *testing.T) {
	m.mu.Lock()
	m.live = false
	m.mu.Unlock()
	m.cancel()
	select {
	case <-m.done:
		if m.runErr != nil {
			t.Errorf("app.Run returned %v", m.runErr)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the instance did not stop within 30s of its context ending")
	}
}

func (m *member) isLive() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// netSwitch opens an instance's connections to the brokers and can cut them all at once, as a
// crash or a network partition does: open connections are closed and new ones refused, so the
// instance's LeaveGroup never reaches the coordinator.
type netSwitch struct {
	mu    sync.Mutex
	off   bool
	conns []net.Conn
}

func (s *netSwitch) dial(ctx context.Context, network, address string) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off {
		return nil, errors.New("netSwitch: cut off")
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
	if err == nil {
		s.conns = append(s.conns, c)
	}
	return c, err
}

func (s *netSwitch) cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.off = true
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// owns reports whether hostPort is the local end of one of the switch's connections: the
// embedded broker reports a member's ClientHost as the address its connection came from.
func (s *netSwitch) owns(hostPort string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.conns, func(c net.Conn) bool { return c.LocalAddr().String() == hostPort })
}

// createOrders creates groupOrders orders of one groupSKU each, through random instances.
func createOrders(t *testing.T, members []*member) []order.View {
	t.Helper()
	orders := make([]order.View, groupOrders)
	errs := make([]string, groupOrders)
	apptest.Parallel(8, groupOrders, func(i int) {
		s := members[rand.IntN(len(members))].srv
		r := s.PostOrder(apptest.AliceKey, apptest.Key("group-order", i), apptest.Item{SKU: groupSKU, Quantity: 1})
		if r.Status != http.StatusCreated {
			errs[i] = r.String()
			return
		}
		_ = json.Unmarshal(r.Body, &orders[i])
	})
	for i, e := range errs {
		if e != "" {
			t.Fatalf("order %d: %s", i, e)
		}
	}
	return orders
}

// notificationOf is the SUCCESS notification of o, paid through trade T-GROUP-<order id>.
func notificationOf(o order.View) []byte {
	return apptest.JSON(apptest.Notification(o, "alipay", "T-GROUP-"+o.OrderID))
}

// publishCopies publishes copies copies of every order's notification, in a shuffled order.
func publishCopies(t *testing.T, w *kafka.Writer, orders []order.View, copies int) {
	t.Helper()
	var bodies [][]byte
	for _, o := range orders {
		for range copies {
			bodies = append(bodies, notificationOf(o))
		}
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	for _, b := range bodies {
		if err := apptest.PublishNotification(context.Background(), w, b); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

// notifyAnyLive posts body as a channel does: to a random live instance, again (to another
// random one) after a 409 in flight or no answer, until one gives a final answer or 25s pass.
func notifyAnyLive(members []*member, body []byte) apptest.Response {
	deadline := time.Now().Add(25 * time.Second)
	for {
		m := members[rand.IntN(len(members))]
		if !m.isLive() {
			continue
		}
		r := m.srv.SignedNotify(body)
		if (r.Err == nil && r.Status != http.StatusConflict) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantPaidOnceEach checks the business effect: every order PAID through its own trade, one
// payment row each, one order.paid event each, its stock sold once, and no anomaly at all.
func wantPaidOnceEach(t *testing.T, s *apptest.Server, orders []order.View, before inventory.Item) {
	t.Helper()
	for _, o := range orders {
		got := s.Order(t, o.OrderID)
		if got.Status != order.Paid || got.TradeNo == nil || *got.TradeNo != "T-GROUP-"+o.OrderID {
			t.Errorf("order %s: status %s trade %v, want PAID by T-GROUP-%s", o.OrderID, got.Status, got.TradeNo, o.OrderID)
		}
		if n := s.Count(t, "payments", "order_id = ?", got.ID); n != 1 {
			t.Errorf("order %s: %d payment rows, want 1", o.OrderID, n)
		}
		if n := s.Count(t, "inventory_movements", "order_id = ? AND kind = ?", got.ID, order.Confirm); n != 1 {
			t.Errorf("order %s: %d CONFIRM movements, want 1", o.OrderID, n)
		}
	}
	if n := s.Count(t, "payments", ""); n != int64(len(orders)) {
		t.Errorf("payments: %d rows, want %d", n, len(orders))
	}
	if n := apptest.CountEvents(s.OutboxEvents(t, ""), "order.paid"); n != len(orders) {
		t.Errorf("order.paid events: %d, want %d", n, len(orders))
	}
	after := s.Inventory(t, groupSKU)
	if sold, reserved := after.Sold-before.Sold, after.Reserved-before.Reserved; sold != int64(len(orders)) || reserved != 0 {
		t.Errorf("%s: sold +%d reserved %+d, want sold +%d reserved +0", groupSKU, sold, reserved, len(orders))
	}
	if as := s.Anomalies(t); len(as) != 0 {
		t.Errorf("anomalies: %+v, want none (no duplicate_payment, no trade_conflict)", as)
	}
}

func total(ends map[int]int64) int64 {
	var n int64
	for _, e := range ends {
		n += e
	}
	return n
}

// groupClient asks the broker about the payment consumer group, as an operator's tools do.
type groupClient struct{ *kafka.Client }

func newGroupClient(brokers []string) groupClient {
	return groupClient{&kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second}}
}

// ends returns the end offset (high watermark) of every partition of topic; the topics are
// never truncated, so it is also the partition's number of messages.
func (c groupClient) ends(ctx context.Context, topic string) (map[int]int64, error) {
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, err
	}
	var reqs []kafka.OffsetRequest
	for _, tp := range md.Topics {
		for _, p := range tp.Partitions {
			reqs = append(reqs, kafka.LastOffsetOf(p.ID))
		}
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, p.Error
		}
		out[p.Partition] = p.LastOffset
	}
	return out, nil
}

// committed returns the group's committed offset of every partition in ends (0 when none).
func (c groupClient) committed(ctx context.Context, topic string, ends map[int]int64) (map[int]int64, error) {
	var ps []int
	for p := range ends {
		ps = append(ps, p)
	}
	res, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: notify.Group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, p := range res.Topics[topic] {
		out[p.Partition] = max(p.CommittedOffset, 0)
	}
	return out, nil
}

// lag returns the end offsets, the committed offsets, and what is left between them.
func (c groupClient) lag(ctx context.Context, topic string) (ends, done map[int]int64, lag int64, err error) {
	if ends, err = c.ends(ctx, topic); err != nil {
		return nil, nil, 0, err
	}
	if done, err = c.committed(ctx, topic, ends); err != nil {
		return nil, nil, 0, err
	}
	for p, e := range ends {
		lag += e - done[p]
	}
	return ends, done, lag, nil
}

// waitNoLag waits until the group has committed every message of topic.
func (c groupClient) waitNoLag(t *testing.T, topic string) {
	t.Helper()
	apptest.Eventually(t, 30*time.Second, "consumer lag 0", func() (bool, string) {
		ends, done, lag, err := c.lag(context.Background(), topic)
		return err == nil && lag == 0, fmt.Sprintf("lag %d: ends %v committed %v err %v", lag, ends, done, err)
	})
}

// waitVictimMidBatch waits until the victim is in the middle of its batch: it has committed
// some of the messages of its partitions since start (the committed offsets before the first
// message was published) and not all of them. The others may still be busy: a copy they take
// while the slow victim holds its key waits for it.
func (c groupClient) waitVictimMidBatch(t *testing.T, victim []int, start map[int]int64) {
	t.Helper()
	apptest.Eventually(t, 20*time.Second, "the victim mid-batch", func() (bool, string) {
		ends, done, _, err := c.lag(context.Background(), kafkax.TopicPaymentNotifications)
		if err != nil {
			return false, err.Error()
		}
		var handled, left int64
		for _, p := range victim {
			handled += done[p] - start[p]
			left += ends[p] - done[p]
		}
		if left == 0 {
			t.Fatalf("the victim finished its batch before the kill; ends %v committed %v", ends, done)
		}
		return handled > 0, fmt.Sprintf("victim partitions %v: none committed yet; ends %v committed %v", victim, ends, done)
	})
}

// groupState is a stable generation of the payment consumer group: every member's partitions
// of payment.notifications, and the addresses its connections came from.
type groupState map[string]struct {
	host       string
	partitions []int
}

// memberOf returns the member id and partitions of the member whose connections sw opened.
func (g groupState) memberOf(sw *netSwitch) (string, []int) {
	for id, m := range g {
		if sw.owns(m.host) {
			return id, m.partitions
		}
	}
	panic(fmt.Sprintf("no member of the group connected through this switch: %+v", g))
}

// describe returns the group's state when it is stable with every partition assigned, and
// why not otherwise.
func (c groupClient) describe(ctx context.Context) (groupState, string) {
	res, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{notify.Group}})
	if err != nil || len(res.Groups) != 1 {
		return nil, fmt.Sprintf("describe: %v", err)
	}
	g := res.Groups[0]
	if g.Error != nil || g.GroupState != "Stable" {
		return nil, fmt.Sprintf("state %s, err %v", g.GroupState, g.Error)
	}
	out, assigned := groupState{}, 0
	for _, m := range g.Members {
		var ps []int
		for _, tp := range m.MemberAssignments.Topics {
			if tp.Topic == kafkax.TopicPaymentNotifications {
				ps = append(ps, tp.Partitions...)
			}
		}
		slices.Sort(ps)
		assigned += len(ps)
		out[m.MemberID] = struct {
			host       string
			partitions []int
		}{m.ClientHost, ps}
	}
	if assigned != kafkax.Partitions {
		return nil, fmt.Sprintf("%d of %d partitions assigned", assigned, kafkax.Partitions)
	}
	return out, ""
}

// waitStable waits until the group is stable with n members sharing every partition.
func (c groupClient) waitStable(t *testing.T, n int) groupState {
	t.Helper()
	var g groupState
	apptest.Eventually(t, 20*time.Second, fmt.Sprintf("group stable with %d members", n), func() (bool, string) {
		var why string
		if g, why = c.describe(context.Background()); g == nil {
			return false, why
		}
		return len(g) == n, fmt.Sprintf("%d members", len(g))
	})
	return g
}

// waitRebalanced waits until the group is stable again with n members, none of them gone,
// and returns when it saw that.
func (c groupClient) waitRebalanced(t *testing.T, gone string, n int) time.Time {
	t.Helper()
	apptest.Eventually(t, 25*time.Second, "group rebalanced without the victim", func() (bool, string) {
		g, why := c.describe(context.Background())
		if g == nil {
			return false, why
		}
		_, still := g[gone]
		return len(g) == n && !still, fmt.Sprintf("%d members, victim still in: %v", len(g), still)
	})
	return time.Now()
}

// consumedLog records the consumer's "trade report consumed" log lines, which name
// the partition and offset of every message handled to the end, and passes warnings and
// errors on to stderr.
type consumedLog struct {
	next slog.Handler
	mu   sync.Mutex
	recs []consumedRec
}

// consumedRec is one message handled to the end (applied or found a duplicate), in the order
// the handlers finished.
type consumedRec struct {
	partition int
	offset    int64
}

// captureConsumed makes a consumedLog the default logger until the test ends.
func captureConsumed(t *testing.T) *consumedLog {
	t.Helper()
	h := &consumedLog{next: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
	previous := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(previous) })
	return h
}

func (h *consumedLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *consumedLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "trade report consumed" {
		rec := consumedRec{partition: -1}
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "partition":
				rec.partition = int(a.Value.Int64())
			case "offset":
				rec.offset = a.Value.Int64()
			}
			return true
		})
		h.mu.Lock()
		h.recs = append(h.recs, rec)
		h.mu.Unlock()
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

// WithAttrs and WithGroup keep h: the consumer logs through the default logger directly.
func (h *consumedLog) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup keeps h, as WithAttrs does.
func (h *consumedLog) WithGroup(string) slog.Handler { return h }

// check verifies the consumption itself: every message of every partition below ends was
// handled at least once, and each partition's messages were first handled in offset order.
// It returns how many messages were handled more than once: finished by the victim after its
// connections were cut, so never committed, and handled again by a survivor as a duplicate.
func (h *consumedLog) check(t *testing.T, ends map[int]int64) (twice int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[[2]int64]int{}
	last := map[int]int64{}
	for _, r := range h.recs {
		k := [2]int64{int64(r.partition), r.offset}
		seen[k]++
		if seen[k] > 1 {
			twice++
			continue
		}
		if prev, ok := last[r.partition]; ok && r.offset < prev {
			t.Errorf("partition %d: offset %d first handled after offset %d", r.partition, r.offset, prev)
		}
		last[r.partition] = r.offset
	}
	for p, e := range ends {
		for off := range e {
			if seen[[2]int64{int64(p), off}] == 0 {
				t.Errorf("partition %d offset %d: never handled", p, off)
			}
		}
	}
	return twice
}
