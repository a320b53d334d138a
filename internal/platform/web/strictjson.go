package web

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// strictOptions are the rules of DecodeBytes that the library enforces, spelled out even
// where they are its defaults.
var strictOptions = json.JoinOptions(
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
	json.MatchCaseInsensitiveNames(false),
	json.RejectUnknownMembers(true),
)

// maxDepth is how deeply objects and arrays may nest in a request body. No request of the
// API nests more than a few levels; the limit keeps a hostile body from costing a deep
// recursion. The library's own limit is 10,000.
const maxDepth = 64

// tooDeep returns the offset of the first '[' or '{' of body that nests deeper than
// maxDepth, or -1. It tells strings apart only to skip them, so it is exact up to body's
// first syntax error, which is all DecodeBytes asks of it.
func tooDeep(body []byte) int {
	if bytes.Count(body, []byte{'['})+bytes.Count(body, []byte{'{'}) <= maxDepth {
		return -1
	}
	depth, inString := 0, false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case inString && c == '\\':
			i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > maxDepth {
				return i
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return -1
}

// semanticError words the library's semantic refusal of body in the project's terms: the offending field
// by its JSON path, never a Go type, which the library's own messages name.
func semanticError(body []byte, e *json.SemanticError) string {
	dec, _ := tokens(body[:min(int(e.ByteOffset), len(body))])
	subject := subject(dec, e.JSONPointer)
	switch {
	case errors.Is(e.Err, json.ErrUnknownName):
		return "unknown " + subject + caseHint(e.GoType, e.JSONPointer.LastToken())
	case errors.Is(e.Err, strconv.ErrRange):
		return subject + " is out of range"
	case e.Err == nil || errors.Is(e.Err, strconv.ErrSyntax):
		if w := wants(e.GoType); w != "" {
			return subject + " must be " + w
		}
	}
	return subject + " has an invalid value"
}

// tokens reads body's tokens in order, up to its first syntax error or the end of its first
// JSON value, and returns the decoder there, whose stack holds the objects and arrays open
// at that point, and the error.
func tokens(body []byte) (*jsontext.Decoder, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(body))
	for {
		if _, err := dec.ReadToken(); err != nil || dec.StackDepth() == 0 {
			return dec, err
		}
	}
}

// syntaxWords word the library's syntax errors, known by how they end, or begin.
var syntaxWords = []struct{ lib, ours string }{
	{"after object name (expecting ':')", "expected ':' after a field name"},
	{"after object value (expecting ',' or '}')", "expected ',' or '}' after an object field"},
	{"after array element (expecting ',' or ']')", "expected ',' or ']' after an array element"},
	{"in number (expecting digit)", "invalid number"},
	{"in string (expecting non-control character)", "control character in a string"},
	{"invalid surrogate pair", `unpaired surrogate in a \u escape (not valid UTF-8)`},
	{"invalid escape sequence", "invalid escape in a string"},
}

// syntaxError describes body's first syntax error and returns its offset, or "" when body is
// one JSON value. It reads the tokens in order, as the decoder does not: that one reads some
// values whole before it looks at them, and can meet a later error first.
func syntaxError(body []byte) (string, int) {
	dec, err := tokens(body)
	if err == nil {
		rest := bytes.TrimLeft(body[dec.InputOffset():], space)
		if len(rest) == 0 {
			return "", len(body)
		}
		off := len(body) - len(rest)
		return fmt.Sprintf("unexpected data after the JSON value at offset %d", off), off
	}
	if len(bytes.TrimLeft(body, space)) == 0 {
		return "the body is empty", len(body)
	}
	kind, length := dec.StackIndex(dec.StackDepth())
	wantName := kind == '{' && length%2 == 0
	off, msg := len(body), ""
	var e *jsontext.SyntacticError
	if errors.As(err, &e) && !errors.Is(e.Err, io.ErrUnexpectedEOF) {
		off, msg = min(int(e.ByteOffset), len(body)), fmt.Sprint(e.Err)
	}
	switch {
	case errors.Is(err, jsontext.ErrDuplicateName):
		return "duplicate " + subject(dec, e.JSONPointer), off
	case msg == "":
		// Cut short: a literal, or anything but a string where a name belongs, is wrong
		// from its start.
		rest := bytes.TrimLeft(body[dec.InputOffset():], space+",:")
		if len(rest) > 0 && ('a' <= rest[0] && rest[0] <= 'z' || wantName && rest[0] != '"') {
			off = len(body) - len(rest)
		}
	case strings.Contains(msg, " in literal ") || wantName && strings.HasSuffix(msg, "in number (expecting digit)"):
		for off > 0 && strings.IndexByte("abcdefghijklmnopqrstuvwxyz0123456789+-.E", body[off-1]) >= 0 {
			off--
		}
	case errors.Is(err, jsontext.ErrNonStringName):
	case !wantName && strings.HasSuffix(msg, "after object value (expecting ',' or '}')"):
		// The library's words also for a bracket after a name: the character is wrong.
	case strings.HasPrefix(msg, "invalid escape sequence") && off+1 < len(body) && body[off+1] == 'u':
		return fmt.Sprintf(`invalid \u escape at offset %d`, off), off
	default:
		for _, w := range syntaxWords {
			if strings.HasSuffix(msg, w.lib) || strings.HasPrefix(msg, w.lib) {
				return fmt.Sprintf("%s at offset %d", w.ours, off), off
			}
		}
		// What is left ("at start of value") is about the character at off, unless that is
		// a delimiter right after a member, which the library blames for what follows it.
		before := bytes.TrimRight(body[:off], space)
		if length > 0 && (kind == '[' || wantName) && !bytes.HasSuffix(before, []byte(",")) && off < len(body) {
			next := len(body) - len(bytes.TrimLeft(body[off+1:], space))
			switch {
			case body[off] == ',' && next < len(body) && (body[next] == '}' || body[next] == ']'):
				off = next // the comma is in its place; what follows it is not
			case body[off] == ':' && kind == '[':
				return fmt.Sprintf("expected ',' or ']' after an array element at offset %d", off), off
			case body[off] == ':':
				return fmt.Sprintf("expected ',' or '}' after an object field at offset %d", off), off
			}
		}
	}
	switch {
	case off >= len(body):
		return "the body ends in the middle of the JSON value", len(body)
	case wantName:
		return fmt.Sprintf("expected a field name at offset %d", off), off
	}
	return fmt.Sprintf("invalid character %q at offset %d", body[off], off), off
}

// space is JSON's whitespace.
const space = " \t\r\n"

// subject names the value at ptr, with dec stopped where the library found it:
// `field "items[0].quantity"`, or "the body" at the root. A JSON pointer spells an array
// index and an object key alike; the kinds of dec's open values tell them apart.
func subject(dec *jsontext.Decoder, ptr jsontext.Pointer) string {
	if ptr == "" {
		return "the body"
	}
	var path strings.Builder
	i := 0
	for tok := range ptr.Tokens() {
		var kind jsontext.Kind
		if i++; i <= dec.StackDepth() {
			kind, _ = dec.StackIndex(i)
		}
		switch {
		case kind == '[':
			path.WriteString("[" + tok + "]")
		case i > 1:
			path.WriteString("." + tok)
		default:
			path.WriteString(tok)
		}
	}
	return "field " + strconv.Quote(path.String())
}

// caseHint says which field of struct t the unknown name matches when case is ignored, as
// encoding/json would have taken it.
func caseHint(t reflect.Type, name string) string {
	for _, field := range jsonNames(t, 0) {
		if strings.EqualFold(field, name) {
			return ": field names are case-sensitive, did you mean " + strconv.Quote(field) + "?"
		}
	}
	return ""
}

// jsonNames returns the JSON names of struct t's fields: the json tag's name or the Go
// name, exported fields only, "-" skipped, the fields of untagged embedded structs promoted.
func jsonNames(t reflect.Type, depth int) []string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct || depth > 8 {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		switch {
		case tag == "-":
		case sf.Anonymous && name == "":
			names = append(names, jsonNames(sf.Type, depth+1)...)
		case sf.IsExported() && name == "":
			names = append(names, sf.Name)
		case sf.IsExported():
			names = append(names, name)
		}
	}
	return names
}

var textUnmarshalerT = reflect.TypeFor[encoding.TextUnmarshaler]()

// wants says what JSON a Go type takes, in JSON's words, or "" when the type judges its own.
func wants(t reflect.Type) string {
	if t == nil {
		return ""
	}
	if t.Implements(textUnmarshalerT) || reflect.PointerTo(t).Implements(textUnmarshalerT) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a string" // []byte is base64 text
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return ""
}
