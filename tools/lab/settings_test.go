package lab_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/tools/lab"
)

// TestSettingsFromTheEnvironment: the lab binary reads its own settings, which the service's
// configuration does not know, and turns them into the Deps it hands app.New — nothing at all
// when none is set, so that the lab binary without them is the service.
func TestSettingsFromTheEnvironment(t *testing.T) {
	t.Setenv("ONCEPAY_LAB", "true")
	t.Setenv("ONCEPAY_CHAOS_PAYMENT_DELAY", "7s")
	t.Setenv("ONCEPAY_CHAOS_CLOCK_OFFSET", "-10m")
	t.Setenv("ONCEPAY_CHAOS_REDIS_ROUTES", "127.0.0.1:7001=127.0.0.1:47001,127.0.0.1:7002=127.0.0.1:47002")
	s, err := lab.LoadSettings()
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]string{"127.0.0.1:7001": "127.0.0.1:47001", "127.0.0.1:7002": "127.0.0.1:47002"}
	if !s.Lab || s.PaymentDelay != 7*time.Second || s.ClockOffset != -10*time.Minute || !maps.Equal(s.RedisRoutes, routes) {
		t.Errorf("LoadSettings = %+v", s)
	}
	if d := s.Deps(); d.Routes == nil || d.GuardConfig == nil {
		t.Errorf("Deps of %+v: Routes set %v, GuardConfig set %v; want both", s, d.Routes != nil, d.GuardConfig != nil)
	}
	if d := (lab.Settings{}).Deps(); d.Routes != nil || d.GuardConfig != nil {
		t.Error("Deps of the zero Settings sets a hook: the lab binary without settings is not the service")
	}

	t.Setenv("ONCEPAY_CHAOS_PAYMENT_DELAY", "-1s")
	if _, err := lab.LoadSettings(); err == nil || !strings.Contains(err.Error(), "ONCEPAY_CHAOS_PAYMENT_DELAY") {
		t.Errorf("a negative delay: err = %v, want one naming ONCEPAY_CHAOS_PAYMENT_DELAY", err)
	}
}
