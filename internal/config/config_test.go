package config_test

import (
	"bytes"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/keyring"
)

// env turns a map into the lookup LoadFrom takes, so that no test reads the real environment.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// realSecrets are non-dev secrets, needed by every case that configures a MySQL DSN.
var realSecrets = map[string]string{
	"ONCEPAY_CHANNEL_SECRET": "s3cret-channel-value",
	"ONCEPAY_ADMIN_KEY":      "s3cret-admin-value",
	"ONCEPAY_WEBHOOK_KEYS":   testWebhookKeys,
}

// testWebhookKeys is a real-looking key ring (two keys, the first seals).
const testWebhookKeys = "k2:UzNjcmV0UzNjcmV0UzNjcmV0UzNjcmV0UzNjcmV0ISE=,k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

// with returns base plus extra, without changing either.
func with(base map[string]string, extra map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(extra))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// defaults is the configuration docs/contract.md promises when no variable is set.
func defaults() config.Config {
	return config.Config{
		HTTPAddr:            "127.0.0.1:8080",
		MySQLDSN:            "",
		MySQLWsrepSyncWait:  1,
		DataDir:             "./data",
		RedisAddrs:          nil,
		EmbeddedRedisAddr:   "127.0.0.1:16379",
		RedisDB:             0,
		RedisPrefix:         "oncepay:",
		KafkaBrokers:        nil,
		EmbeddedKafkaAddr:   "127.0.0.1:19092",
		ChannelSecret:       "dev-channel-secret",
		AdminKey:            "dev-admin-key",
		SeedDemo:            true,
		OrderTTL:            15 * time.Minute,
		LockTTL:             30 * time.Second,
		DedupRetention:      720 * time.Hour,
		MaxRedeliveryWindow: 72 * time.Hour,
		RedisFailureMode:    config.RedisDegrade,
		NodeID:              1,
		IdempotencyTokenTTL: 10 * time.Minute,
		CloseJobInterval:    30 * time.Second,
		PurgeJobInterval:    time.Hour,
		EmbeddedChannelAddr: "127.0.0.1:18090",
		ChannelSimSchedule: []time.Duration{4 * time.Minute, 10 * time.Minute, 10 * time.Minute,
			time.Hour, 2 * time.Hour, 6 * time.Hour, 15 * time.Hour},
		PublicURL:   "http://127.0.0.1:8080",
		ChannelName: "simpay",
		Channels: []config.Channel{
			{Name: "simpay", Secret: "dev-channel-secret"},
			{Name: "alipay", Secret: "dev-channel-secret"},
			{Name: "wechat", Secret: "dev-channel-secret"},
		},
		SignatureTolerance:   5 * time.Minute,
		ChannelTimeout:       5 * time.Second,
		ChannelRetries:       3,
		ReconcileJobInterval: time.Minute,
		RefundJobInterval:    time.Minute,
		WebhookSchedule: []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute,
			2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 72 * time.Hour},
		WebhookTimeout:       10 * time.Second,
		WebhookInterval:      500 * time.Millisecond,
		WebhookRotationGrace: 24 * time.Hour,
		WebhookDev:           true,
		WebhookKeys:          keyring.DevKeys,
		EventRetention:       720 * time.Hour,
	}
}

// everyVariable sets every ONCEPAY_* variable to a value other than its default.
var everyVariable = map[string]string{
	"ONCEPAY_HTTP_ADDR":              "127.0.0.1:9090",
	"ONCEPAY_MYSQL_DSN":              "app:pw@tcp(db:3306)/oncepay?parseTime=true",
	"ONCEPAY_MYSQL_WSREP_SYNC_WAIT":  "3",
	"ONCEPAY_DATA_DIR":               "/var/lib/oncepay",
	"ONCEPAY_REDIS_ADDR":             "redis:6379",
	"ONCEPAY_EMBEDDED_REDIS_ADDR":    "127.0.0.1:26379",
	"ONCEPAY_REDIS_DB":               "15",
	"ONCEPAY_REDIS_PREFIX":           "shop-eu:oncepay:",
	"ONCEPAY_KAFKA_BROKERS":          " k1:9092, ,k2:9092 ",
	"ONCEPAY_EMBEDDED_KAFKA_ADDR":    "127.0.0.1:29092",
	"ONCEPAY_CHANNEL_SECRET":         "prod-channel-secret",
	"ONCEPAY_ADMIN_KEY":              "prod-admin-key",
	"ONCEPAY_SEED_DEMO":              "true",
	"ONCEPAY_ORDER_TTL":              "20m",
	"ONCEPAY_LOCK_TTL":               "45s",
	"ONCEPAY_DEDUP_RETENTION":        "1000h",
	"ONCEPAY_MAX_REDELIVERY_WINDOW":  "96h",
	"ONCEPAY_REDIS_FAILURE_MODE":     "reject",
	"ONCEPAY_NODE_ID":                "1023",
	"ONCEPAY_IDEMPOTENCY_TOKEN_TTL":  "3s",
	"ONCEPAY_CLOSE_JOB_INTERVAL":     "5s",
	"ONCEPAY_PURGE_JOB_INTERVAL":     "10m",
	"ONCEPAY_CHANNEL_URL":            "https://channel.example.com/",
	"ONCEPAY_EMBEDDED_CHANNEL_ADDR":  "127.0.0.1:28090",
	"ONCEPAY_CHANNEL_SIM_SCHEDULE":   "1s, 2s",
	"ONCEPAY_PUBLIC_URL":             "https://pay.example.com/",
	"ONCEPAY_CHANNEL_NAME":           "alipay",
	"ONCEPAY_CHANNELS":               "wechat, alipay",
	"ONCEPAY_CHANNEL_URL_WECHAT":     "https://api.mch.weixin.example/",
	"ONCEPAY_CHANNEL_SECRET_WECHAT":  "prod-wechat-secret",
	"ONCEPAY_SIGNATURE_TOLERANCE":    "2m",
	"ONCEPAY_CHANNEL_TIMEOUT":        "3s",
	"ONCEPAY_CHANNEL_RETRIES":        "5",
	"ONCEPAY_RECONCILE_JOB_INTERVAL": "2m",
	"ONCEPAY_REFUND_JOB_INTERVAL":    "3m",
	"ONCEPAY_WEBHOOK_SCHEDULE":       "1s,7s",
	"ONCEPAY_WEBHOOK_TIMEOUT":        "4s",
	"ONCEPAY_WEBHOOK_INTERVAL":       "250ms",
	"ONCEPAY_WEBHOOK_ROTATION_GRACE": "2h",
	"ONCEPAY_WEBHOOK_DEV":            "true",
	"ONCEPAY_WEBHOOK_ALLOW_CIDRS":    "10.20.0.0/16, fd12::/16",
	"ONCEPAY_WEBHOOK_KEYS":           testWebhookKeys,
	"ONCEPAY_EVENT_RETENTION":        "100h",
}

// everyVariableParsed is what everyVariable must parse to.
var everyVariableParsed = config.Config{
	HTTPAddr:            "127.0.0.1:9090",
	MySQLDSN:            "app:pw@tcp(db:3306)/oncepay?parseTime=true",
	MySQLWsrepSyncWait:  3,
	DataDir:             "/var/lib/oncepay",
	RedisAddrs:          []string{"redis:6379"},
	EmbeddedRedisAddr:   "127.0.0.1:26379",
	RedisDB:             15,
	RedisPrefix:         "shop-eu:oncepay:",
	KafkaBrokers:        []string{"k1:9092", "k2:9092"},
	EmbeddedKafkaAddr:   "127.0.0.1:29092",
	ChannelSecret:       "prod-channel-secret",
	AdminKey:            "prod-admin-key",
	SeedDemo:            true,
	OrderTTL:            20 * time.Minute,
	LockTTL:             45 * time.Second,
	DedupRetention:      1000 * time.Hour,
	MaxRedeliveryWindow: 96 * time.Hour,
	RedisFailureMode:    config.RedisReject,
	NodeID:              1023,
	IdempotencyTokenTTL: 3 * time.Second,
	CloseJobInterval:    5 * time.Second,
	PurgeJobInterval:    10 * time.Minute,
	ChannelURL:          "https://channel.example.com",
	EmbeddedChannelAddr: "127.0.0.1:28090",
	ChannelSimSchedule:  []time.Duration{time.Second, 2 * time.Second},
	PublicURL:           "https://pay.example.com",
	ChannelName:         "alipay",
	Channels: []config.Channel{
		{Name: "wechat", URL: "https://api.mch.weixin.example", Secret: "prod-wechat-secret"},
		{Name: "alipay", URL: "https://channel.example.com", Secret: "prod-channel-secret"},
	},
	SignatureTolerance:   2 * time.Minute,
	ChannelTimeout:       3 * time.Second,
	ChannelRetries:       5,
	ReconcileJobInterval: 2 * time.Minute,
	RefundJobInterval:    3 * time.Minute,
	WebhookSchedule:      []time.Duration{time.Second, 7 * time.Second},
	WebhookTimeout:       4 * time.Second,
	WebhookInterval:      250 * time.Millisecond,
	WebhookRotationGrace: 2 * time.Hour,
	WebhookDev:           true,
	WebhookAllowCIDRs:    []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd12::/16")},
	WebhookKeys:          testWebhookKeys,
	EventRetention:       100 * time.Hour,
}

// TestLoadFromValid covers configurations that must load, and what they load to.
func TestLoadFromValid(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		want config.Config
	}{
		{name: "defaults", vars: nil, want: defaults()},
		{
			name: "blank values mean the default",
			vars: map[string]string{"ONCEPAY_HTTP_ADDR": "  ", "ONCEPAY_LOCK_TTL": "", "ONCEPAY_NODE_ID": " "},
			want: defaults(),
		},
		{name: "every variable parsed", vars: everyVariable, want: everyVariableParsed},
		{
			name: "seed and webhook dev mode default to false with a MySQL DSN",
			vars: with(realSecrets, map[string]string{"ONCEPAY_MYSQL_DSN": "u:p@tcp(db:3306)/x", "ONCEPAY_CHANNEL_URL": "embedded"}),
			want: func() config.Config {
				c := defaults()
				c.MySQLDSN = "u:p@tcp(db:3306)/x"
				c.ChannelSecret, c.AdminKey = realSecrets["ONCEPAY_CHANNEL_SECRET"], realSecrets["ONCEPAY_ADMIN_KEY"]
				c.SeedDemo, c.WebhookDev = false, false
				c.WebhookKeys = testWebhookKeys
				c.ChannelURL = "embedded"
				c.HTTPAddr, c.PublicURL = ":8080", "http://localhost:8080"
				for i := range c.Channels {
					c.Channels[i].Secret = realSecrets["ONCEPAY_CHANNEL_SECRET"]
				}
				return c
			}(),
		},
		{
			name: "retention equal to the redelivery window is enough",
			vars: map[string]string{"ONCEPAY_DEDUP_RETENTION": "72h", "ONCEPAY_MAX_REDELIVERY_WINDOW": "72h"},
			want: func() config.Config {
				c := defaults()
				c.DedupRetention = 72 * time.Hour
				return c
			}(),
		},
		{
			name: "redis db and prefix at their bounds",
			vars: map[string]string{"ONCEPAY_REDIS_DB": "15", "ONCEPAY_REDIS_PREFIX": strings.Repeat("p", 64)},
			want: func() config.Config {
				c := defaults()
				c.RedisDB, c.RedisPrefix = 15, strings.Repeat("p", 64)
				return c
			}(),
		},
		{
			name: "redis cluster: a comma list, spaces trimmed, database 0",
			vars: map[string]string{"ONCEPAY_REDIS_ADDR": " 10.0.0.1:7000 ,10.0.0.2:7001,  [::1]:7002 ", "ONCEPAY_REDIS_DB": "0"},
			want: func() config.Config {
				c := defaults()
				c.RedisAddrs = []string{"10.0.0.1:7000", "10.0.0.2:7001", "[::1]:7002"}
				return c
			}(),
		},
		{
			name: "one redis address keeps its logical database",
			vars: map[string]string{"ONCEPAY_REDIS_ADDR": " redis:6379 ", "ONCEPAY_REDIS_DB": "3"},
			want: func() config.Config {
				c := defaults()
				c.RedisAddrs, c.RedisDB = []string{"redis:6379"}, 3
				return c
			}(),
		},
		{
			name: "node id bounds are inclusive",
			vars: map[string]string{"ONCEPAY_NODE_ID": "0"},
			want: func() config.Config {
				c := defaults()
				c.NodeID = 0
				return c
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.LoadFrom(env(tt.vars))
			if err != nil {
				t.Fatalf("LoadFrom: unexpected error:\n%v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LoadFrom =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestEveryFieldHasAVariable fails when a field is added to Config without its variable in
// everyVariable, or when everyVariable names a variable LoadFrom ignores: unsetting each
// variable in turn must change at least one field, and every field must be changed by one.
func TestEveryFieldHasAVariable(t *testing.T) {
	full, err := config.LoadFrom(env(everyVariable))
	if err != nil {
		t.Fatalf("LoadFrom: %v", err)
	}
	fv := reflect.ValueOf(full)
	controlled := map[string]bool{}
	for name := range everyVariable {
		without := with(everyVariable, nil)
		delete(without, name)
		// Unsetting a secret makes the configuration invalid; the parsed values still count.
		partial, _ := config.LoadFrom(env(without))
		pv := reflect.ValueOf(partial)
		changed := false
		for i := 0; i < fv.NumField(); i++ {
			if !reflect.DeepEqual(fv.Field(i).Interface(), pv.Field(i).Interface()) {
				controlled[fv.Type().Field(i).Name] = true
				changed = true
			}
		}
		if !changed {
			t.Errorf("unsetting %s changes no field: LoadFrom does not read it, or everyVariable sets it to its default", name)
		}
	}
	for i := 0; i < fv.NumField(); i++ {
		if name := fv.Type().Field(i).Name; !controlled[name] {
			t.Errorf("no variable in everyVariable controls Config.%s: add it (and to the README table)", name)
		}
	}
}

// TestLoadFromInvalid checks that each bad configuration is refused with one actionable line
// per problem, naming the variable.
func TestLoadFromInvalid(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		// lines holds, for each line the error must have, substrings that line must contain.
		lines [][]string
	}{
		{
			name: "channel settings, one line per problem",
			vars: map[string]string{"ONCEPAY_CHANNEL_URL": "ftp://x", "ONCEPAY_CHANNELS": "simpay", "ONCEPAY_PUBLIC_URL": "localhost:8080", "ONCEPAY_CHANNEL_RETRIES": "11"},
			lines: [][]string{
				{"ONCEPAY_CHANNEL_URL", "not an http(s) URL"},
				{"ONCEPAY_PUBLIC_URL", "not an http(s) URL"},
				{"ONCEPAY_CHANNEL_RETRIES=11", "0..10"},
			},
		},
		{
			name:  "a real database with no channel configured: no silent fake channel",
			vars:  with(realSecrets, map[string]string{"ONCEPAY_MYSQL_DSN": "u:p@tcp(db)/x"}),
			lines: [][]string{{"ONCEPAY_CHANNEL_URL is empty", "ONCEPAY_MYSQL_DSN", "ONCEPAY_CHANNEL_URL=embedded"}},
		},
		{
			name:  "a real channel without its list of channels",
			vars:  map[string]string{"ONCEPAY_CHANNEL_URL": "https://channel.example.com"},
			lines: [][]string{{"ONCEPAY_CHANNELS is empty", "ONCEPAY_CHANNEL_URL"}},
		},
		{
			name:  "a channel name not in canonical form",
			vars:  map[string]string{"ONCEPAY_CHANNELS": "alipay,WeChat"},
			lines: [][]string{{"ONCEPAY_CHANNELS", `"WeChat"`, "lowercase"}},
		},
		{
			name:  "an allowed webhook network that is not a CIDR",
			vars:  map[string]string{"ONCEPAY_WEBHOOK_ALLOW_CIDRS": "10.0.0.0/8,10.1.2.3/16"},
			lines: [][]string{{"ONCEPAY_WEBHOOK_ALLOW_CIDRS", "host bits", "10.1.0.0/16"}},
		},
		{
			name:  "a webhook key ring that does not parse",
			vars:  map[string]string{"ONCEPAY_WEBHOOK_KEYS": "k1:short"},
			lines: [][]string{{"ONCEPAY_WEBHOOK_KEYS", "32 bytes"}},
		},
		{
			name:  "a real database without a webhook key ring",
			vars:  with(realSecrets, map[string]string{"ONCEPAY_MYSQL_DSN": "u:p@tcp(db)/x", "ONCEPAY_CHANNEL_URL": "embedded", "ONCEPAY_WEBHOOK_KEYS": ""}),
			lines: [][]string{{"ONCEPAY_WEBHOOK_KEYS is empty", "openssl rand -base64 32"}},
		},
		{
			name:  "a channel listed twice",
			vars:  map[string]string{"ONCEPAY_CHANNELS": "alipay, alipay"},
			lines: [][]string{{"ONCEPAY_CHANNELS", `"alipay" twice`}},
		},
		{
			name:  "the trade channel is not configured",
			vars:  map[string]string{"ONCEPAY_CHANNELS": "alipay,wechat"},
			lines: [][]string{{"ONCEPAY_CHANNEL_NAME=\"simpay\"", "not one of ONCEPAY_CHANNELS", "alipay,wechat"}},
		},
		{
			name:  "two channels of one provider",
			vars:  map[string]string{"ONCEPAY_CHANNEL_URL": "https://pay.example.com", "ONCEPAY_CHANNELS": "alipay,wechat"},
			lines: [][]string{{"alipay and wechat share the base URL https://pay.example.com", "ONCEPAY_CHANNEL_URL_<NAME>"}},
		},
		{
			name:  "a channel's own URL is not http",
			vars:  map[string]string{"ONCEPAY_CHANNEL_URL_ALIPAY": "alipay.example"},
			lines: [][]string{{"ONCEPAY_CHANNEL_URL_ALIPAY", "not an http(s) URL"}},
		},
		{
			name:  "a dev secret for one channel with a MySQL DSN",
			vars:  with(realSecrets, map[string]string{"ONCEPAY_MYSQL_DSN": "u:p@tcp(db)/x", "ONCEPAY_CHANNEL_URL": "embedded", "ONCEPAY_CHANNEL_SECRET_ALIPAY": "dev-alipay"}),
			lines: [][]string{{"ONCEPAY_CHANNEL_SECRET_ALIPAY", "dev-*"}},
		},
		{
			name:  "signature tolerance too short",
			vars:  map[string]string{"ONCEPAY_SIGNATURE_TOLERANCE": "10ms"},
			lines: [][]string{{"ONCEPAY_SIGNATURE_TOLERANCE", "at least 1s"}},
		},
		{
			name:  "simulator schedule not a list of durations",
			vars:  map[string]string{"ONCEPAY_CHANNEL_SIM_SCHEDULE": "4m,soon"},
			lines: [][]string{{"ONCEPAY_CHANNEL_SIM_SCHEDULE", `"soon"`, "positive duration"}},
		},
		{
			name:  "embedded channel address not host:port",
			vars:  map[string]string{"ONCEPAY_EMBEDDED_CHANNEL_ADDR": "18090"},
			lines: [][]string{{"ONCEPAY_EMBEDDED_CHANNEL_ADDR", "host:port"}},
		},
		{
			name:  "lock ttl not a duration",
			vars:  map[string]string{"ONCEPAY_LOCK_TTL": "abc"},
			lines: [][]string{{"ONCEPAY_LOCK_TTL", `"abc"`, "not a duration"}},
		},
		{
			name:  "negative duration",
			vars:  map[string]string{"ONCEPAY_ORDER_TTL": "-1m"},
			lines: [][]string{{"ONCEPAY_ORDER_TTL", `"-1m"`}},
		},
		{
			name:  "token ttl too short",
			vars:  map[string]string{"ONCEPAY_IDEMPOTENCY_TOKEN_TTL": "500ms"},
			lines: [][]string{{"ONCEPAY_IDEMPOTENCY_TOKEN_TTL", "too short"}},
		},
		{
			name:  "lock ttl too short for the watchdog",
			vars:  map[string]string{"ONCEPAY_LOCK_TTL": "1ms"},
			lines: [][]string{{"ONCEPAY_LOCK_TTL", "too short"}},
		},
		{
			name:  "zero order ttl",
			vars:  map[string]string{"ONCEPAY_ORDER_TTL": "0s"},
			lines: [][]string{{"ONCEPAY_ORDER_TTL", "positive"}},
		},
		{
			name:  "retention shorter than the redelivery window",
			vars:  map[string]string{"ONCEPAY_DEDUP_RETENTION": "1h"},
			lines: [][]string{{"ONCEPAY_DEDUP_RETENTION=1h0m0s", "shorter than", "ONCEPAY_MAX_REDELIVERY_WINDOW=72h0m0s", "I6"}},
		},
		{
			name:  "window raised above the default retention",
			vars:  map[string]string{"ONCEPAY_MAX_REDELIVERY_WINDOW": "800h"},
			lines: [][]string{{"ONCEPAY_DEDUP_RETENTION=720h0m0s", "ONCEPAY_MAX_REDELIVERY_WINDOW=800h0m0s"}},
		},
		{
			name: "dev secrets with a MySQL DSN",
			vars: map[string]string{"ONCEPAY_MYSQL_DSN": "root:@tcp(127.0.0.1:3306)/x", "ONCEPAY_CHANNEL_URL": "embedded"},
			lines: [][]string{
				{"ONCEPAY_WEBHOOK_KEYS is empty", "ONCEPAY_MYSQL_DSN"},
				{"ONCEPAY_CHANNEL_SECRET", "dev-*", "ONCEPAY_MYSQL_DSN"},
				{"ONCEPAY_ADMIN_KEY", "dev-*", "ONCEPAY_MYSQL_DSN"},
			},
		},
		{
			name:  "one dev secret left with a MySQL DSN",
			vars:  map[string]string{"ONCEPAY_MYSQL_DSN": "u:p@tcp(db)/x", "ONCEPAY_ADMIN_KEY": "real-admin-key", "ONCEPAY_CHANNEL_URL": "embedded", "ONCEPAY_WEBHOOK_KEYS": testWebhookKeys},
			lines: [][]string{{"ONCEPAY_CHANNEL_SECRET", "dev-*"}},
		},
		{
			name:  "wsrep_sync_wait above its bitmask",
			vars:  map[string]string{"ONCEPAY_MYSQL_WSREP_SYNC_WAIT": "16"},
			lines: [][]string{{"ONCEPAY_MYSQL_WSREP_SYNC_WAIT=16", "0..15"}},
		},
		{
			name:  "node id above range",
			vars:  map[string]string{"ONCEPAY_NODE_ID": "1024"},
			lines: [][]string{{"ONCEPAY_NODE_ID=1024", "0..1023"}},
		},
		{
			name:  "node id below range",
			vars:  map[string]string{"ONCEPAY_NODE_ID": "-1"},
			lines: [][]string{{"ONCEPAY_NODE_ID=-1", "0..1023"}},
		},
		{
			name:  "node id not a number",
			vars:  map[string]string{"ONCEPAY_NODE_ID": "one"},
			lines: [][]string{{"ONCEPAY_NODE_ID", `"one"`, "not an integer"}},
		},
		{
			name:  "bad failure mode",
			vars:  map[string]string{"ONCEPAY_REDIS_FAILURE_MODE": "panic"},
			lines: [][]string{{"ONCEPAY_REDIS_FAILURE_MODE", `"panic"`, "degrade or reject"}},
		},
		{
			name:  "bad boolean",
			vars:  map[string]string{"ONCEPAY_WEBHOOK_DEV": "maybe"},
			lines: [][]string{{"ONCEPAY_WEBHOOK_DEV", `"maybe"`, "true or false"}},
		},
		{
			name:  "zero job interval",
			vars:  map[string]string{"ONCEPAY_PURGE_JOB_INTERVAL": "0s"},
			lines: [][]string{{"ONCEPAY_PURGE_JOB_INTERVAL"}},
		},
		{
			name:  "redis db not a number",
			vars:  map[string]string{"ONCEPAY_REDIS_DB": "one"},
			lines: [][]string{{"ONCEPAY_REDIS_DB", `"one"`, "not an integer", "0..15"}},
		},
		{
			name:  "redis db above range",
			vars:  map[string]string{"ONCEPAY_REDIS_DB": "16"},
			lines: [][]string{{"ONCEPAY_REDIS_DB=16", "0..15"}},
		},
		{
			name:  "redis db below range",
			vars:  map[string]string{"ONCEPAY_REDIS_DB": "-1"},
			lines: [][]string{{"ONCEPAY_REDIS_DB=-1", "0..15"}},
		},
		{
			name:  "redis address list with an empty element",
			vars:  map[string]string{"ONCEPAY_REDIS_ADDR": "a:7000,,b:7001"},
			lines: [][]string{{"ONCEPAY_REDIS_ADDR", "empty element at position 2", "host:port,host:port"}},
		},
		{
			name:  "redis address list with a trailing comma",
			vars:  map[string]string{"ONCEPAY_REDIS_ADDR": "a:7000, b:7001 , "},
			lines: [][]string{{"ONCEPAY_REDIS_ADDR", "empty element at position 3"}},
		},
		{
			name:  "redis address without a port",
			vars:  map[string]string{"ONCEPAY_REDIS_ADDR": "a:7000,redis"},
			lines: [][]string{{"ONCEPAY_REDIS_ADDR", `"redis"`, "not host:port"}},
		},
		{
			name:  "redis address listed twice",
			vars:  map[string]string{"ONCEPAY_REDIS_ADDR": "a:7000,b:7001,a:7000"},
			lines: [][]string{{"ONCEPAY_REDIS_ADDR", `"a:7000" twice`}},
		},
		{
			name:  "redis cluster on a database other than 0",
			vars:  map[string]string{"ONCEPAY_REDIS_ADDR": "a:7000,b:7001,c:7002", "ONCEPAY_REDIS_DB": "2"},
			lines: [][]string{{"ONCEPAY_REDIS_DB=2", "3 addresses", "only database 0", "ONCEPAY_REDIS_PREFIX"}},
		},
		{
			name:  "redis prefix with a hash tag",
			vars:  map[string]string{"ONCEPAY_REDIS_PREFIX": "{shop}:"},
			lines: [][]string{{"ONCEPAY_REDIS_PREFIX", `"{shop}:"`, "'{' or '}'"}},
		},
		{
			name:  "redis prefix with a closing brace only",
			vars:  map[string]string{"ONCEPAY_REDIS_PREFIX": "shop}"},
			lines: [][]string{{"ONCEPAY_REDIS_PREFIX", "'{' or '}'"}},
		},
		{
			name:  "redis prefix too long",
			vars:  map[string]string{"ONCEPAY_REDIS_PREFIX": strings.Repeat("p", 65)},
			lines: [][]string{{"ONCEPAY_REDIS_PREFIX", "65 bytes", "at most 64"}},
		},
		{
			name: "several parse problems",
			vars: map[string]string{"ONCEPAY_LOCK_TTL": "abc", "ONCEPAY_SEED_DEMO": "yes please", "ONCEPAY_NODE_ID": "x"},
			lines: [][]string{
				{"ONCEPAY_SEED_DEMO"},
				{"ONCEPAY_LOCK_TTL"},
				{"ONCEPAY_NODE_ID"},
			},
		},
		{
			name: "several validation problems",
			vars: map[string]string{"ONCEPAY_NODE_ID": "5000", "ONCEPAY_REDIS_FAILURE_MODE": "ignore", "ONCEPAY_DEDUP_RETENTION": "1h"},
			lines: [][]string{
				{"ONCEPAY_NODE_ID=5000"},
				{"ONCEPAY_REDIS_FAILURE_MODE"},
				{"ONCEPAY_DEDUP_RETENTION=1h0m0s"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.LoadFrom(env(tt.vars))
			if err == nil {
				t.Fatal("LoadFrom: no error; want one")
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tt.lines) {
				t.Fatalf("error has %d lines, want %d:\n%v", len(got), len(tt.lines), err)
			}
			for _, want := range tt.lines {
				if !anyLineHasAll(got, want) {
					t.Errorf("no line of the error contains all of %q:\n%v", want, err)
				}
			}
		})
	}
}

// anyLineHasAll reports whether one of lines contains every one of parts.
func anyLineHasAll(lines, parts []string) bool {
	for _, line := range lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestLogValueMasksSecrets checks that logging the configuration reveals neither secret nor
// the database password — not even their first characters — while still telling a person
// whether each secret is set, and everything else that is configured.
func TestLogValueMasksSecrets(t *testing.T) {
	const password = "Pa55:w0rd"
	cfg, err := config.LoadFrom(env(with(realSecrets, map[string]string{
		"ONCEPAY_MYSQL_DSN":    "oncepay:" + password + "@tcp(db.internal:3306)/oncepay?parseTime=true",
		"ONCEPAY_CHANNEL_URL":  "embedded",
		"ONCEPAY_REDIS_DB":     "3",
		"ONCEPAY_REDIS_PREFIX": "eu:",
	})))
	if err != nil {
		t.Fatalf("LoadFrom: %v", err)
	}
	attrs := map[string]string{}
	for _, a := range cfg.LogValue().Group() {
		attrs[a.Key] = a.Value.String()
	}
	for _, secret := range []string{password, realSecrets["ONCEPAY_CHANNEL_SECRET"], realSecrets["ONCEPAY_ADMIN_KEY"], "UzNjcmV0UzNj"} {
		for key, v := range attrs {
			if strings.Contains(v, secret) || strings.Contains(v, secret[:4]) {
				t.Errorf("log attribute %s=%q reveals the secret %q or its prefix %q", key, v, secret, secret[:4])
			}
		}
	}
	tests := []struct{ key, want string }{
		{"mysql_dsn", "oncepay:****@tcp(db.internal:3306)/oncepay?parseTime=true"},
		{"channel_secret", "set (not shown)"},
		{"admin_key", "set (not shown)"},
		{"webhook_keys", "set (not shown)"},
		{"lock_ttl", "30s"},
		{"redis_addr", "embedded@127.0.0.1:16379"},
		{"redis_db", "3"},
		{"redis_prefix", "eu:"},
	}
	for _, tt := range tests {
		if got := attrs[tt.key]; got != tt.want {
			t.Errorf("log attribute %s = %q, want %q", tt.key, got, tt.want)
		}
	}
}

// TestLogValueDevSecrets checks that the dev defaults are named as such, and that a secret
// that merely starts like one is not.
func TestLogValueDevSecrets(t *testing.T) {
	cfg, err := config.LoadFrom(env(map[string]string{"ONCEPAY_ADMIN_KEY": "dev-admin-key-2"}))
	if err != nil {
		t.Fatalf("LoadFrom: %v", err)
	}
	if got := logAttr(t, cfg, "channel_secret"); got != "dev default" {
		t.Errorf("channel_secret = %q, want %q", got, "dev default")
	}
	if got := logAttr(t, cfg, "admin_key"); got != "set (not shown)" {
		t.Errorf("admin_key = %q, want %q", got, "set (not shown)")
	}
	if cfg.DevSecrets() {
		t.Error("DevSecrets() = true with a configured admin key")
	}
	if def, _ := config.LoadFrom(env(nil)); !def.DevSecrets() {
		t.Error("DevSecrets() = false with the defaults")
	}
}

// TestLogValueDSNForms checks the masking of DSN forms other than user:password@.
func TestLogValueDSNForms(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"", "embedded sqlite"},
		{"root@tcp(127.0.0.1:3306)/x", "root@tcp(127.0.0.1:3306)/x"},
		{"root:@tcp(127.0.0.1:3306)/x", "root:****@tcp(127.0.0.1:3306)/x"},
		{"u:p@ss@tcp(h:3306)/x", "u:****@tcp(h:3306)/x"},
		{"u:p/w@tcp(h:3306)/x", "u:****@tcp(h:3306)/x"},
		{"u:pw@tcp(h:3306)/x?x=a@b", "u:****@tcp(h:3306)/x?x=a@b"},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			vars := map[string]string{"ONCEPAY_MYSQL_DSN": tt.dsn}
			if tt.dsn != "" {
				vars = with(realSecrets, with(vars, map[string]string{"ONCEPAY_CHANNEL_URL": "embedded"}))
			}
			cfg, err := config.LoadFrom(env(vars))
			if err != nil {
				t.Fatalf("LoadFrom: %v", err)
			}
			if got := logAttr(t, cfg, "mysql_dsn"); got != tt.want {
				t.Errorf("mysql_dsn = %q, want %q", got, tt.want)
			}
		})
	}
}

// logAttr returns the string form of one attribute of cfg's log value.
func logAttr(t *testing.T, cfg config.Config, key string) string {
	t.Helper()
	for _, a := range cfg.LogValue().Group() {
		if a.Key == key {
			return a.Value.String()
		}
	}
	t.Fatalf("LogValue has no attribute %q", key)
	return ""
}

// TestLogValueIsAGroup checks that Config satisfies slog.LogValuer, so that logging it with
// slog calls LogValue and never prints the raw struct.
func TestLogValueIsAGroup(t *testing.T) {
	var v any = config.Config{}
	lv, ok := v.(slog.LogValuer)
	if !ok {
		t.Fatal("config.Config does not implement slog.LogValuer")
	}
	if k := lv.LogValue().Kind(); k != slog.KindGroup {
		t.Errorf("LogValue kind = %v, want group", k)
	}
}

// TestLogValueShowsEverySetting checks that the start-up log line shows every setting other
// than the secrets, so that a person can see what an instance runs with; a field added to
// Config but not to LogValue fails here.
func TestLogValueShowsEverySetting(t *testing.T) {
	cfg, err := config.LoadFrom(env(everyVariable))
	if err != nil {
		t.Fatalf("LoadFrom: %v", err)
	}
	logged := map[string]bool{}
	for _, a := range cfg.LogValue().Group() {
		logged[a.Value.String()] = true
	}
	// Secrets are masked (TestLogValueMasksSecrets); an embedded address is shown only when
	// the embedded server is in use, which everyVariable turns off.
	skip := map[string]bool{
		"MySQLDSN": true, "ChannelSecret": true, "AdminKey": true, "Channels": true, "WebhookKeys": true,
		"EmbeddedRedisAddr": true, "EmbeddedKafkaAddr": true, "EmbeddedChannelAddr": true,
	}
	v := reflect.ValueOf(cfg)
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Name
		if skip[name] {
			continue
		}
		want := fmtValue(v.Field(i).Interface())
		if !logged[want] {
			t.Errorf("LogValue does not show Config.%s (%s)", name, want)
		}
	}
}

// TestLogValueChannels checks that the logged channels name each channel and its base URL,
// and never a channel's secret.
func TestLogValueChannels(t *testing.T) {
	cfg, err := config.LoadFrom(env(everyVariable))
	if err != nil {
		t.Fatalf("LoadFrom: %v", err)
	}
	got := logAttr(t, cfg, "channels")
	if want := "wechat@https://api.mch.weixin.example,alipay@https://channel.example.com"; got != want {
		t.Errorf("channels = %q, want %q", got, want)
	}
	for _, secret := range []string{"prod-wechat-secret", "prod-channel-secret"} {
		if strings.Contains(got, secret[:5]) {
			t.Errorf("channels = %q reveals a secret's prefix %q", got, secret[:5])
		}
	}
	def, _ := config.LoadFrom(env(nil))
	if got, want := logAttr(t, def, "channels"), "simpay@embedded@127.0.0.1:18090,alipay@embedded@127.0.0.1:18090,wechat@embedded@127.0.0.1:18090"; got != want {
		t.Errorf("default channels = %q, want %q", got, want)
	}
}

// TestHTTPAddrLoopbackWithDevSecrets checks that the server listens on loopback while either
// public dev-* secret is in use, and on every interface once both are real.
func TestHTTPAddrLoopbackWithDevSecrets(t *testing.T) {
	dev, _ := config.LoadFrom(env(nil))
	if dev.HTTPAddr != "127.0.0.1:8080" {
		t.Errorf("HTTPAddr with dev secrets = %q, want 127.0.0.1:8080", dev.HTTPAddr)
	}
	for name, v := range realSecrets {
		half, _ := config.LoadFrom(env(map[string]string{name: v}))
		if half.HTTPAddr != "127.0.0.1:8080" {
			t.Errorf("HTTPAddr with only %s set = %q, want loopback: the other secret is still public", name, half.HTTPAddr)
		}
	}
	real, err := config.LoadFrom(env(realSecrets))
	if err != nil {
		t.Fatal(err)
	}
	if real.HTTPAddr != ":8080" {
		t.Errorf("HTTPAddr with real secrets = %q, want :8080", real.HTTPAddr)
	}
}

// fmtValue renders a field the way LogValue does: durations in Go syntax, lists joined by
// commas, the rest as slog prints them.
func fmtValue(v any) string {
	switch f := v.(type) {
	case time.Duration:
		return f.String()
	case []string:
		return strings.Join(f, ",")
	case []time.Duration:
		parts := make([]string, len(f))
		for i, d := range f {
			parts[i] = d.String()
		}
		return strings.Join(parts, ",")
	}
	return slog.AnyValue(v).String()
}

// TestStartUpLineWritesSchedulesAsTheirSettings: the start-up line prints a retry schedule the
// way its setting is written, never as nanoseconds.
func TestStartUpLineWritesSchedulesAsTheirSettings(t *testing.T) {
	var buf bytes.Buffer
	cfg := config.Config{WebhookSchedule: []time.Duration{10 * time.Second, time.Minute, 90 * time.Minute, 72 * time.Hour},
		ChannelSimSchedule: []time.Duration{4 * time.Minute, 15 * time.Hour}}
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting", "config", cfg)
	for _, want := range []string{`"webhook_schedule":"10s,1m,1h30m,72h"`, `"channel_sim_schedule":"4m,15h"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("start-up line %s lacks %s", buf.String(), want)
		}
	}
}
