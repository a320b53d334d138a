package web

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/go-json-experiment/json"

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
// would accept — objects and arrays nested more than 64 levels deep, and a value of the wrong
// JSON type or out of the Go type's range. The problem's detail names the offending JSON
// field by its path ("items[0].quantity"), never a Go type.
//
// The body is decoded by encoding/json/v2's semantics (github.com/go-json-experiment/json)
// into a fresh value, which replaces what dst points to only when the whole body is
// accepted: a refused body leaves dst untouched, and an accepted one leaves zero the fields
// that it does not name.
func DecodeBytes(body []byte, dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return errNotPointer
	}
	if !utf8.Valid(body) {
		return apperr.ErrInvalidRequest.Withf("invalid JSON body: the body is not valid UTF-8")
	}
	// Past the depth limit only what comes before it is decoded: an error up to there is the
	// first, and otherwise the depth is.
	deep, end := tooDeep(body), len(body)
	if deep >= 0 {
		end = deep
	}
	fresh := reflect.New(v.Type().Elem())
	err := json.Unmarshal(body[:end], fresh.Interface(), strictOptions)
	if err == nil && deep < 0 {
		v.Elem().Set(fresh.Elem())
		return nil
	}
	// The decoder stops at its first error; one of meaning comes after valid syntax.
	var semErr *json.SemanticError
	if errors.As(err, &semErr) {
		return apperr.ErrInvalidRequest.Withf("invalid JSON body: %s", semanticError(body, semErr))
	}
	if msg, off := syntaxError(body); msg != "" && (deep < 0 || off <= deep) {
		return apperr.ErrInvalidRequest.Withf("invalid JSON body: %s", msg)
	}
	if deep >= 0 {
		return apperr.ErrInvalidRequest.Withf("invalid JSON body: objects and arrays nest more than %d levels at offset %d", maxDepth, deep)
	}
	return apperr.ErrInvalidRequest.Withf("invalid JSON body: a value is invalid")
}

var errNotPointer = errors.New("web: DecodeBytes needs a non-nil pointer")

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
