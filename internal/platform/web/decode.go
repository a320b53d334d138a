package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// MaxBodyBytes is the largest request body the server reads (1 MiB).
const MaxBodyBytes = 1 << 20

// ReadBody reads the whole body within MaxBodyBytes, answering payload_too_large beyond it.
// It leaves a fresh reader in r.Body so that the body can be read again.
func ReadBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		var (
			tooLarge *http.MaxBytesError
			netErr   net.Error
		)
		switch {
		case errors.As(err, &tooLarge):
			return nil, apperr.ErrPayloadTooLarge
		case errors.As(err, &netErr) && netErr.Timeout():
			// The error names the sockets; the client learns only what happened.
			return nil, apperr.ErrRequestTimeout
		}
		return nil, apperr.ErrInvalidRequest.Withf("cannot read the body: the connection failed before it ended")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// Decode reads r's JSON body into dst with DecodeBytes; a body over 1 MiB is
// payload_too_large.
func Decode(r *http.Request, dst any) error {
	body, err := ReadBody(r)
	if err != nil {
		return err
	}
	return DecodeBytes(body, dst)
}

// DecodeBytes decodes body, exactly one JSON value, into dst, a non-nil pointer. It is the
// one JSON decoder of every handler, and stricter than encoding/json: it refuses, as 400
// invalid_request, invalid UTF-8 anywhere in the body, syntax errors, trailing data, a key
// that appears twice in one object (at any depth), a key that names no field of the target
// struct — also one that matches a field only when case is ignored, which encoding/json
// would accept — and a value of the wrong JSON type or out of the Go type's range. The
// problem's detail names the offending JSON field by its path ("items[0].quantity"), never
// a Go type.
//
// The body is checked in one pass against the target type's shape before encoding/json
// fills dst, so that a refused body leaves dst untouched.
func DecodeBytes(body []byte, dst any) error {
	sh, err := targetShape(dst)
	if err != nil {
		return err
	}
	if err := check(body, sh); err != nil {
		return apperr.ErrInvalidRequest.Withf("invalid JSON body: %s", err)
	}
	if err := json.Unmarshal(body, dst); err != nil {
		// The check above mirrors encoding/json's rules for the types handlers decode into;
		// what it leaves to encoding/json (a custom unmarshaler's verdict, a map key, a
		// float32's range) is reported without the library's words, which name Go types.
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return apperr.ErrInvalidRequest.Withf("invalid JSON body: field %q has an invalid value", typeErr.Field)
		}
		return apperr.ErrInvalidRequest.Withf("invalid JSON body: a value is invalid")
	}
	return nil
}

// PathParam returns the URL parameter name of r's route, percent-decoded. chi matches
// routes on r.URL.RawPath when the request's path holds escapes that are not the default
// encoding (such as "%2D"), and then gives the still-escaped segment; otherwise it matches on
// the decoded r.URL.Path. PathParam decodes the former so that every route sees the same
// value for the same resource: "ENC%2D1" and "ENC-1" are both "ENC-1". A malformed escape
// is invalid_request.
func PathParam(r *http.Request, name string) (string, error) {
	v := chi.URLParam(r, name)
	if r.URL.RawPath == "" {
		return v, nil
	}
	decoded, err := url.PathUnescape(v)
	if err != nil {
		return "", apperr.ErrInvalidRequest.Withf("path parameter %s is not validly percent-encoded", name)
	}
	return decoded, nil
}
