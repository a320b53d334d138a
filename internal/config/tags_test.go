package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
)

// TestTagDefaultsMatchConstants checks the defaults a struct tag must spell out although a
// constant names them (a tag cannot refer to a constant), and that every integer has the
// envHint its parse error ends with.
func TestTagDefaultsMatchConstants(t *testing.T) {
	typ := reflect.TypeFor[config.Config]()
	for field, want := range map[string]string{
		"ChannelSecret":      config.DevChannelSecret,
		"AdminKey":           config.DevAdminKey,
		"RedisPrefix":        config.DefaultRedisPrefix,
		"ChannelSimSchedule": config.DefaultChannelSimSchedule,
		"RedisFailureMode":   string(config.RedisDegrade),
	} {
		f, _ := typ.FieldByName(field)
		if got := f.Tag.Get("envDefault"); got != want {
			t.Errorf("Config.%s envDefault = %q, want %q", field, got, want)
		}
	}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		k := f.Type.Kind()
		if (k == reflect.Int || k == reflect.Int64) && f.Type != reflect.TypeFor[time.Duration]() && f.Tag.Get("envHint") == "" {
			t.Errorf("Config.%s is an integer without envHint: its parse error would give no advice", f.Name)
		}
	}
}
