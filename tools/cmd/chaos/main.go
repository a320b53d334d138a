// Command chaos runs the chaos world — private servers, three oncepay instances, faults — and
// checks the history it recorded (tools/chaos; docs/chaos.md). "chaos kafka-broker -addr … -data …"
// serves the run's Kafka broker instead (chaos.BrokerMain), and "chaos hook-receiver …" the
// merchant's webhook receiver (chaos.ReceiverMain): the run starts its own executable that
// way, as processes of their own that it kills -9, stops and starts again.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncepay/oncepay/tools/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == chaos.BrokerCommand {
		os.Exit(chaos.BrokerMain(ctx, os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == chaos.ReceiverCommand {
		os.Exit(chaos.ReceiverMain(ctx, os.Args[2:], os.Stderr))
	}
	code, err := chaos.Run(ctx, os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	os.Exit(code)
}
