package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

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
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, apperr.ErrPayloadTooLarge
		}
		return nil, apperr.ErrInvalidRequest.Withf("cannot read body: %v", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// Decode reads r's JSON body into dst. Unknown fields, trailing data and bodies over 1 MiB
// are client errors with the contract's codes.
func Decode(r *http.Request, dst any) error {
	body, err := ReadBody(r)
	if err != nil {
		return err
	}
	return DecodeBytes(body, dst)
}

// DecodeBytes is Decode for a body already read.
func DecodeBytes(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return apperr.ErrInvalidRequest.Withf("invalid JSON body: %s", describe(err))
	}
	if dec.More() {
		return apperr.ErrInvalidRequest.Withf("invalid JSON body: unexpected data after the JSON value")
	}
	return nil
}

func describe(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return fmt.Sprintf("field %q must be %s", typeErr.Field, typeErr.Type)
	}
	if errors.Is(err, io.EOF) {
		return "the body is empty"
	}
	return err.Error()
}
