// Command bench measures what oncepay's idempotency guard costs over the same order
// transaction served without it, and compares it with gofiber's idempotency middleware.
//
// Every variant runs in this one process against HTTP servers on random ports of 127.0.0.1,
// on the same MySQL database and Redis, in alternating chunks (-chunks): ratios are computed
// within one run, and a swing of the shared machine's load lands on every variant alike. README.md says how to run it and how to read the tables.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/platform/logx"
)

// The environment variables the bench needs; they are the ones oncepay's tests use.
const (
	envMySQLDSN  = "ONCEPAY_TEST_MYSQL_DSN"
	envRedisAddr = "ONCEPAY_TEST_REDIS_ADDR"
)

// options are the command-line flags.
type options struct {
	concurrency int
	duration    time.Duration
	runs        int
	// chunks splits each variant's duration into that many chunks, run in turns with the
	// other variants' (runInterleaved); 1 runs the variants one after the other.
	chunks     int
	only       *regexp.Regexp
	stormSize  int
	cpuProfile string
	// logInfo logs as oncepay does in production — JSON at info, one access line and one
	// guard line per request — to a discarding writer, so that logging is priced too.
	logInfo bool
	// scale, when positive, runs the scale scenario alone (scale.go) with that many records,
	// scaleExpired of them expired.
	scale, scaleExpired int64
	// soak, when positive, runs the soak alone (soak.go) for that long.
	soak time.Duration
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if missing := missingEnv(); len(missing) > 0 {
		for _, m := range missing {
			fmt.Fprintln(os.Stderr, "bench: "+m)
		}
		os.Exit(2)
	}
	// The guard writes one info line per attempt; the bench keeps warnings only, as
	// oncepay's tests do, so that the tables stay readable — unless -log info prices the
	// production logger, whose lines are then discarded.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if opts.logInfo {
		slog.SetDefault(logx.New(io.Discard, slog.LevelInfo))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if opts.cpuProfile != "" {
		f, err := os.Create(opts.cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line.
func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var o options
	only := fs.String("only", "", "regexp selecting the variants and storms to run (default: all)")
	fs.IntVar(&o.concurrency, "c", 16, "concurrent client connections per variant")
	fs.DurationVar(&o.duration, "d", 5*time.Second, "measured duration of each variant")
	fs.IntVar(&o.chunks, "chunks", 5, "chunks of each variant's duration, measured in turns with the other variants' (1: one variant after the other)")
	fs.IntVar(&o.runs, "runs", 1, "runs of every variant; with more than one the medians are printed too")
	fs.IntVar(&o.stormSize, "storm", 1000, "concurrent copies of one key in each storm")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server and load generator) to this file")
	fs.Int64Var(&o.scale, "scale", 0, "run the scale scenario alone with this many dedup records (make bench-scale: 10000000)")
	fs.Int64Var(&o.scaleExpired, "purge", 1_000_000, "with -scale: how many of the records are expired and purged under traffic")
	fs.DurationVar(&o.soak, "soak", 0, "run the soak alone: one oncepay process under mixed load this long, its memory sampled (make bench-soak: 5m)")
	logLevel := fs.String("log", "warn", "warn, or info: log as oncepay does in production (to a discarding writer)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.concurrency < 1 || o.duration <= 0 || o.runs < 1 || o.stormSize < 1 || o.chunks < 1 {
		return o, fmt.Errorf("bench: -c, -d, -runs, -chunks and -storm must be positive")
	}
	switch *logLevel {
	case "warn":
	case "info":
		o.logInfo = true
	default:
		return o, fmt.Errorf("bench: -log is warn or info, not %q", *logLevel)
	}
	re, err := regexp.Compile(*only)
	if err != nil {
		return o, fmt.Errorf("bench: -only: %w", err)
	}
	o.only = re
	return o, nil
}

// missingEnv names each required environment variable that is not set.
func missingEnv() []string {
	var missing []string
	if os.Getenv(envMySQLDSN) == "" {
		missing = append(missing, envMySQLDSN+" is not set: a go-sql-driver DSN such as root:@tcp(127.0.0.1:3306)/?parseTime=true&loc=UTC")
	}
	if os.Getenv(envRedisAddr) == "" {
		missing = append(missing, envRedisAddr+" is not set: host:port of a Redis such as 127.0.0.1:6379")
	}
	return missing
}

// run sets the environment up, runs the selected variants and then the selected storms
// opts.runs times, prints each run's tables and, with several runs, the medians, and tears
// the environment down whatever happened.
func run(ctx context.Context, opts options, out io.Writer) error {
	if opts.scale > 0 || opts.soak > 0 {
		e, err := newEnv(ctx, os.Getenv(envMySQLDSN), os.Getenv(envRedisAddr))
		if err != nil {
			return err
		}
		defer e.close()
		if opts.soak > 0 {
			return runSoak(ctx, e, opts, out)
		}
		return runScale(ctx, e, opts, out)
	}
	variants := selectVariants(allVariants(), opts.only)
	storms := selectStorms(allStorms(), opts.only)
	if len(variants) == 0 && len(storms) == 0 {
		return fmt.Errorf("-only %q selects nothing", opts.only)
	}
	e, err := newEnv(ctx, os.Getenv(envMySQLDSN), os.Getenv(envRedisAddr))
	if err != nil {
		return err
	}
	defer e.close()
	fmt.Fprintf(out, "bench: database %s, redis prefix %s, -c %d, -d %s in %d interleaved chunk(s), %d run(s), GOMAXPROCS %d\n",
		e.dbName, e.prefix, opts.concurrency, opts.duration, opts.chunks, opts.runs, runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "load: %s\n\n", loadAverage())

	var (
		runs      [][]row
		stormRuns [][]stormResult
	)
	for i := range opts.runs {
		fmt.Fprintf(out, "run %d of %d (load %s)\n", i+1, opts.runs, loadAverage())
		if len(variants) > 0 {
			rows, err := runVariants(ctx, e, variants, opts)
			if err != nil {
				return err
			}
			runs = append(runs, rows)
			printRun(out, rows)
		}
		if len(storms) > 0 {
			results, err := runStorms(ctx, e, storms, opts.stormSize)
			if err != nil {
				return err
			}
			stormRuns = append(stormRuns, results)
			printStorms(out, results)
		}
	}
	if opts.runs > 1 {
		printMedians(out, runs)
		printStormSummary(out, stormRuns)
	}
	printGoals(out, runs)
	return nil
}

// loadAverage is the machine's 1-, 5- and 15-minute load averages, as /proc/loadavg gives
// them, printed with the figures they were measured under.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ") + " (1, 5, 15 min)"
}
