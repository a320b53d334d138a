package keyring_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/platform/keyring"
)

func key(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestSealOpen: the first key seals; every key of the ring opens; a value bound to another row,
// altered, or sealed under a key the ring lacks does not open; the ciphertext never contains
// the plain text; two seals of one value differ (fresh nonce).
func TestSealOpen(t *testing.T) {
	r, err := keyring.Parse("new:" + key("0123456789abcdef0123456789abcdef") + ", old:" + key("fedcba9876543210fedcba9876543210"))
	if err != nil {
		t.Fatal(err)
	}
	kid, sealed := r.Seal("whsec_secret", "row/1/secret")
	if kid != "new" || r.Primary() != "new" || strings.Contains(sealed, "secret") {
		t.Fatalf("sealed %q under %q", sealed, kid)
	}
	if got, err := r.Open(kid, sealed, "row/1/secret"); err != nil || got != "whsec_secret" {
		t.Errorf("open: %q, %v", got, err)
	}
	if _, again := r.Seal("whsec_secret", "row/1/secret"); again == sealed {
		t.Error("two seals of one value are equal: the nonce is not fresh")
	}
	old, _ := keyring.Parse("old:" + key("fedcba9876543210fedcba9876543210"))
	okid, osealed := old.Seal("v", "a")
	if got, err := r.Open(okid, osealed, "a"); err != nil || got != "v" {
		t.Errorf("a ring with the old key second does not open what it sealed: %q, %v", got, err)
	}
	raw, _ := base64.StdEncoding.DecodeString(sealed)
	raw[len(raw)-1] ^= 1
	for name, open := range map[string]func() (string, error){
		"another row": func() (string, error) { return r.Open(kid, sealed, "row/2/secret") },
		"altered":     func() (string, error) { return r.Open(kid, base64.StdEncoding.EncodeToString(raw), "row/1/secret") },
		"unknown key": func() (string, error) { return old.Open(kid, sealed, "row/1/secret") },
		"not base64":  func() (string, error) { return r.Open(kid, "!!", "row/1/secret") },
		"too short":   func() (string, error) { return r.Open(kid, "AAAA", "row/1/secret") },
		"a nil ring":  func() (string, error) { return (*keyring.Ring)(nil).Open(kid, sealed, "row/1/secret") },
	} {
		if _, err := open(); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
}

// TestParseRefuses: malformed rings are refused with a reason, never half-read.
func TestParseRefuses(t *testing.T) {
	for _, raw := range []string{"", " , ", "k", "k:" + key("short"), "k:not base64!", "bad id:" + key("0123456789abcdef0123456789abcdef"),
		"k:" + key("0123456789abcdef0123456789abcdef") + ",k:" + key("0123456789abcdef0123456789abcdef")} {
		if _, err := keyring.Parse(raw); err == nil {
			t.Errorf("Parse(%q) accepted", raw)
		}
	}
	if _, err := keyring.Parse(keyring.DevKeys); err != nil {
		t.Errorf("the dev ring: %v", err)
	}
}
