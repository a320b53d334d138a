package web

import "github.com/oncepay/oncepay/internal/platform/apperr"

// MaxChannelLen is the longest channel name: 32 bytes.
const MaxChannelLen = 32

// ValidChannel reports whether name is a channel name in its one canonical form: a lowercase
// ASCII letter, then up to 31 lowercase letters, digits or underscores (^[a-z][a-z0-9_]{0,31}$),
// such as "alipay" or "wechat_pay".
//
// Channels compare byte for byte in every store (docs/contract.md), so a second spelling of one
// channel ("ALIPAY", "alipay ", "Alipay") would be a second key: the same trade number could
// pay two orders, once per spelling. Rather than fold a spelling silently — the signature
// covers the bytes the channel sent, and a folded key would no longer be what was signed —
// every other spelling is refused before anything is keyed.
func ValidChannel(name string) bool {
	if len(name) == 0 || len(name) > MaxChannelLen || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// CheckChannel is ValidChannel as the notifications' validation answers it: nil, or 400
// invalid_request naming field and the canonical form. The payment notification parser
// (payment.Parse, over HTTP and Kafka) and the recharge notification's Validate both call it,
// so one rule decides what a channel name is.
func CheckChannel(field, name string) error {
	if ValidChannel(name) {
		return nil
	}
	return apperr.ErrInvalidRequest.Withf("field %q must be a channel name in canonical form: a lowercase letter, then up to 31 lowercase letters, digits or underscores (^[a-z][a-z0-9_]{0,31}$)", field)
}

// MaxStatusLen is the longest status a channel's notification may carry: 32 bytes.
const MaxStatusLen = 32

// CheckStatus checks the status of a channel's notification: 1 to 32 ASCII letters, digits or
// underscores (^[A-Za-z0-9_]{1,32}$), the form every channel's statuses take (SUCCESS,
// WAIT_BUYER_PAY, TRADE_CLOSED, PROCESSING). Anything else is 400 invalid_request naming
// field. A status other than the final one is part of its notification's key
// (notify.Report.Key), so it must never hold a separator of that key.
func CheckStatus(field, status string) error {
	ok := len(status) > 0 && len(status) <= MaxStatusLen
	for i := 0; ok && i < len(status); i++ {
		c := status[i]
		ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'
	}
	if ok {
		return nil
	}
	return apperr.ErrInvalidRequest.Withf("field %q must be 1..%d letters, digits or underscores (^[A-Za-z0-9_]{1,%d}$)", field, MaxStatusLen, MaxStatusLen)
}
