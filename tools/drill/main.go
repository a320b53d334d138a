// Package drill runs oncepay's incident drills (I1–I18 of docs/incidents.md, and a flash sale)
// against a running server and prints a verdict table; tools/cmd/drill is its command. Two rows
// bring servers of their own: I11 a gateway (a private nginx) in front of two doors to the
// server, I14 a private MariaDB primary and replica with oncepay instances on them.
//
// It is a black-box client: it knows only docs/contract.md. Each scenario fires real duplicate
// copies of one request concurrently, over HTTP and the payment.notifications Kafka topic,
// then checks the business effect through the API (order status, stock, balance, anomalies)
// and names, from the Idempotency-Outcome header, the layer that stopped each duplicate. With
// the lab mounted (ONCEPAY_LAB=true) the same scenarios also run against the naive replicas
// under /lab/, where the incident is expected to reproduce. The scenarios run at the same
// time, each on SKUs and keys of its own, except where one would disturb another (see
// drill.run); --html also writes a self-contained page with a timeline of every copy.
//
// Exit status: 0 every guarantee held, 1 a guarantee was violated, 2 a usage or connection
// error (or a scenario could not be run).
package drill

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// The exit statuses.
const (
	exitOK        = 0
	exitViolation = 1
	exitTrouble   = 2
)

// Run is the whole program (tools/cmd/drill is its main): it returns the exit status, so that
// a Go test can drive it against a server with --url.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, stdout, stderr)
}

// run is the whole program and returns the exit status, so that a Go test can drive it
// against a server with --url. Progress goes to stderr, the table or JSON to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, os.LookupEnv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "drill:", err)
		return exitTrouble
	}
	d, err := newDrill(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "drill:", err)
		return exitTrouble
	}
	defer d.close()

	rep := d.run(ctx)
	write := writeTable
	if cfg.JSON {
		write = writeJSON
	}
	if err := write(stdout, rep); err != nil {
		fmt.Fprintln(stderr, "drill: writing the report:", err)
		return exitTrouble
	}
	if cfg.HTML != "" {
		if err := writeHTMLFile(cfg.HTML, rep); err != nil {
			fmt.Fprintln(stderr, "drill: writing the HTML report:", err)
			return exitTrouble
		}
		fmt.Fprintf(stderr, "drill: wrote %s\n", cfg.HTML)
	}
	return rep.ExitCode
}
