package idempotent

import (
	"errors"
	"net/http"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// The client-facing errors of the Idempotency-Key table (CONTRACT.md).
var (
	ErrKeyMissing   = apperr.New(http.StatusBadRequest, "idempotency_key_missing", "this endpoint requires an Idempotency-Key header")
	ErrKeyInvalid   = apperr.New(http.StatusBadRequest, "idempotency_key_invalid", "Idempotency-Key must be 1..255 visible ASCII characters")
	ErrTokenInvalid = apperr.New(http.StatusBadRequest, "idempotency_token_invalid", "the tok_ key is not a live token issued to this user; get one from POST /v1/idempotency-tokens")
	ErrKeyInUse     = apperr.New(http.StatusConflict, "idempotency_key_in_use", "a request with this key is still being processed; retry later")
	ErrKeyReused    = apperr.New(http.StatusUnprocessableEntity, "idempotency_key_reused", "this key was used with a different request (method, path or body)")
)

// errRedisDown marks a Redis failure that the layer could not step around.
var errRedisDown = errors.New("redis unavailable")
