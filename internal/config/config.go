// Package config loads oncepay's configuration from ONCEPAY_* environment variables into one
// struct, validates it with one actionable message per problem, and masks secrets when the
// configuration is logged: a secret is never printed, not even a prefix of it.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/oncepay/oncepay/internal/platform/keyring"
)

// RedisFailureMode says what the idempotency layers do when Redis cannot be reached.
type RedisFailureMode string

const (
	// RedisDegrade lets the token, lock and cache layers step aside; the dedup record and the
	// state preconditions in the database still give exactly-once.
	RedisDegrade RedisFailureMode = "degrade"
	// RedisReject answers 503 unavailable while Redis is unreachable.
	RedisReject RedisFailureMode = "reject"
)

// The defaults that are more than a value: the dev secrets, which production refuses and
// the start-up banner shows, and the Redis key prefix.
const (
	// DevChannelSecret is the default ONCEPAY_CHANNEL_SECRET, for the embedded database only.
	DevChannelSecret = "dev-channel-secret"
	// DevAdminKey is the default ONCEPAY_ADMIN_KEY, for the embedded database only.
	DevAdminKey = "dev-admin-key"
	// DefaultRedisPrefix is the default ONCEPAY_REDIS_PREFIX.
	DefaultRedisPrefix = "oncepay:"
	// maxRedisPrefix bounds ONCEPAY_REDIS_PREFIX: it is repeated in every key.
	maxRedisPrefix = 64
)

// Config is every setting oncepay reads. The env tag names a field's variable and envDefault
// its default, which an unset or blank variable gets (values are trimmed); github.com/caarlos0/env
// parses them. A field without envDefault whose default depends on other settings gets it in
// LoadFrom, which the field's comment says; env:"-" marks the three lists LoadFrom parses by hand
// (ParseRedisAddrs, parseChannels, parseCIDRs). envHint is the advice of an integer's parse error.
type Config struct {
	// HTTPAddr is the address the HTTP server listens on. Default: 127.0.0.1:8080 while
	// either secret is its dev-* default, :8080 otherwise.
	HTTPAddr string `env:"ONCEPAY_HTTP_ADDR"`
	// MySQLDSN is a go-sql-driver DSN; empty means the embedded SQLite file in DataDir.
	MySQLDSN string `env:"ONCEPAY_MYSQL_DSN"`
	// MySQLWsrepSyncWait is the wsrep_sync_wait bitmask every connection sets when the server
	// is a MariaDB Galera node (wsrep_on): 1 makes BEGIN and every read wait until the node
	// has applied what the cluster committed before it, so that a payment report reaching
	// one node right after its order committed on another finds the order. 0 leaves the
	// server's setting (MariaDB's default 0: a node may answer from before the latest
	// commit). Ignored on a server that is not a Galera node, and when the DSN sets
	// wsrep_sync_wait itself.
	MySQLWsrepSyncWait int `env:"ONCEPAY_MYSQL_WSREP_SYNC_WAIT" envDefault:"1" envHint:"use a wsrep_sync_wait bitmask in 0..15: 1 waits before reads and BEGIN, 0 leaves the server's setting"`
	// DataDir is where embedded state (the SQLite file) lives.
	DataDir string `env:"ONCEPAY_DATA_DIR" envDefault:"./data"`
	// RedisAddrs are the host:port addresses of ONCEPAY_REDIS_ADDR, a comma list: one is a
	// single Redis server, several are the seed nodes of a Redis Cluster (any of its nodes;
	// the client learns the rest from them). Empty means an embedded Redis on
	// EmbeddedRedisAddr.
	RedisAddrs []string `env:"-"`
	// EmbeddedRedisAddr is where the embedded Redis listens when RedisAddr is empty.
	EmbeddedRedisAddr string `env:"ONCEPAY_EMBEDDED_REDIS_ADDR" envDefault:"127.0.0.1:16379"`
	// RedisDB is the Redis logical database, 0..15; it must be 0 with a Redis Cluster, which
	// has no other.
	RedisDB int `env:"ONCEPAY_REDIS_DB" envDefault:"0" envHint:"use a Redis logical database in 0..15"`
	// RedisPrefix starts every Redis key oncepay writes, so that several deployments can
	// share one Redis. It holds no '{' or '}': the hash tag that keeps the keys of one
	// idempotency key in one Redis Cluster slot is added after it.
	RedisPrefix string `env:"ONCEPAY_REDIS_PREFIX" envDefault:"oncepay:"`
	// KafkaBrokers is the list of Kafka brokers; empty means an embedded broker.
	KafkaBrokers []string `env:"ONCEPAY_KAFKA_BROKERS"`
	// EmbeddedKafkaAddr is where the embedded Kafka broker listens when KafkaBrokers is empty.
	EmbeddedKafkaAddr string `env:"ONCEPAY_EMBEDDED_KAFKA_ADDR" envDefault:"127.0.0.1:19092"`
	// ChannelSecret is the HMAC-SHA256 key of ONCEPAY_CHANNEL_SECRET: the secret of every
	// channel that has no ONCEPAY_CHANNEL_SECRET_<NAME> of its own (see Channels).
	ChannelSecret string `env:"ONCEPAY_CHANNEL_SECRET" envDefault:"dev-channel-secret"`
	// AdminKey is the bearer key for /v1/admin/*.
	AdminKey string `env:"ONCEPAY_ADMIN_KEY" envDefault:"dev-admin-key"`
	// SeedDemo seeds the demo users and SKUs. Default: true with the embedded DB, else false.
	SeedDemo bool `env:"ONCEPAY_SEED_DEMO"`
	// OrderTTL is how long an order may stay unpaid before the close job closes it.
	OrderTTL time.Duration `env:"ONCEPAY_ORDER_TTL" envDefault:"15m"`
	// LockTTL is the Redis lock lease; the watchdog renews it every LockTTL/3 (I4).
	LockTTL time.Duration `env:"ONCEPAY_LOCK_TTL" envDefault:"30s"`
	// DedupRetention is how long dedup records are kept before they may be purged (I6).
	DedupRetention time.Duration `env:"ONCEPAY_DEDUP_RETENTION" envDefault:"720h"`
	// MaxRedeliveryWindow is the longest time after which any path may still redeliver a
	// request; DedupRetention must cover it (I6).
	MaxRedeliveryWindow time.Duration `env:"ONCEPAY_MAX_REDELIVERY_WINDOW" envDefault:"72h"`
	// RedisFailureMode is what happens to requests while Redis is unreachable.
	RedisFailureMode RedisFailureMode `env:"ONCEPAY_REDIS_FAILURE_MODE" envDefault:"degrade"`
	// NodeID is this instance's snowflake node id, 0..1023, distinct per instance.
	NodeID int64 `env:"ONCEPAY_NODE_ID" envDefault:"1" envHint:"use a number in 0..1023, distinct per instance"`
	// IdempotencyTokenTTL is how long a one-time token of POST /v1/idempotency-tokens stays
	// usable (I7); at least 1s. Redis keeps the expiry, on its own clock.
	IdempotencyTokenTTL time.Duration `env:"ONCEPAY_IDEMPOTENCY_TOKEN_TTL" envDefault:"10m"`
	// CloseJobInterval is how often the close-expired-orders job runs.
	CloseJobInterval time.Duration `env:"ONCEPAY_CLOSE_JOB_INTERVAL" envDefault:"30s"`
	// PurgeJobInterval is how often the purge-dedup-records job runs.
	PurgeJobInterval time.Duration `env:"ONCEPAY_PURGE_JOB_INTERVAL" envDefault:"1h"`
	// ChannelURL is the payment channel's base URL; empty, or EmbeddedChannelURL, means the
	// embedded channel simulator, started in process on EmbeddedChannelAddr. A real database
	// needs it set: to a channel, or to EmbeddedChannelURL on purpose.
	ChannelURL string `env:"ONCEPAY_CHANNEL_URL"`
	// EmbeddedChannelAddr is where the embedded channel simulator listens when ChannelURL is
	// empty; its state is kept in DataDir/channelsim.json.
	EmbeddedChannelAddr string `env:"ONCEPAY_EMBEDDED_CHANNEL_ADDR" envDefault:"127.0.0.1:18090"`
	// ChannelSimSchedule is the embedded simulator's notification retry schedule (Alipay's);
	// the first attempt is immediate.
	ChannelSimSchedule []time.Duration `env:"ONCEPAY_CHANNEL_SIM_SCHEDULE" envDefault:"4m,10m,10m,1h,2h,6h,15h"`
	// PublicURL is oncepay's base URL as the channel reaches it: notify_url is built on it.
	// Default: http://<host:port of HTTPAddr>, localhost for an empty or wildcard host.
	PublicURL string `env:"ONCEPAY_PUBLIC_URL"`
	// ChannelName is the channel oncepay opens trades with (POST /v1/orders/{order_id}/payments):
	// its name in notifications and keys (channel + trade_no). It is one of Channels; default
	// simpay with the embedded simulator, else the first of ONCEPAY_CHANNELS.
	ChannelName string `env:"ONCEPAY_CHANNEL_NAME"`
	// Channels are the channels oncepay accepts reports from and calls (ONCEPAY_CHANNELS), each
	// with its own base URL and secret. A report naming another channel is refused (400
	// unknown_channel) and stores nothing; a payment is refunded through the channel that took
	// it.
	Channels []Channel `env:"-"`
	// SignatureTolerance is how far a report's signed timestamp may lie from the server's
	// clock over HTTP (ONCEPAY_SIGNATURE_TOLERANCE); Kafka copies may be as old as
	// MaxRedeliveryWindow.
	SignatureTolerance time.Duration `env:"ONCEPAY_SIGNATURE_TOLERANCE" envDefault:"5m"`
	// ChannelTimeout bounds each attempt of a call to the channel; a timeout is indefinite (I8).
	ChannelTimeout time.Duration `env:"ONCEPAY_CHANNEL_TIMEOUT" envDefault:"5s"`
	// ChannelRetries is how many times an indefinite call is retried, with the same number.
	ChannelRetries int `env:"ONCEPAY_CHANNEL_RETRIES" envDefault:"3" envHint:"use 0..10 (default 3)"`
	// ReconcileJobInterval is how often reconcile-payments asks the channel about pending
	// orders that have a trade (I9).
	ReconcileJobInterval time.Duration `env:"ONCEPAY_RECONCILE_JOB_INTERVAL" envDefault:"1m"`
	// RefundJobInterval is how often resume-refunds finishes refunds left PENDING or
	// SUBMITTED and refunds the anomalies that call for it (I8).
	RefundJobInterval time.Duration `env:"ONCEPAY_REFUND_JOB_INTERVAL" envDefault:"1m"`
	// WebhookSchedule is the webhook retry schedule after the first attempt, each pause
	// jittered; after its last attempt a delivery fails and its endpoint is marked failing.
	WebhookSchedule []time.Duration `env:"ONCEPAY_WEBHOOK_SCHEDULE" envDefault:"10s,1m,5m,30m,2h,6h,12h,24h,48h,72h"`
	// WebhookTimeout bounds each webhook attempt: an answer later than this is a failure.
	WebhookTimeout time.Duration `env:"ONCEPAY_WEBHOOK_TIMEOUT" envDefault:"10s"`
	// WebhookInterval is how often each instance looks for events to sequence and deliveries
	// that are due.
	WebhookInterval time.Duration `env:"ONCEPAY_WEBHOOK_INTERVAL" envDefault:"500ms"`
	// WebhookRotationGrace is how long a rotated-out secret keeps signing beside the new one,
	// unless the rotation names its own grace.
	WebhookRotationGrace time.Duration `env:"ONCEPAY_WEBHOOK_ROTATION_GRACE" envDefault:"24h"`
	// WebhookDev allows http:// and loopback webhook URLs, for a receiver on the developer's
	// machine. Default: true with the embedded DB, else false (https, no loopback).
	WebhookDev bool `env:"ONCEPAY_WEBHOOK_DEV"`
	// WebhookAllowCIDRs are the private networks webhooks may be sent to: an address inside one
	// passes the address policy's private, CGNAT, unique-local, link-local and loopback rules,
	// never the metadata addresses (internal/webhook/addr.go). Empty: public addresses only.
	WebhookAllowCIDRs []netip.Prefix `env:"-"`
	// WebhookKeys is the key ring that seals the webhook signing secrets at rest
	// ("kid:base64 of 32 bytes,…"; the first seals, all open: internal/platform/keyring).
	// Default: keyring.DevKeys, a public key, with the embedded DB only; required otherwise.
	WebhookKeys string `env:"ONCEPAY_WEBHOOK_KEYS"`
	// EventRetention is how long events, deliveries and their attempts are kept
	// (GET /v1/admin/events); the purge-events job deletes older ones.
	EventRetention time.Duration `env:"ONCEPAY_EVENT_RETENTION" envDefault:"720h"`
}

// Channel is one payment channel of ONCEPAY_CHANNELS.
type Channel struct {
	// Name is the channel's name in reports and keys, in canonical form (^[a-z][a-z0-9_]{0,31}$).
	Name string
	// URL is the channel's base URL (ONCEPAY_CHANNEL_URL_<NAME>, default ONCEPAY_CHANNEL_URL);
	// empty means the embedded simulator.
	URL string
	// Secret signs its reports and oncepay's calls to it (ONCEPAY_CHANNEL_SECRET_<NAME>,
	// default ONCEPAY_CHANNEL_SECRET).
	Secret string
}

// DefaultChannelSimSchedule is the default ONCEPAY_CHANNEL_SIM_SCHEDULE.
const DefaultChannelSimSchedule = "4m,10m,10m,1h,2h,6h,15h"

// EmbeddedChannelURL is the value of ONCEPAY_CHANNEL_URL that asks for the embedded channel
// simulator on purpose: with a real database, an empty ONCEPAY_CHANNEL_URL is a start-up
// error, since a silent fake channel pays any order.
const EmbeddedChannelURL = "embedded"

// DefaultEmbeddedChannels is the default ONCEPAY_CHANNELS while the channel is the embedded
// simulator: its own name and the two the walkthroughs use.
const DefaultEmbeddedChannels = "simpay,alipay,wechat"

// EmbeddedChannel reports whether the channel is the simulator started in process.
func (c Config) EmbeddedChannel() bool {
	return c.ChannelURL == "" || c.ChannelURL == EmbeddedChannelURL
}

// ChannelNamed returns the configured channel called name.
func (c Config) ChannelNamed(name string) (Channel, bool) {
	for _, ch := range c.Channels {
		if ch.Name == name {
			return ch, true
		}
	}
	return Channel{}, false
}

// EmbeddedDB reports whether the database is the embedded SQLite file.
func (c Config) EmbeddedDB() bool { return c.MySQLDSN == "" }

// EmbeddedRedis reports whether Redis runs in process.
func (c Config) EmbeddedRedis() bool { return len(c.RedisAddrs) == 0 }

// RedisCluster reports whether Redis is a Redis Cluster: ONCEPAY_REDIS_ADDR lists several
// addresses.
func (c Config) RedisCluster() bool { return len(c.RedisAddrs) > 1 }

// EmbeddedKafka reports whether Kafka runs in process.
func (c Config) EmbeddedKafka() bool { return len(c.KafkaBrokers) == 0 }

// DevSecrets reports whether both secrets are still the dev-* defaults. Only then may the
// start-up banner show the demo keys: the defaults are public, a configured secret is not.
func (c Config) DevSecrets() bool {
	return c.ChannelSecret == DevChannelSecret && c.AdminKey == DevAdminKey
}

// Load reads the configuration from the environment and validates it. The returned error
// lists every problem found, one per line.
func Load() (Config, error) { return LoadFrom(os.LookupEnv) }

// LoadFrom is Load with an injectable lookup, for tests.
func LoadFrom(lookup func(string) (string, bool)) (Config, error) {
	get := func(name, def string) string {
		if v, ok := lookup(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	// The library reads a map, and a lookup cannot be enumerated: fill the map with the
	// variables the tags name, trimmed, leaving the blank ones out so that they get their
	// envDefault. It is never nil: a nil Environment makes the library read os.Environ.
	fields, err := env.GetFieldParams(&Config{})
	if err != nil {
		return Config{}, err
	}
	vars := make(map[string]string, len(fields))
	for _, f := range fields {
		if v := get(f.Key, ""); v != "" {
			vars[f.Key] = v
		}
	}
	var (
		c    Config
		errs []error
	)
	if err := env.ParseWithOptions(&c, env.Options{Environment: vars, FuncMap: parsers}); err != nil {
		errs = append(errs, explain(err, vars)...)
	}

	// What the tags cannot say: the lists parsed by hand, and the defaults that depend on
	// other settings.
	if c.RedisAddrs, err = ParseRedisAddrs(get("ONCEPAY_REDIS_ADDR", "")); err != nil {
		errs = append(errs, err)
	}
	if c.WebhookAllowCIDRs, err = parseCIDRs(get("ONCEPAY_WEBHOOK_ALLOW_CIDRS", "")); err != nil {
		errs = append(errs, err)
	}
	if _, set := vars["ONCEPAY_SEED_DEMO"]; !set {
		c.SeedDemo = c.EmbeddedDB()
	}
	if c.WebhookKeys == "" && c.EmbeddedDB() {
		c.WebhookKeys = keyring.DevKeys
	}
	if _, set := vars["ONCEPAY_WEBHOOK_DEV"]; !set {
		c.WebhookDev = c.EmbeddedDB()
	}
	// While either secret is its public dev-* default, the server listens on loopback only:
	// anyone who can reach it could sign reports or use the admin routes.
	if c.HTTPAddr == "" {
		c.HTTPAddr = ":8080"
		if c.ChannelSecret == DevChannelSecret || c.AdminKey == DevAdminKey {
			c.HTTPAddr = "127.0.0.1:8080"
		}
	}
	c.ChannelURL = strings.TrimRight(c.ChannelURL, "/")
	if c.PublicURL == "" {
		c.PublicURL = defaultPublicURL(c.HTTPAddr)
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	if c.Channels, err = parseChannels(c, get); err != nil {
		errs = append(errs, err)
	}
	if c.ChannelName == "" {
		c.ChannelName = "simpay"
		if !c.EmbeddedChannel() && len(c.Channels) > 0 {
			c.ChannelName = c.Channels[0].Name
		}
	}

	if len(errs) == 0 {
		errs = append(errs, c.validate()...)
	}
	return c, errors.Join(errs...)
}

// parsers are the library's parsers that oncepay replaces, by field type: a negative
// duration is refused, ints take 64 bits (so that a huge ONCEPAY_REDIS_DB is out of range,
// not "not an integer"), a string list is trimmed and drops empty elements
// (ONCEPAY_KAFKA_BROKERS), and a duration list is the simulator's schedule.
var parsers = map[reflect.Type]env.ParserFunc{
	reflect.TypeFor[time.Duration](): func(v string) (any, error) {
		d, err := time.ParseDuration(v)
		if err == nil && d < 0 {
			err = errors.New("negative")
		}
		return d, err
	},
	reflect.TypeFor[int](): func(v string) (any, error) { return strconv.Atoi(v) },
	reflect.TypeFor[[]string](): func(v string) (any, error) {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	},
	reflect.TypeFor[[]time.Duration](): func(v string) (any, error) { return ParseSchedule(v) },
}

// explain turns the library's error, which names struct fields, into one line per problem
// that names the variable, its value and what to write instead.
func explain(err error, vars map[string]string) []error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return []error{err}
	}
	out := make([]error, len(agg.Errors))
	for i, e := range agg.Errors {
		out[i] = e
		var pe env.ParseError
		if !errors.As(e, &pe) {
			continue
		}
		f, ok := reflect.TypeFor[Config]().FieldByName(pe.Name)
		if !ok {
			continue
		}
		name := f.Tag.Get("env")
		raw := vars[name]
		switch {
		case f.Type == reflect.TypeFor[time.Duration]():
			out[i] = fmt.Errorf("%s=%q is not a duration: use Go syntax such as 30s, 15m or 72h", name, raw)
		case f.Type.Kind() == reflect.Bool:
			out[i] = fmt.Errorf("%s=%q is not a boolean: use true or false", name, raw)
		case f.Type.Kind() == reflect.Int || f.Type.Kind() == reflect.Int64:
			out[i] = fmt.Errorf("%s=%q is not an integer: %s", name, raw, f.Tag.Get("envHint"))
		default:
			out[i] = fmt.Errorf("%s=%q: %w", name, raw, pe.Err)
		}
	}
	return out
}

// validate checks the relations between settings once each has parsed.
func (c Config) validate() []error {
	var errs []error
	if c.MySQLWsrepSyncWait < 0 || c.MySQLWsrepSyncWait > 15 {
		errs = append(errs, fmt.Errorf("ONCEPAY_MYSQL_WSREP_SYNC_WAIT=%d is out of range: use a wsrep_sync_wait bitmask in 0..15 (default 1: causal reads on a Galera node)", c.MySQLWsrepSyncWait))
	}
	if c.NodeID < 0 || c.NodeID > 1023 {
		errs = append(errs, fmt.Errorf("ONCEPAY_NODE_ID=%d is out of range: use 0..1023, distinct per instance", c.NodeID))
	}
	if c.RedisDB < 0 || c.RedisDB > 15 {
		errs = append(errs, fmt.Errorf("ONCEPAY_REDIS_DB=%d is out of range: use a Redis logical database in 0..15 (default 0)", c.RedisDB))
	}
	if c.RedisCluster() && c.RedisDB != 0 {
		errs = append(errs, fmt.Errorf("ONCEPAY_REDIS_DB=%d with %d addresses in ONCEPAY_REDIS_ADDR: a Redis Cluster has only database 0; set ONCEPAY_REDIS_DB=0 and keep deployments apart with ONCEPAY_REDIS_PREFIX", c.RedisDB, len(c.RedisAddrs)))
	}
	if strings.ContainsAny(c.RedisPrefix, "{}") {
		errs = append(errs, fmt.Errorf("ONCEPAY_REDIS_PREFIX=%q contains '{' or '}': the Redis Cluster hash tag is added after the prefix; remove the braces", c.RedisPrefix))
	}
	if len(c.RedisPrefix) > maxRedisPrefix {
		errs = append(errs, fmt.Errorf("ONCEPAY_REDIS_PREFIX is %d bytes long: use at most %d, such as %q (the default)", len(c.RedisPrefix), maxRedisPrefix, DefaultRedisPrefix))
	}
	if c.RedisFailureMode != RedisDegrade && c.RedisFailureMode != RedisReject {
		errs = append(errs, fmt.Errorf("ONCEPAY_REDIS_FAILURE_MODE=%q is unknown: use degrade or reject", c.RedisFailureMode))
	}
	if c.IdempotencyTokenTTL < time.Second {
		errs = append(errs, fmt.Errorf("ONCEPAY_IDEMPOTENCY_TOKEN_TTL=%s is too short: use at least 1s (default 10m)", c.IdempotencyTokenTTL))
	}
	if c.LockTTL < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("ONCEPAY_LOCK_TTL=%s is too short: the watchdog renews every TTL/3; use at least 300ms, well above the p99 of the work (default 30s)", c.LockTTL))
	}
	if c.OrderTTL <= 0 {
		errs = append(errs, fmt.Errorf("ONCEPAY_ORDER_TTL=%s must be positive (default 15m)", c.OrderTTL))
	}
	for _, d := range c.WebhookSchedule {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("ONCEPAY_WEBHOOK_SCHEDULE has %s: every pause must be positive, such as 10s,1m,5m", d))
			break
		}
	}
	if c.WebhookTimeout <= 0 || c.WebhookInterval <= 0 || c.EventRetention <= 0 || c.WebhookRotationGrace < 0 {
		errs = append(errs, fmt.Errorf("ONCEPAY_WEBHOOK_TIMEOUT=%s, ONCEPAY_WEBHOOK_INTERVAL=%s and ONCEPAY_EVENT_RETENTION=%s must be positive, ONCEPAY_WEBHOOK_ROTATION_GRACE=%s not negative",
			c.WebhookTimeout, c.WebhookInterval, c.EventRetention, c.WebhookRotationGrace))
	}
	// I6: rows purged before the last redelivery let a late copy through the dedup table.
	if c.DedupRetention < c.MaxRedeliveryWindow {
		errs = append(errs, fmt.Errorf("ONCEPAY_DEDUP_RETENTION=%s is shorter than ONCEPAY_MAX_REDELIVERY_WINDOW=%s: dedup records would be purged while copies can still arrive (I6); raise the retention", c.DedupRetention, c.MaxRedeliveryWindow))
	}
	if c.CloseJobInterval <= 0 || c.PurgeJobInterval <= 0 {
		errs = append(errs, errors.New("ONCEPAY_CLOSE_JOB_INTERVAL and ONCEPAY_PURGE_JOB_INTERVAL must be positive"))
	}
	if !c.EmbeddedChannel() && !httpURL(c.ChannelURL) {
		errs = append(errs, fmt.Errorf("ONCEPAY_CHANNEL_URL=%q is not an http(s) URL: use a base URL such as https://channel.example.com, or leave it empty for the embedded simulator", c.ChannelURL))
	}
	if c.EmbeddedChannel() {
		if _, _, err := net.SplitHostPort(c.EmbeddedChannelAddr); err != nil {
			errs = append(errs, fmt.Errorf("ONCEPAY_EMBEDDED_CHANNEL_ADDR=%q is not host:port: use such as 127.0.0.1:18090 (default)", c.EmbeddedChannelAddr))
		}
	}
	if !httpURL(c.PublicURL) {
		errs = append(errs, fmt.Errorf("ONCEPAY_PUBLIC_URL=%q is not an http(s) URL: use the base URL the channel reaches oncepay at, such as https://pay.example.com", c.PublicURL))
	}
	if c.ChannelTimeout <= 0 {
		errs = append(errs, fmt.Errorf("ONCEPAY_CHANNEL_TIMEOUT=%s must be positive (default 5s)", c.ChannelTimeout))
	}
	if c.ChannelRetries < 0 || c.ChannelRetries > 10 {
		errs = append(errs, fmt.Errorf("ONCEPAY_CHANNEL_RETRIES=%d is out of range: use 0..10 (default 3)", c.ChannelRetries))
	}
	if c.ReconcileJobInterval <= 0 || c.RefundJobInterval <= 0 {
		errs = append(errs, errors.New("ONCEPAY_RECONCILE_JOB_INTERVAL and ONCEPAY_REFUND_JOB_INTERVAL must be positive"))
	}
	if c.ChannelURL == "" && !c.EmbeddedDB() {
		errs = append(errs, errors.New("ONCEPAY_CHANNEL_URL is empty while ONCEPAY_MYSQL_DSN points at a real database: set the payment channel's base URL, or ONCEPAY_CHANNEL_URL=embedded to run the channel simulator on purpose (it pays any order on request: never in production)"))
	}
	urls := map[string]string{}
	for _, ch := range c.Channels {
		if other, taken := urls[ch.URL]; taken && ch.URL != "" {
			errs = append(errs, fmt.Errorf("ONCEPAY_CHANNELS %s and %s share the base URL %s: oncepay's calls name no channel, so the two would be one provider, and a report under one name could have it refund the other's trade; give each its own ONCEPAY_CHANNEL_URL_<NAME>, or list the provider once", other, ch.Name, ch.URL))
		}
		urls[ch.URL] = ch.Name
	}
	if len(c.Channels) == 0 {
		errs = append(errs, errors.New("ONCEPAY_CHANNELS is empty while ONCEPAY_CHANNEL_URL names a real channel: list the channels oncepay accepts reports from, such as alipay,wechat"))
	} else if _, ok := c.ChannelNamed(c.ChannelName); !ok {
		errs = append(errs, fmt.Errorf("ONCEPAY_CHANNEL_NAME=%q is not one of ONCEPAY_CHANNELS (%s): trades are opened with a configured channel", c.ChannelName, c.channelList()))
	}
	if c.SignatureTolerance < time.Second {
		errs = append(errs, fmt.Errorf("ONCEPAY_SIGNATURE_TOLERANCE=%s is too short: a report's clock and ours differ by more than that; use at least 1s (default 5m)", c.SignatureTolerance))
	}
	if c.WebhookKeys == "" {
		errs = append(errs, errors.New("ONCEPAY_WEBHOOK_KEYS is empty while ONCEPAY_MYSQL_DSN points at a real database: set the key ring that seals webhook secrets, such as main:$(openssl rand -base64 32)"))
	} else if _, err := keyring.Parse(c.WebhookKeys); err != nil {
		errs = append(errs, fmt.Errorf("ONCEPAY_WEBHOOK_KEYS: %v", err))
	} else if !c.EmbeddedDB() && c.WebhookKeys == keyring.DevKeys {
		errs = append(errs, errors.New("ONCEPAY_WEBHOOK_KEYS is the public dev key while ONCEPAY_MYSQL_DSN points at a real database: set a real key ring"))
	}
	if !c.EmbeddedDB() {
		for _, ch := range c.Channels {
			if strings.HasPrefix(ch.Secret, "dev-") && ch.Secret != c.ChannelSecret {
				errs = append(errs, fmt.Errorf("ONCEPAY_CHANNEL_SECRET_%s is a dev-* value while ONCEPAY_MYSQL_DSN points at a real database: set a real secret", strings.ToUpper(ch.Name)))
			}
		}
		if strings.HasPrefix(c.ChannelSecret, "dev-") {
			errs = append(errs, errors.New("ONCEPAY_CHANNEL_SECRET is a dev-* default while ONCEPAY_MYSQL_DSN points at a real database: set a real secret"))
		}
		if strings.HasPrefix(c.AdminKey, "dev-") {
			errs = append(errs, errors.New("ONCEPAY_ADMIN_KEY is a dev-* default while ONCEPAY_MYSQL_DSN points at a real database: set a real key"))
		}
	}
	return errs
}

// LogValue renders the configuration for a start-up log line with secrets masked.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("http_addr", c.HTTPAddr),
		slog.String("mysql_dsn", maskDSN(c.MySQLDSN)),
		slog.Int("mysql_wsrep_sync_wait", c.MySQLWsrepSyncWait),
		slog.String("data_dir", c.DataDir),
		slog.String("redis_addr", orEmbedded(strings.Join(c.RedisAddrs, ","), c.EmbeddedRedisAddr)),
		slog.Int("redis_db", c.RedisDB),
		slog.String("redis_prefix", c.RedisPrefix),
		slog.String("kafka_brokers", orEmbedded(strings.Join(c.KafkaBrokers, ","), c.EmbeddedKafkaAddr)),
		slog.String("channel_secret", mask(c.ChannelSecret, DevChannelSecret)),
		slog.String("admin_key", mask(c.AdminKey, DevAdminKey)),
		slog.Bool("seed_demo", c.SeedDemo),
		slog.String("order_ttl", c.OrderTTL.String()),
		slog.String("lock_ttl", c.LockTTL.String()),
		slog.String("dedup_retention", c.DedupRetention.String()),
		slog.String("max_redelivery_window", c.MaxRedeliveryWindow.String()),
		slog.String("redis_failure_mode", string(c.RedisFailureMode)),
		slog.Int64("node_id", c.NodeID),
		slog.String("idempotency_token_ttl", c.IdempotencyTokenTTL.String()),
		slog.String("close_job_interval", c.CloseJobInterval.String()),
		slog.String("purge_job_interval", c.PurgeJobInterval.String()),
		slog.String("channel_url", orEmbedded(strings.TrimPrefix(c.ChannelURL, EmbeddedChannelURL), c.EmbeddedChannelAddr)),
		slog.String("channel_sim_schedule", schedule(c.ChannelSimSchedule)),
		slog.String("public_url", c.PublicURL),
		slog.String("channel_name", c.ChannelName),
		slog.String("channels", c.channelsLogged()),
		slog.String("signature_tolerance", c.SignatureTolerance.String()),
		slog.String("channel_timeout", c.ChannelTimeout.String()),
		slog.Int("channel_retries", c.ChannelRetries),
		slog.String("reconcile_job_interval", c.ReconcileJobInterval.String()),
		slog.String("refund_job_interval", c.RefundJobInterval.String()),
		slog.String("webhook_schedule", schedule(c.WebhookSchedule)),
		slog.String("webhook_timeout", c.WebhookTimeout.String()),
		slog.String("webhook_interval", c.WebhookInterval.String()),
		slog.String("webhook_rotation_grace", c.WebhookRotationGrace.String()),
		slog.Bool("webhook_dev", c.WebhookDev),
		slog.Any("webhook_allow_cidrs", c.WebhookAllowCIDRs),
		slog.String("webhook_keys", mask(c.WebhookKeys, keyring.DevKeys)),
		slog.String("event_retention", c.EventRetention.String()),
	)
}

// schedule renders a retry schedule as its setting is written ("10s,1m,5m,2h"), not as the
// nanoseconds a JSON log line would print.
func schedule(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		parts[i] = s
	}
	return strings.Join(parts, ",")
}

// parseChannels reads ONCEPAY_CHANNELS and each channel's ONCEPAY_CHANNEL_URL_<NAME> and
// ONCEPAY_CHANNEL_SECRET_<NAME>. The list defaults to DefaultEmbeddedChannels while the
// channel is the embedded simulator, and is required otherwise: oncepay never guesses which
// channels may pay it.
func parseChannels(c Config, get func(name, def string) string) ([]Channel, error) {
	def := ""
	if c.EmbeddedChannel() {
		def = DefaultEmbeddedChannels
	}
	raw := get("ONCEPAY_CHANNELS", def)
	if raw == "" {
		return nil, nil // validate says what to do
	}
	var out []Channel
	seen := map[string]bool{}
	for _, name := range strings.Split(raw, ",") {
		name = strings.TrimSpace(name)
		switch {
		case !validChannelName(name):
			return nil, fmt.Errorf("ONCEPAY_CHANNELS element %q is not a channel name: use a lowercase letter, then up to 31 lowercase letters, digits or underscores", name)
		case seen[name]:
			return nil, fmt.Errorf("ONCEPAY_CHANNELS lists %q twice: list each channel once", name)
		}
		seen[name] = true
		upper := strings.ToUpper(name)
		ch := Channel{Name: name, Secret: get("ONCEPAY_CHANNEL_SECRET_"+upper, c.ChannelSecret)}
		if !c.EmbeddedChannel() {
			ch.URL = c.ChannelURL
		}
		if u := get("ONCEPAY_CHANNEL_URL_"+upper, ""); u != "" {
			ch.URL = strings.TrimRight(u, "/")
			if !httpURL(ch.URL) {
				return nil, fmt.Errorf("ONCEPAY_CHANNEL_URL_%s=%q is not an http(s) URL: use the channel's base URL, such as https://openapi.alipay.com", upper, ch.URL)
			}
		}
		out = append(out, ch)
	}
	return out, nil
}

// validChannelName is the canonical form of a channel name (web.ValidChannel has the same
// rule for reports; config imports nothing of oncepay).
func validChannelName(name string) bool {
	if len(name) == 0 || len(name) > 32 || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// channelList is the names of Channels, comma-separated.
func (c Config) channelList() string {
	names := make([]string, len(c.Channels))
	for i, ch := range c.Channels {
		names[i] = ch.Name
	}
	return strings.Join(names, ",")
}

// channelsLogged renders Channels for the log: each name with its base URL, never its secret.
func (c Config) channelsLogged() string {
	parts := make([]string, len(c.Channels))
	for i, ch := range c.Channels {
		parts[i] = ch.Name + "@" + orEmbedded(ch.URL, c.EmbeddedChannelAddr)
	}
	return strings.Join(parts, ",")
}

// ParseSchedule parses a comma list of positive durations, such as "4m,10m,1h".
func ParseSchedule(raw string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(raw, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q is not a positive duration: use a comma list such as %s", strings.TrimSpace(part), DefaultChannelSimSchedule)
		}
		out = append(out, d)
	}
	return out, nil
}

// defaultPublicURL is http://<host:port of addr>, with localhost for an empty or wildcard host.
func defaultPublicURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// ParseRedisAddrs parses ONCEPAY_REDIS_ADDR: "" (embedded Redis), one host:port (a Redis
// server) or a comma list of them (the seed nodes of a Redis Cluster). Spaces around an
// element are trimmed; an empty element, an element that is not host:port and an address
// listed twice are errors, because each is a typo that would otherwise change which kind of
// client oncepay opens.
func ParseRedisAddrs(raw string) ([]string, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	var addrs []string
	seen := map[string]bool{}
	for i, a := range strings.Split(raw, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("ONCEPAY_REDIS_ADDR=%q has an empty element at position %d: use host:port, or host:port,host:port,... for a Redis Cluster", raw, i+1)
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("ONCEPAY_REDIS_ADDR element %q is not host:port: use such as redis:6379", a)
		}
		if seen[a] {
			return nil, fmt.Errorf("ONCEPAY_REDIS_ADDR lists %q twice: list each Redis Cluster node once", a)
		}
		seen[a] = true
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// httpURL reports whether s is an absolute http or https URL with a host.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

func orEmbedded(external, embedded string) string {
	if external != "" {
		return external
	}
	return "embedded@" + embedded
}

// Secret placeholders in the logged configuration. A secret is never logged, not even its
// first characters (a prefix narrows a brute force and identifies a leaked key); the log
// says only whether it is the public dev default.
const (
	maskedDev    = "dev default"
	maskedSecret = "set (not shown)"
	maskedEmpty  = "empty"
)

// mask renders a secret for the log: whether it is set, and whether it is the dev default.
func mask(secret, devDefault string) string {
	switch secret {
	case "":
		return maskedEmpty
	case devDefault:
		return maskedDev
	default:
		return maskedSecret
	}
}

// maskDSN hides the password of a go-sql-driver DSN, [user[:password]@][net[(addr)]]/dbname[?params],
// splitting it the way the driver does: the last '/' ends the address, the last '@' before
// it ends the credentials, and the first ':' in them ends the user name.
func maskDSN(dsn string) string {
	if dsn == "" {
		return "embedded sqlite"
	}
	slash := strings.LastIndex(dsn, "/")
	if slash < 0 {
		slash = len(dsn)
	}
	at := strings.LastIndex(dsn[:slash], "@")
	if at < 0 {
		return dsn
	}
	colon := strings.Index(dsn[:at], ":")
	if colon < 0 {
		return dsn
	}
	return dsn[:colon+1] + "****" + dsn[at:]
}

// parseCIDRs reads ONCEPAY_WEBHOOK_ALLOW_CIDRS: a comma list of CIDRs, spaces trimmed, each
// without host bits (10.1.2.3/16 is a typo for 10.1.0.0/16 or 10.1.2.3/32, not a guess).
func parseCIDRs(raw string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(raw, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		switch {
		case err != nil:
			return nil, fmt.Errorf("ONCEPAY_WEBHOOK_ALLOW_CIDRS has %q, which is not a CIDR: use such as 10.20.0.0/16,fd12:3456::/48", f)
		case p != p.Masked():
			return nil, fmt.Errorf("ONCEPAY_WEBHOOK_ALLOW_CIDRS has %q, whose host bits are set: use %s", f, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}
