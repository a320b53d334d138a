package web_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// TestCheckChannel: one canonical form for channel names, ^[a-z][a-z0-9_]{0,31}$; every other
// spelling — another case, a space, a dash, a non-ASCII letter, too long — is refused with
// invalid_request naming the field, never folded into the canonical one.
func TestCheckChannel(t *testing.T) {
	for _, name := range []string{"alipay", "wechat", "wechat_pay", "a", "drill", "unionpay2", "a_", strings.Repeat("z", 32)} {
		if err := web.CheckChannel("channel", name); err != nil || !web.ValidChannel(name) {
			t.Errorf("%q refused: %v", name, err)
		}
	}
	for _, name := range []string{"", "ALIPAY", "Alipay", "alipaY", "alipay ", " alipay", "alipay\t", "ali pay", "ali-pay", "ali.pay",
		"1pay", "_pay", "alipay:x", "alípay", "alipay\u200b", "ａlipay", strings.Repeat("z", 33), "alipay\x00"} {
		err := web.CheckChannel("channel", name)
		if err == nil || web.ValidChannel(name) {
			t.Errorf("%q accepted", name)
			continue
		}
		e, ok := apperr.As(err)
		if !ok || !errors.Is(err, apperr.ErrInvalidRequest) || !strings.Contains(e.Detail, `"channel"`) {
			t.Errorf("%q: %v, want invalid_request naming \"channel\"", name, err)
		}
	}
}
