// Command drill runs oncepay's incident drills against a running server and prints a verdict
// table (tools/drill has the scenarios; docs/drills.md the rows).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/oncepay/oncepay/tools/drill"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := drill.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
