package web

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// PageParams reads a newest-first list's query: limit, 1..1000 (100 when absent), and cursor,
// a token PageCursor made with tag, which PageParams returns as before (0 on the first page).
// Any other parameter, a second copy of one, or a value out of range is 400 invalid_request:
// a typo in a filter must not silently list everything.
func PageParams(q url.Values, tag string) (limit int, before int64, err error) {
	limit = 100
	for name, values := range q {
		if len(values) != 1 {
			return 0, 0, apperr.ErrInvalidRequest.Withf("query parameter %q is given %d times; give it once", name, len(values))
		}
		v := values[0]
		switch name {
		case "limit":
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 1 || n > 1000 {
				return 0, 0, apperr.ErrInvalidRequest.Withf("limit must be an integer in 1..1000, got %q", v)
			}
			limit = n
		case "cursor":
			raw, derr := base64.RawURLEncoding.DecodeString(v)
			rest, ok := strings.CutPrefix(string(raw), tag+":")
			id, perr := strconv.ParseInt(rest, 10, 64)
			if derr != nil || !ok || perr != nil || id < 1 {
				return 0, 0, apperr.ErrInvalidRequest.Withf("cursor is not one this server gave: pass next_cursor unchanged")
			}
			before = id
		default:
			return 0, 0, apperr.ErrInvalidRequest.Withf("unknown query parameter %q: use limit and cursor", name)
		}
	}
	return limit, before, nil
}

// PageCursor is the opaque cursor of the page after id, the last row of a page: the base64 of
// "<tag>:<id>". The tag tells one list's cursors from another's.
func PageCursor(tag string, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tag + ":" + strconv.FormatInt(id, 10)))
}
