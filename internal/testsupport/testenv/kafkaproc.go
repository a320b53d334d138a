package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/kafka"
)

// envKafkaChild tells a test binary started by KafkaProcess.Start to serve the broker
// ("host:port|data dir") instead of running tests.
const envKafkaChild = "ONCEPAY_TEST_KAFKA_CHILD"

// ServeKafkaChild serves the embedded broker and exits when this test binary was started by
// KafkaProcess.Start; otherwise it returns at once. A package whose tests use KafkaProcess calls
// it first thing in its TestMain.
func ServeKafkaChild() {
	v := os.Getenv(envKafkaChild)
	if v == "" {
		return
	}
	addr, dir, _ := strings.Cut(v, "|")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c, err := kafka.Open(ctx, nil, kafka.EmbeddedOptions{Addr: addr, DataDir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka child:", err)
		os.Exit(1)
	}
	<-ctx.Done()
	stop()
	c.Close()
	os.Exit(0)
}

// KafkaProcess is the embedded broker in a process of its own — the test binary again, through
// ServeKafkaChild — on a fixed port with a data directory, so that a test can kill it -9 and
// start it again where it was, as a crashed broker comes back.
type KafkaProcess struct {
	// Cluster is the broker's address, for the clients under test.
	Cluster *kafka.Cluster
	tb      testing.TB
	addr    string
	dir     string
	cmd     *exec.Cmd
	done    chan struct{}
}

// StartKafkaProcess starts a broker process on a free port of 127.0.0.1, killed when the test
// ends.
func StartKafkaProcess(tb testing.TB) *KafkaProcess {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	p := &KafkaProcess{Cluster: &kafka.Cluster{Brokers: []string{addr}}, tb: tb, addr: addr, dir: tb.TempDir()}
	tb.Cleanup(p.Kill)
	p.Start()
	return p
}

// Start starts the broker on its port and data directory and waits until it answers.
func (p *KafkaProcess) Start() {
	p.tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envKafkaChild+"="+p.addr+"|"+p.dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		p.tb.Fatalf("start the broker process: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := p.Cluster.Ping(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			p.tb.Fatalf("the broker process exited at start-up: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			p.tb.Fatalf("the broker on %s is not ready after 20 s: %v", p.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill kills the broker with SIGKILL and waits until it is gone; it does nothing when none runs.
func (p *KafkaProcess) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}
