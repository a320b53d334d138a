package idempotent

import (
	"bytes"
	"reflect"
	"testing"
)

// TestCachedEncoding: what the replay cache stores reads back the same — the status, every
// header and the body byte for byte, also a body with newlines, binary bytes or nothing — and
// anything else is refused rather than half read.
func TestCachedEncoding(t *testing.T) {
	cases := []cached{
		{Fingerprint: "fp1", Response: Response{Status: 201, Header: map[string]string{"Content-Type": "application/json", "Location": "/v1/orders/1"}, Body: []byte("{\"a\":1}\n")}},
		{Fingerprint: "fp2", Response: Response{Status: 409, Body: []byte("line1\n\nline3: x\n")}},
		{Fingerprint: "fp3", Response: Response{Status: 200, Body: []byte{0, 1, 2, '\n', 0xff}}},
		{Fingerprint: "fp4", Response: Response{Status: 204}},
	}
	for _, c := range cases {
		got, ok := decodeCached(c.encode())
		if !ok {
			t.Fatalf("decode(encode(%+v)) refused", c)
		}
		if got.Fingerprint != c.Fingerprint || got.Response.Status != c.Response.Status ||
			!reflect.DeepEqual(got.Response.Header, c.Response.Header) || !bytes.Equal(got.Response.Body, c.Response.Body) {
			t.Errorf("decode(encode(%+v)) = %+v", c, got)
		}
	}
	for _, bad := range []string{"", "fp", "fp\nNaN\n\n", "fp\n200\nno-colon\n\nbody", "fp\n200\nA: b\n"} {
		if _, ok := decodeCached([]byte(bad)); ok {
			t.Errorf("decode(%q) accepted", bad)
		}
	}
}
