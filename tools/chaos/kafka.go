package chaos

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/platform/kafka"
)

// BrokerCommand is the first argument that makes the chaos command serve as the run's Kafka
// broker (tools/cmd/chaos): the world starts its own executable again with it, so that the
// broker is a process of its own that the kill_kafka fault can kill -9, without a binary to
// build beside bin/oncepay. tools/cmd/kafka-broker is the same broker as a command of its own.
const BrokerCommand = "kafka-broker"

// BrokerMain serves the embedded broker of internal/platform/kafka on -addr, with its topics,
// messages and committed offsets in -data, until ctx ends (SIGTERM or SIGINT), then closes it
// cleanly. A SIGKILL is the fault: the next start on the same -data finds every batch and
// every commit the broker had acknowledged (kafka.EmbeddedOptions.DataDir). It returns the
// process's exit status.
func BrokerMain(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(BrokerCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9092", "host:port to listen on")
	data := fs.String("data", "", "the data directory (required): topics, messages and committed offsets")
	advertise := fs.String("advertise", "", "host:port to announce to clients instead of -addr (a proxy in front of the broker)")
	sync := fs.Bool("sync", false, "fsync every batch before acknowledging it (survives a crash of the machine, not only of the process)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *data == "" {
		fmt.Fprintln(stderr, "kafka-broker: -data is required")
		return 2
	}
	start := time.Now()
	c, err := kafka.Open(ctx, nil, kafka.EmbeddedOptions{Addr: *addr, DataDir: *data, SyncWrites: *sync, Advertise: *advertise})
	if err != nil {
		fmt.Fprintln(stderr, "kafka-broker:", err)
		return 1
	}
	fmt.Fprintf(stderr, "%s kafka-broker: serving on %s as %s, data %s (sync %t), opened in %s\n",
		time.Now().UTC().Format(time.RFC3339Nano), *addr, c.Brokers[0], *data, *sync, time.Since(start).Round(time.Millisecond))
	<-ctx.Done()
	c.Close()
	fmt.Fprintf(stderr, "%s kafka-broker: closed\n", time.Now().UTC().Format(time.RFC3339Nano))
	return 0
}

// startKafka starts the run's broker as a child process (BrokerMain, through the chaos
// command's own executable) on a free port, with its data in the run's directory, and points
// w.kafka at it: the chaos process's own clients (the workload's producer, the checks' reads)
// talk to it over TCP like the instances do.
func (w *world) startKafka(ctx context.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the chaos executable, to start the Kafka broker with: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Every client reaches the broker through one toxiproxy proxy, which the broker announces
	// as its address (kafka_partition, network.go).
	p, err := w.network().Proxy("kafka", addr)
	if err != nil {
		return err
	}
	w.kafkaProxy = p
	w.kafka = &kafka.Cluster{Brokers: []string{p.Addr()}}
	w.broker = &server{
		name: "kafka",
		args: []string{exe, BrokerCommand, "-addr", addr, "-advertise", p.Addr(), "-data", filepath.Join(w.dir, "kafka")},
		logf: filepath.Join(w.dir, "kafka.log"),
	}
	w.broker.ready = func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return w.kafka.Ping(ctx)
	}
	return w.broker.start(ctx)
}

// stopKafka stops the broker cleanly (SIGTERM: it saves its state and exits), or kills it
// when it has not exited within 5 s.
func (w *world) stopKafka() {
	s := w.broker
	if s == nil {
		return
	}
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil && s.signal(syscall.SIGTERM) {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	s.kill()
}
