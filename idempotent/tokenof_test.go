package idempotent_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/idemops"
)

// TestTokenOf: an operator reads a token's state — issued to its scope and unused, used once
// its submission ran, not found when it was never issued or is no token at all.
func TestTokenOf(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := e.guard(idempotent.Config{})
	ctx := context.Background()
	tok, _, err := g.IssueToken(ctx, "user:7")
	if err != nil {
		t.Fatal(err)
	}
	st, err := idemops.TokenOf(ctx, g, tok)
	if err != nil || !st.Found || st.Used || st.Scope != "user:7" || st.TTL <= 0 || st.TTLMS <= 0 {
		t.Fatalf("a fresh token: %+v, %v; want found, unused, user:7, a TTL", st, err)
	}
	mustExecute(t, g, request(idempotent.Key{Scope: "user:7", BizType: "order.create", BizKey: tok}, `{}`), effectWork("tokenof", 0, http.StatusCreated))
	if st, err = idemops.TokenOf(ctx, g, tok); err != nil || !st.Found || !st.Used || st.Scope != "user:7" {
		t.Errorf("a used token: %+v, %v; want found, used, user:7", st, err)
	}
	for _, key := range []string{idempotent.TokenPrefix + strings.Repeat("0", 32), "not-a-token"} {
		if st, err = idemops.TokenOf(ctx, g, key); err != nil || st.Found {
			t.Errorf("%s: %+v, %v; want not found", key, st, err)
		}
	}
}
