// Command channelsim serves the payment channel simulator alone, the same one oncepay embeds
// when ONCEPAY_CHANNEL_URL is empty:
//
//	go run ./cmd/channelsim [-addr 127.0.0.1:18090] [-schedule 4m,10m,…] [-data-dir ./data]
//
// Flags default to the ONCEPAY_* variables of docs/contract.md: ONCEPAY_EMBEDDED_CHANNEL_ADDR,
// ONCEPAY_CHANNEL_SECRET (environment only, so that it never shows in a process list),
// ONCEPAY_CHANNEL_SIM_SCHEDULE and ONCEPAY_DATA_DIR; the state is kept in
// $ONCEPAY_DATA_DIR/channelsim.json. SIGINT or SIGTERM shuts it down gracefully.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/channelsim"
)

// Defaults of the contract's configuration.
const (
	defaultAddr    = "127.0.0.1:18090"
	defaultSecret  = "dev-channel-secret"
	defaultDataDir = "./data"
	stateFileName  = "channelsim.json"
	shutdownGrace  = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "channelsim:", err)
		os.Exit(1)
	}
}

// options are the command's settings after flags and environment.
type options struct {
	addr      string
	secret    string
	schedule  []time.Duration
	stateFile string
	publicURL string
	channel   string
	// check probes a running simulator at addr instead of serving: a container healthcheck
	// on an image without a shell.
	check bool
}

// parseOptions reads the flags, which default to the environment.
func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("channelsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", cmp.Or(getenv("ONCEPAY_EMBEDDED_CHANNEL_ADDR"), defaultAddr), "listen address (ONCEPAY_EMBEDDED_CHANNEL_ADDR)")
	schedule := fs.String("schedule", getenv("ONCEPAY_CHANNEL_SIM_SCHEDULE"), "notification retry schedule after the immediate attempt (ONCEPAY_CHANNEL_SIM_SCHEDULE; default 4m,10m,10m,1h,2h,6h,15h)")
	dataDir := fs.String("data-dir", cmp.Or(getenv("ONCEPAY_DATA_DIR"), defaultDataDir), "directory of "+stateFileName+" (ONCEPAY_DATA_DIR)")
	publicURL := fs.String("public-url", "", "base URL of the simulator in pay_url (default http://<addr>)")
	channel := fs.String("channel", channelsim.DefaultChannel, "channel name put in notifications")
	check := fs.Bool("check", false, "probe the simulator listening on -addr and exit 0 when it answers (a healthcheck)")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	steps, err := channelsim.ParseSchedule(*schedule)
	if err != nil {
		return options{}, err
	}
	return options{
		addr:      *addr,
		secret:    cmp.Or(getenv("ONCEPAY_CHANNEL_SECRET"), defaultSecret),
		schedule:  steps,
		stateFile: filepath.Join(*dataDir, stateFileName),
		publicURL: cmp.Or(*publicURL, publicURLOf(*addr)),
		channel:   *channel,
		check:     *check,
	}, nil
}

// publicURLOf returns the URL a browser on this machine reaches addr at: an empty or
// unspecified host becomes 127.0.0.1.
func publicURLOf(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// run serves the simulator until ctx is done, then shuts it down and saves its state.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	opts, err := parseOptions(args, getenv, stderr)
	if err != nil {
		return err
	}
	if opts.check {
		return probe(ctx, publicURLOf(opts.addr))
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	sim, err := channelsim.New(channelsim.Config{
		Secret:    opts.secret,
		Channel:   opts.channel,
		StateFile: opts.stateFile,
		Schedule:  opts.schedule,
		PublicURL: opts.publicURL,
		Logger:    logger,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.addr)
	if err != nil {
		return errors.Join(err, sim.Close())
	}
	srv := &http.Server{
		Handler:           sim.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		// A body that stalls is cut off: a slow client must not hold a connection forever.
		ReadTimeout: 30 * time.Second,
		// Requests see the signal too: an answer held by the timeout_after_apply fault is
		// released at once instead of delaying the shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	logger.Info("channel simulator listening", "addr", ln.Addr().String(), "public_url", opts.publicURL,
		"state_file", opts.stateFile, "channel", opts.channel, "dev_secret", opts.secret == defaultSecret)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		logger.Info("channel simulator shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		err = srv.Shutdown(shutdownCtx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, sim.Close())
}

// probe asks the simulator at base for its faults, the cheapest read it serves, and reports
// whether it answered 200 within two seconds.
func probe(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sim/faults", nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/sim/faults answered %d", base, res.StatusCode)
	}
	return nil
}
