package drill

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"
)

// config is everything the drill is told, from flags and the environment. Flags win over the
// environment, the environment over the defaults, which match `make run`'s demo server.
type config struct {
	// URL is the base address of the running oncepay server, without a trailing slash.
	URL string
	// UserKey is the API key of the user who places orders and recharges (alice in the demo).
	UserKey string
	// OtherUserKey is a second user's API key (bob in the demo); the flash sale alternates
	// buyers between the two users.
	OtherUserKey string
	// AdminKey is the bearer key for /v1/admin/*.
	AdminKey string
	// ChannelSecret signs payment and recharge notifications, like a payment channel would.
	ChannelSecret string
	// Kafka lists the brokers to publish payment notifications to; empty disables the
	// Kafka path and the scenarios fire their HTTP copies only.
	Kafka []string
	// Only selects scenarios by id (I1..I18, flash-sale); empty runs them all.
	Only []string
	// JSON prints a JSON document instead of the table.
	JSON bool
	// HTML, when set, is the file the self-contained HTML report is written to: per scenario
	// and target, a timeline of every copy and the layer that answered it.
	HTML string
	// Serial runs one scenario at a time, in catalog order, instead of all at once: slower,
	// but each scenario's counter delta is its own.
	Serial bool
	// Payments is how many runs that have oncepay apply a payment may go at once; 0 means no
	// limit. With ONCEPAY_CHAOS_PAYMENT_DELAY every payment sleeps inside its database
	// transaction, and on the embedded SQLite that holds the database's one write lock for
	// the whole delay: two such runs at once make every other write wait past SQLite's busy
	// timeout. One at a time suits SQLite; MySQL, with row locks, takes any number.
	Payments int
	// Sim is the base URL of the channel simulator that oncepay calls, whose /sim/ controls
	// (faults, the buyer's payment, its state) I8 and I9 drive; empty learns it from the
	// pay_url of the first trade oncepay opens (the embedded simulator's own base URL).
	Sim string
	// Lab decides whether the lab scenarios run: auto probes GET /lab/.
	Lab labMode
	// Settle is how long, at most, the drill waits for its Kafka copies to be consumed before
	// it judges the effect anyway; the consumer group's committed offsets show when they are.
	Settle time.Duration
	// Wait is how long, at most, the drill waits for the server to answer GET /readyz, so that
	// it can be started right after the server.
	Wait time.Duration
	// ServerBin is the oncepay binary I14 starts its own instances from, on a private primary
	// and replica; empty looks for oncepay-lab, then oncepay, beside the drill's executable.
	ServerBin string
}

// labMode is the --lab setting.
type labMode string

// The --lab settings.
const (
	labAuto labMode = "auto"
	labOn   labMode = "on"
	labOff  labMode = "off"
)

// parseLabMode accepts auto, on and off, and the usual spellings of true and false.
func parseLabMode(s string) (labMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return labAuto, nil
	case "on", "true", "yes", "1":
		return labOn, nil
	case "off", "false", "no", "0":
		return labOff, nil
	}
	return "", fmt.Errorf("--lab=%q: use auto, on or off", s)
}

// Environment variables the drill reads. The ONCEPAY_* names are the server's own, so one
// environment configures both.
const (
	envURL           = "ONCEPAY_DRILL_URL"
	envAdminKey      = "ONCEPAY_ADMIN_KEY"
	envChannelSecret = "ONCEPAY_CHANNEL_SECRET"
	envKafkaBrokers  = "ONCEPAY_KAFKA_BROKERS"
	// envEmbeddedKafka is where the server's embedded broker listens when
	// ONCEPAY_KAFKA_BROKERS is empty; the drill follows it the same way.
	envEmbeddedKafka = "ONCEPAY_EMBEDDED_KAFKA_ADDR"
	// envSimURL is the channel simulator's base URL (--sim).
	envSimURL = "ONCEPAY_DRILL_SIM_URL"
)

// parseConfig reads args and the environment (through lookup, os.LookupEnv in production).
// A flag given on the command line wins; otherwise its environment variable, when set to a
// non-empty value, replaces the default. The environment is applied after parsing, so that -h
// shows the built-in defaults and never prints a secret taken from the environment. An empty
// variable counts as unset, as it does for the server: an empty ONCEPAY_KAFKA_BROKERS means
// "the embedded broker", not "no Kafka"; only an explicit `--kafka=` disables the Kafka path.
// It returns flag.ErrHelp for -h.
func parseConfig(args []string, lookup func(string) (string, bool), stderr io.Writer) (config, error) {
	var cfg config
	var kafka, only, lab string
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.URL, "url", "http://localhost:8080", "base URL of the running oncepay server (env "+envURL+")")
	fs.StringVar(&cfg.UserKey, "user-key", "demo-alice-key", "API key of the user who orders and recharges")
	fs.StringVar(&cfg.OtherUserKey, "other-user-key", "demo-bob-key", "API key of a second user")
	fs.StringVar(&cfg.AdminKey, "admin-key", "dev-admin-key", "admin bearer key (env "+envAdminKey+")")
	fs.StringVar(&cfg.ChannelSecret, "channel-secret", "dev-channel-secret", "HMAC-SHA256 key that signs notifications (env "+envChannelSecret+")")
	fs.StringVar(&kafka, "kafka", "127.0.0.1:19092", "comma-separated Kafka brokers; empty (--kafka=) disables the Kafka path (env "+envKafkaBrokers+", else "+envEmbeddedKafka+")")
	fs.StringVar(&only, "only", "", "comma-separated scenarios to run: "+strings.Join(scenarioIDs(), ","))
	fs.BoolVar(&cfg.JSON, "json", false, "print a JSON document instead of the table")
	fs.StringVar(&cfg.HTML, "html", "", "also write a self-contained HTML report, with a timeline of every copy, to this file")
	fs.BoolVar(&cfg.Serial, "serial", false, "run one scenario at a time instead of all at once (slower; per-scenario metrics)")
	fs.IntVar(&cfg.Payments, "payments", 0, "how many scenarios that pay through oncepay may run at once, 0 = no limit")
	fs.StringVar(&cfg.Sim, "sim", "", "base URL of the channel simulator oncepay calls (I8, I9); empty: learned from the pay_url of a trade (env "+envSimURL+")")
	fs.StringVar(&lab, "lab", string(labAuto), "run the lab scenarios: auto (when GET /lab/ answers non-404), on or off")
	fs.DurationVar(&cfg.Settle, "settle", 30*time.Second, "how long, at most, to wait for the Kafka copies to be consumed")
	fs.StringVar(&cfg.ServerBin, "server-bin", "", "the oncepay binary I14 starts its instances from (empty: oncepay-lab or oncepay beside the drill)")
	fs.DurationVar(&cfg.Wait, "wait", 10*time.Second, "how long, at most, to wait for GET /readyz to answer 200")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: drill [flags]\n\nRuns oncepay's incident drills against a running server and prints a verdict table.\nExit status: 0 every guarantee held, 1 a violation, 2 a usage or connection error.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q (every setting is a flag; see -h)", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	fromEnv := func(dst *string, flagName string, names ...string) {
		if given[flagName] {
			return
		}
		for _, name := range names {
			if v, ok := lookup(name); ok && v != "" {
				*dst = v
				return
			}
		}
	}
	fromEnv(&cfg.URL, "url", envURL)
	fromEnv(&cfg.AdminKey, "admin-key", envAdminKey)
	fromEnv(&cfg.ChannelSecret, "channel-secret", envChannelSecret)
	fromEnv(&kafka, "kafka", envKafkaBrokers, envEmbeddedKafka)
	fromEnv(&cfg.Sim, "sim", envSimURL)

	var errs []error
	u, err := parseBaseURL(cfg.URL)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.URL = u
	if cfg.Sim != "" {
		sim, err := parseBaseURL(cfg.Sim)
		if err != nil {
			errs = append(errs, fmt.Errorf("--sim: %w", err))
		}
		cfg.Sim = sim
	}
	cfg.Kafka = splitList(kafka)
	cfg.Only, err = parseOnly(only)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Lab, err = parseLabMode(lab)
	if err != nil {
		errs = append(errs, err)
	}
	if cfg.Settle < 0 || cfg.Wait < 0 {
		errs = append(errs, fmt.Errorf("--settle=%s and --wait=%s must not be negative", cfg.Settle, cfg.Wait))
	}
	if cfg.Payments < 0 {
		errs = append(errs, fmt.Errorf("--payments=%d must not be negative (0 means no limit)", cfg.Payments))
	}
	if cfg.UserKey == "" || cfg.OtherUserKey == "" || cfg.AdminKey == "" || cfg.ChannelSecret == "" {
		errs = append(errs, errors.New("--user-key, --other-user-key, --admin-key and --channel-secret must not be empty"))
	}
	return cfg, errors.Join(errs...)
}

// parseBaseURL checks that raw is an absolute http(s) URL and drops a trailing slash, so paths
// can be appended as they are written in docs/contract.md.
func parseBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return raw, fmt.Errorf("--url=%q: want an absolute http(s) URL such as http://localhost:8080", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// parseOnly turns "i1, I3,flash-sale" into canonical scenario ids, refusing unknown ones.
func parseOnly(raw string) ([]string, error) {
	var ids []string
	for _, name := range splitList(raw) {
		id, ok := canonicalID(name)
		if !ok {
			return nil, fmt.Errorf("--only: unknown scenario %q (known: %s)", name, strings.Join(scenarioIDs(), ", "))
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// splitList splits a comma-separated list, trimming spaces and dropping empty items.
func splitList(raw string) []string {
	var out []string
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
