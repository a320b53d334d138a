package idempotent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Key names one write. Scope is whose key it is (a user id, or a payment channel for
// notifications), BizType what kind of write it is, and BizKey the key itself: a client's
// Idempotency-Key, or a business key such as the channel's trade_no. The key must come from
// business meaning, never from a device id or an IP (000 §2.2).
type Key struct {
	Scope   string
	BizType string
	BizKey  string
}

func (k Key) String() string { return k.Scope + ":" + k.BizType + ":" + k.BizKey }

// Fingerprint is the SHA-256 of method, request path and the canonical form of a JSON body,
// in hex. Key order and whitespace do not change it; any other difference does. A body that
// is not JSON is hashed as it is.
func Fingerprint(method, route string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", strings.ToUpper(method), route)
	h.Write(canonical(body))
	return hex.EncodeToString(h.Sum(nil))
}

// canonical returns body re-encoded with sorted keys and no insignificant whitespace. Numbers
// keep their exact text. A body that is not valid JSON is returned unchanged.
func canonical(body []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return body
	}
	var buf bytes.Buffer
	writeCanonical(&buf, v)
	return buf.Bytes()
}

func writeCanonical(buf *bytes.Buffer, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			buf.WriteByte(':')
			writeCanonical(buf, t[k])
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonical(buf, e)
		}
		buf.WriteByte(']')
	default:
		b, _ := json.Marshal(t)
		buf.Write(b)
	}
}

// ValidKey reports whether a client-supplied Idempotency-Key is usable: 1..255 visible ASCII
// characters.
func ValidKey(k string) bool {
	if k == "" || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}
