// Command kafka-broker serves oncepay's embedded Kafka broker (internal/platform/kafka: kfake
// with the contract's topics) as a process of its own, with its topics, messages and committed
// offsets kept in a data directory, until SIGTERM or SIGINT:
//
//	go run ./tools/cmd/kafka-broker -addr 127.0.0.1:9092 -data /tmp/kafka
//
// Killed with SIGKILL and started again on the same -data, it still holds every message and
// every offset commit it had acknowledged. The chaos run starts the same broker (chaos.BrokerMain)
// and kills it that way (docs/chaos.md, kill_kafka).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncepay/oncepay/tools/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := chaos.BrokerMain(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}
