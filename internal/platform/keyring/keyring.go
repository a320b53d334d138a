// Package keyring seals small secrets at rest with AES-256-GCM under a ring of master keys
// read from the environment (ONCEPAY_WEBHOOK_KEYS, "kid1:base64key,kid2:base64key"): the first
// key seals, every key opens, and each sealed value is stored with the id of the key that
// sealed it, so that a master key is rotated by putting a new one first, letting the rows be
// sealed again, and then dropping the old one.
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DevKeys is the key ring of the embedded database when ONCEPAY_WEBHOOK_KEYS is unset: public,
// like the dev-* secrets, and refused with a real database.
var DevKeys = "dev:" + base64.StdEncoding.EncodeToString(devKey())

func devKey() []byte {
	sum := sha256.Sum256([]byte("oncepay public development key: never for real secrets"))
	return sum[:]
}

// Ring is a parsed key ring.
type Ring struct {
	primary string
	aeads   map[string]cipher.AEAD
}

var kidPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Parse reads "kid:base64key,…": each kid 1..32 of [A-Za-z0-9_-], once; each key 32 bytes of
// standard base64 (openssl rand -base64 32). The first seals.
func Parse(raw string) (*Ring, error) {
	r := &Ring{aeads: map[string]cipher.AEAD{}}
	for _, item := range strings.Split(raw, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		kid, b64, ok := strings.Cut(item, ":")
		if !ok || !kidPattern.MatchString(kid) {
			return nil, fmt.Errorf("a key must be <id>:<base64 of 32 bytes>, with an id of 1..32 letters, digits, _ or -")
		}
		if _, dup := r.aeads[kid]; dup {
			return nil, fmt.Errorf("key id %q is listed twice", kid)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("key %q is not 32 bytes of standard base64 (make one with: openssl rand -base64 32)", kid)
		}
		block, _ := aes.NewCipher(key)
		aead, _ := cipher.NewGCM(block)
		r.aeads[kid] = aead
		if r.primary == "" {
			r.primary = kid
		}
	}
	if r.primary == "" {
		return nil, errors.New("no key given")
	}
	return r, nil
}

// Primary is the id of the key that seals.
func (r *Ring) Primary() string { return r.primary }

// Seal encrypts plain under the primary key, bound to aad (the row and column it belongs to,
// so that a sealed value copied to another row does not open), and returns the key id and
// base64(nonce ‖ ciphertext ‖ tag).
func (r *Ring) Seal(plain, aad string) (kid, sealed string) {
	aead := r.aeads[r.primary]
	nonce := make([]byte, aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := aead.Seal(nonce, nonce, []byte(plain), []byte(aad))
	return r.primary, base64.StdEncoding.EncodeToString(out)
}

// ErrCannotOpen is a sealed value whose key is not in the ring, or that does not open under it.
var ErrCannotOpen = errors.New("keyring: the sealed value does not open (unknown key id, another row's value, or altered)")

// Open decrypts a value Seal made with kid for aad.
func (r *Ring) Open(kid, sealed, aad string) (string, error) {
	if r == nil {
		return "", ErrCannotOpen
	}
	aead, ok := r.aeads[kid]
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if !ok || err != nil || len(raw) < aead.NonceSize() {
		return "", ErrCannotOpen
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(aad))
	if err != nil {
		return "", ErrCannotOpen
	}
	return string(plain), nil
}
