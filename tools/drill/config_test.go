package drill

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// envOf returns a lookup function over a fixed environment, in place of os.LookupEnv.
func envOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := parseConfig(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		URL: "http://localhost:8080", UserKey: "demo-alice-key", OtherUserKey: "demo-bob-key",
		AdminKey: "dev-admin-key", ChannelSecret: "dev-channel-secret", Kafka: []string{"127.0.0.1:19092"},
		Lab: labAuto, Settle: 30 * time.Second, Wait: 10 * time.Second, Payments: 0,
	}
	if !equalConfig(cfg, want) {
		t.Errorf("got  %+v\nwant %+v", cfg, want)
	}
}

func TestParseConfigEnvironmentThenFlags(t *testing.T) {
	env := envOf(map[string]string{
		"ONCEPAY_DRILL_URL":      "http://oncepay:9090/",
		"ONCEPAY_ADMIN_KEY":      "env-admin",
		"ONCEPAY_CHANNEL_SECRET": "env-secret",
		"ONCEPAY_KAFKA_BROKERS":  "k1:9092, k2:9092",
	})
	cfg, err := parseConfig(nil, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.URL != "http://oncepay:9090" || cfg.AdminKey != "env-admin" || cfg.ChannelSecret != "env-secret" ||
		!slices.Equal(cfg.Kafka, []string{"k1:9092", "k2:9092"}) {
		t.Errorf("environment not applied: %+v", cfg)
	}

	cfg, err = parseConfig([]string{"--url", "https://flag.example", "--admin-key=flag-admin", "--channel-secret", "flag-secret",
		"--kafka=", "--only", "i1, I3,flash-sale", "--json", "--html", "out.html", "--lab", "off", "--settle", "0s", "--wait=1s",
		"--user-key", "u", "--other-user-key", "o", "--serial", "--payments=0"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config{URL: "https://flag.example", UserKey: "u", OtherUserKey: "o", AdminKey: "flag-admin", ChannelSecret: "flag-secret",
		Only: []string{"I1", "I3", "flash-sale"}, JSON: true, HTML: "out.html", Lab: labOff, Wait: time.Second, Serial: true}
	if !equalConfig(cfg, want) {
		t.Errorf("flags must win:\ngot  %+v\nwant %+v", cfg, want)
	}
}

func TestParseConfigEmptyKafkaEnvMeansTheEmbeddedBroker(t *testing.T) {
	cfg, err := parseConfig(nil, envOf(map[string]string{"ONCEPAY_KAFKA_BROKERS": "", "ONCEPAY_EMBEDDED_KAFKA_ADDR": "127.0.0.1:29092"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Kafka, []string{"127.0.0.1:29092"}) {
		t.Errorf("Kafka = %v, want the embedded broker's address", cfg.Kafka)
	}
}

func TestParseConfigRejects(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown scenario": {"--only", "I99"},
		"relative sim":     {"--sim", "127.0.0.1:18091"},
		"relative url":     {"--url", "localhost:8080"},
		"bad lab":          {"--lab", "maybe"},
		"unknown flag":     {"--nope"},
		"positional":       {"I1"},
		"empty key":        {"--admin-key="},
		"negative settle":  {"--settle=-1s"},
		"negative wait":    {"--wait=-1s"},
		"negative lanes":   {"--payments=-1"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseConfig(args, envOf(nil), io.Discard); err == nil {
				t.Errorf("parseConfig(%q) accepted", args)
			}
		})
	}
}

func TestHelpShowsNoSecretFromTheEnvironment(t *testing.T) {
	var usage strings.Builder
	env := envOf(map[string]string{"ONCEPAY_ADMIN_KEY": "real-admin-secret", "ONCEPAY_CHANNEL_SECRET": "real-channel-secret"})
	if _, err := parseConfig([]string{"-h"}, env, &usage); !errors.Is(err, flag.ErrHelp) || !strings.Contains(usage.String(), "-only") {
		t.Errorf("-h: err %v, usage %q", err, usage.String())
	}
	if strings.Contains(usage.String(), "real-") {
		t.Errorf("-h printed a secret from the environment:\n%s", usage.String())
	}
}

func TestRunExitStatusForUsageAndConnectionErrors(t *testing.T) {
	var out, errb strings.Builder
	if code := run(t.Context(), []string{"--only", "I42"}, &out, &errb); code != exitTrouble {
		t.Errorf("usage error: exit %d, want %d", code, exitTrouble)
	}
	errb.Reset()
	// Port 1 on loopback refuses connections.
	if code := run(t.Context(), []string{"--url", "http://127.0.0.1:1", "--kafka=", "--wait=0s"}, &out, &errb); code != exitTrouble {
		t.Errorf("connection error: exit %d, want %d", code, exitTrouble)
	}
	if !strings.Contains(errb.String(), "cannot reach oncepay") {
		t.Errorf("stderr = %q", errb.String())
	}
}

func equalConfig(a, b config) bool {
	return a.URL == b.URL && a.UserKey == b.UserKey && a.OtherUserKey == b.OtherUserKey && a.AdminKey == b.AdminKey &&
		a.ChannelSecret == b.ChannelSecret && slices.Equal(a.Kafka, b.Kafka) && slices.Equal(a.Only, b.Only) &&
		a.JSON == b.JSON && a.HTML == b.HTML && a.Lab == b.Lab && a.Settle == b.Settle && a.Wait == b.Wait &&
		a.Serial == b.Serial && a.Payments == b.Payments
}
