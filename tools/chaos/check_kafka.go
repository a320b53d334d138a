package chaos

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	okafka "github.com/oncepay/oncepay/internal/platform/kafka"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// kafkaView is what the broker holds once the run has settled: every message of the topics the
// checks read, partition by partition in offset order. The broker was killed -9 and started
// again during the run (kill_kafka), so these checks ask whether it kept what it acknowledged.
type kafkaView struct {
	topics map[string][]kafka.Message
}

// checkedTopics are the topics readKafka reads: the outbox's and the workload's.
var checkedTopics = []string{okafka.TopicOrderEvents, okafka.TopicPaymentNotifications}

// readKafka reads every message of checkedTopics from brokers.
func readKafka(ctx context.Context, brokers []string) (*kafkaView, error) {
	cl, done := brokerClient(brokers, 10*time.Second)
	defer done()
	v := &kafkaView{topics: map[string][]kafka.Message{}}
	for _, topic := range checkedTopics {
		msgs, err := testenv.ReadTopic(ctx, cl, topic)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
		v.topics[topic] = msgs
	}
	return v, nil
}

// brokerClient returns a client of brokers on a transport of its own, and the function that
// closes its connections. The broker is killed and started again during the run: a client on
// kafka.DefaultTransport would keep the dead broker's pooled connections and cached metadata
// (internal/platform/kafka, Cluster.Ping).
func brokerClient(brokers []string, timeout time.Duration) (*kafka.Client, func()) {
	t := &kafka.Transport{}
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: timeout, Transport: t}, t.CloseIdleConnections
}

// checkKafkaFeed: every outbox event marked published is in its topic — under its event_id,
// with its key and its payload, byte for byte — and the topic holds no event the outbox does
// not. A row still pending may have its copy already (a relay killed between publish and mark):
// outbox_published names a row left pending after the run settled. A publish retried after a failure (the broker killed before its acknowledgement, a relay
// killed between publish and mark) may leave extra copies of an event: delivery is at least
// once, and consumers deduplicate by event_id (internal/outbox/outbox.go), so copies are
// counted, not violations. A published row missing from the topic is a lost event: the broker
// acknowledged it and forgot it, or the relay marked a row it never published.
func (c *checker) checkKafkaFeed(ctx context.Context) error {
	rows, err := c.db.QueryContext(ctx, `SELECT id, topic, msg_key, payload, published_at IS NOT NULL FROM outbox ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	type row struct {
		topic, key string
		payload    []byte
		published  bool
	}
	outbox := map[string]row{}
	var ids []string
	for rows.Next() {
		var id int64
		var r row
		if err := rows.Scan(&id, &r.topic, &r.key, &r.payload, &r.published); err != nil {
			return err
		}
		outbox[strconv.FormatInt(id, 10)] = r
		if r.published {
			ids = append(ids, strconv.FormatInt(id, 10))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var vs []string
	copies := map[string]int{}
	extra := 0
	for _, m := range c.kafka.topics[okafka.TopicOrderEvents] {
		id := testenv.Header(m, "event_id")
		r, ok := outbox[id]
		switch {
		case !ok:
			vs = append(vs, fmt.Sprintf("%s %d/%d: event_id %q is no outbox event", m.Topic, m.Partition, m.Offset, id))
			continue
		case r.topic != m.Topic || r.key != string(m.Key) || !bytes.Equal(r.payload, m.Value):
			vs = append(vs, fmt.Sprintf("%s %d/%d: event %s differs from its outbox row (key %q, want %q; payload %s, want %s)",
				m.Topic, m.Partition, m.Offset, id, m.Key, r.key, clip(string(m.Value)), clip(string(r.payload))))
		}
		if copies[id]++; copies[id] > 1 {
			extra++
		}
	}
	for _, id := range ids {
		if copies[id] == 0 && outbox[id].topic == okafka.TopicOrderEvents {
			vs = append(vs, fmt.Sprintf("outbox event %s (key %s) is marked published but is not in %s: lost", id, outbox[id].key, okafka.TopicOrderEvents))
		}
	}
	c.add("kafka_feed_complete", fmt.Sprintf("every published outbox event is in %s under its event_id with its key and payload, and nothing else is (%d extra copies of retried publishes)", okafka.TopicOrderEvents, extra), len(ids), vs)
	return nil
}

// checkKafkaKept: every copy of a notification the broker acknowledged to the workload is in
// payment.notifications once the run settled. The workload publishes one body under one key
// once or twice, and the redelivery fault publishes the same message again, so the check
// counts by key and body: the topic must hold at least as many copies as were acknowledged.
// It may hold more: a write whose acknowledgement the broker's death cut off may have been
// stored all the same.
func (c *checker) checkKafkaKept() {
	type msg struct{ key, value string }
	held := map[msg]int{}
	for _, m := range c.kafka.topics[okafka.TopicPaymentNotifications] {
		held[msg{string(m.Key), string(m.Value)}]++
	}
	acked := map[msg]int{}
	var order []msg
	n := 0
	for _, e := range c.events {
		if e.Kind != kindKafka || e.Status != 1 {
			continue
		}
		n++
		k := msg{e.Key, e.Req}
		if acked[k] == 0 {
			order = append(order, k)
		}
		acked[k]++
	}
	var vs []string
	for _, k := range order {
		if held[k] < acked[k] {
			vs = append(vs, fmt.Sprintf("notification %s: the broker acknowledged %d copies, %s holds %d: lost (%s)",
				k.key, acked[k], okafka.TopicPaymentNotifications, held[k], clip(k.value)))
		}
	}
	c.add("kafka_keeps_acknowledged", "every notification copy the broker acknowledged is in "+okafka.TopicPaymentNotifications+" after the run", n, vs)
}

// checkBroker runs the checks of what the broker kept, when the checker has a kafkaView.
func (c *checker) checkBroker(ctx context.Context) error {
	if c.kafka == nil {
		return nil
	}
	c.checkKafkaKept()
	return c.checkKafkaFeed(ctx)
}
