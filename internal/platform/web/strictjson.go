package web

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is how deeply objects and arrays may nest in a request body. No request of the
// API nests more than a few levels; the limit keeps a hostile body from costing a deep
// recursion.
const maxDepth = 64

// kind is what JSON a Go type accepts, as encoding/json decodes into it.
type kind uint8

const (
	kindAny    kind = iota // anything: interface{}, json.Unmarshaler, json.Number, ",string" fields
	kindStruct             // an object whose keys are the struct's JSON field names
	kindMap                // an object with any keys
	kindArray              // an array (slice or array)
	kindString             // a string (also []byte, base64, and encoding.TextUnmarshaler)
	kindBool               // true or false
	kindInt                // an integer within the type's bits
	kindUint               // a non-negative integer within the type's bits
	kindFloat              // a number within the type's bits
)

// want is how an error names what a kind accepts.
var want = [...]string{
	kindStruct: "an object",
	kindMap:    "an object",
	kindArray:  "an array",
	kindString: "a string",
	kindBool:   "true or false",
	kindInt:    "an integer",
	kindUint:   "a non-negative integer",
	kindFloat:  "a number",
}

// shape is what the strict check needs to know about a Go type: the JSON it accepts and,
// for containers, the shape of what they hold.
type shape struct {
	kind kind
	bits int
	// elem is the type of a map's values or an array's elements.
	elem reflect.Type
	// fields are a struct's JSON fields, by exact name.
	fields map[string]field
}

// field is one JSON field of a struct.
type field struct {
	name  string
	index int // the field's bit in the duplicate check
	typ   reflect.Type
}

var (
	shapes        sync.Map // reflect.Type → *shape
	unmarshalerT  = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshT  = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonNumberT   = reflect.TypeFor[json.Number]()
	errNotPointer = errors.New("web: DecodeBytes needs a non-nil pointer")
)

// targetShape returns the shape of what dst points to.
func targetShape(dst any) (*shape, error) {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, errNotPointer
	}
	return shapeOf(v.Type().Elem()), nil
}

// shapeOf returns t's shape, computed once per type. Pointers are followed the way
// encoding/json follows them, stopping at a type that unmarshals itself.
func shapeOf(t reflect.Type) *shape {
	if sh, ok := shapes.Load(t); ok {
		return sh.(*shape)
	}
	sh := computeShape(t)
	shapes.Store(t, sh)
	return sh
}

func computeShape(t reflect.Type) *shape {
	for {
		pt := reflect.PointerTo(t)
		switch {
		case t == jsonNumberT || t.Implements(unmarshalerT) || pt.Implements(unmarshalerT):
			return &shape{kind: kindAny}
		case t.Implements(textUnmarshT) || pt.Implements(textUnmarshT):
			return &shape{kind: kindString}
		}
		if t.Kind() != reflect.Pointer {
			break
		}
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		return &shape{kind: kindStruct, fields: structFields(t)}
	case reflect.Map:
		return &shape{kind: kindMap, elem: t.Elem()}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !isCustom(t.Elem()) {
			return &shape{kind: kindString} // []byte is base64 text
		}
		return &shape{kind: kindArray, elem: t.Elem()}
	case reflect.Array:
		return &shape{kind: kindArray, elem: t.Elem()}
	case reflect.String:
		return &shape{kind: kindString}
	case reflect.Bool:
		return &shape{kind: kindBool}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &shape{kind: kindInt, bits: t.Bits()}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &shape{kind: kindUint, bits: t.Bits()}
	case reflect.Float32, reflect.Float64:
		return &shape{kind: kindFloat, bits: t.Bits()}
	default:
		return &shape{kind: kindAny} // interfaces; encoding/json judges the rest
	}
}

// isCustom reports whether t unmarshals itself from JSON or text.
func isCustom(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return t.Implements(unmarshalerT) || pt.Implements(unmarshalerT) || t.Implements(textUnmarshT) || pt.Implements(textUnmarshT)
}

// structFields returns t's JSON fields by name, as encoding/json names them: the json tag's
// name or the Go name, exported fields only, "-" skipped, the fields of untagged embedded
// structs promoted unless a shallower field has the same name. A ",string" field accepts
// any JSON here and is judged by encoding/json.
func structFields(t reflect.Type) map[string]field {
	fields := map[string]field{}
	var walk func(t reflect.Type, depth int)
	walk = func(t reflect.Type, depth int) {
		var embedded []reflect.Type
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if sf.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if _, taken := fields[name]; taken {
				continue
			}
			typ := sf.Type
			if strings.Contains(","+opts+",", ",string,") {
				typ = reflect.TypeFor[any]()
			}
			fields[name] = field{name: name, index: len(fields), typ: typ}
		}
		if depth < 8 {
			for _, et := range embedded {
				walk(et, depth+1)
			}
		}
	}
	walk(t, 0)
	return fields
}

// checkError is a refusal of the strict check. Its message names the JSON field by its path,
// built on the way back up from where the error was found.
type checkError struct {
	// format has one %s for the subject: `field "items[0].sku"`, or "the body" at the root.
	// A syntax error's format has none and names an offset instead.
	format string
	// path holds the segments from the offending value up to the root, innermost first.
	path []segment
}

// segment is one step of a path: an object key or an array index.
type segment struct {
	key   string
	index int // -1 for a key
}

func (e *checkError) Error() string {
	if !strings.Contains(e.format, "%s") {
		return e.format
	}
	if len(e.path) == 0 {
		return fmt.Sprintf(e.format, "the body")
	}
	var b strings.Builder
	for i := len(e.path) - 1; i >= 0; i-- {
		switch s := e.path[i]; {
		case s.index >= 0:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case i < len(e.path)-1:
			b.WriteString("." + s.key)
		default:
			b.WriteString(s.key)
		}
	}
	return fmt.Sprintf(e.format, "field "+strconv.Quote(b.String()))
}

// at adds a path segment to err when it is a checkError.
func at(err error, s segment) error {
	if ce, ok := err.(*checkError); ok {
		ce.path = append(ce.path, s)
	}
	return err
}

// checker walks a JSON document and its target's shape together.
type checker struct {
	data []byte
	pos  int
}

// check validates body, one JSON value for a target of shape sh.
func check(body []byte, sh *shape) error {
	if !utf8.Valid(body) {
		return &checkError{format: "the body is not valid UTF-8"}
	}
	c := checker{data: body}
	c.space()
	if c.pos == len(c.data) {
		return &checkError{format: "the body is empty"}
	}
	if err := c.value(sh, 0); err != nil {
		return err
	}
	c.space()
	if c.pos != len(c.data) {
		return &checkError{format: "unexpected data after the JSON value at offset " + strconv.Itoa(c.pos)}
	}
	return nil
}

func (c *checker) space() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *checker) syntax(what string) error {
	if c.pos >= len(c.data) {
		return &checkError{format: "the body ends in the middle of the JSON value"}
	}
	return &checkError{format: fmt.Sprintf("%s at offset %d", what, c.pos)}
}

// mismatch is a value of the wrong JSON type for sh.
func mismatch(sh *shape) error {
	return &checkError{format: "%s must be " + want[sh.kind]}
}

// value checks the value at c.pos for a target of shape sh (nil: anything).
func (c *checker) value(sh *shape, depth int) error {
	c.space()
	if c.pos >= len(c.data) {
		return c.syntax("")
	}
	switch b := c.data[c.pos]; {
	case b == '{':
		if depth >= maxDepth {
			return c.syntax(fmt.Sprintf("objects and arrays nest more than %d levels", maxDepth))
		}
		return c.object(sh, depth+1)
	case b == '[':
		if depth >= maxDepth {
			return c.syntax(fmt.Sprintf("objects and arrays nest more than %d levels", maxDepth))
		}
		return c.array(sh, depth+1)
	case b == '"':
		if _, _, err := c.str(); err != nil {
			return err
		}
		if sh != nil && sh.kind != kindAny && sh.kind != kindString {
			return mismatch(sh)
		}
		return nil
	case b == 't':
		return c.literal("true", sh, kindBool)
	case b == 'f':
		return c.literal("false", sh, kindBool)
	case b == 'n':
		return c.literal("null", nil, kindAny) // null suits every type: it leaves the value alone
	case b == '-' || ('0' <= b && b <= '9'):
		return c.number(sh)
	default:
		return c.syntax(fmt.Sprintf("invalid character %q", b))
	}
}

func (c *checker) literal(lit string, sh *shape, k kind) error {
	if len(c.data)-c.pos < len(lit) || string(c.data[c.pos:c.pos+len(lit)]) != lit {
		return c.syntax(fmt.Sprintf("invalid character %q", c.data[c.pos]))
	}
	c.pos += len(lit)
	if sh != nil && sh.kind != kindAny && sh.kind != k {
		return mismatch(sh)
	}
	return nil
}

// number checks a JSON number and, for integer targets, that it is an integer in range.
func (c *checker) number(sh *shape) error {
	start := c.pos
	neg := c.data[c.pos] == '-'
	if neg {
		c.pos++
	}
	digits := c.pos
	switch {
	case c.pos < len(c.data) && c.data[c.pos] == '0':
		c.pos++
	case c.pos < len(c.data) && '1' <= c.data[c.pos] && c.data[c.pos] <= '9':
		for c.pos < len(c.data) && isDigit(c.data[c.pos]) {
			c.pos++
		}
	default:
		return c.syntax("invalid number")
	}
	intEnd := c.pos
	if c.pos < len(c.data) && c.data[c.pos] == '.' {
		c.pos++
		if !c.digits() {
			return c.syntax("invalid number")
		}
	}
	if c.pos < len(c.data) && (c.data[c.pos] == 'e' || c.data[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.data) && (c.data[c.pos] == '+' || c.data[c.pos] == '-') {
			c.pos++
		}
		if !c.digits() {
			return c.syntax("invalid number")
		}
	}
	if sh == nil {
		return nil
	}
	switch sh.kind {
	case kindAny:
		return nil
	case kindFloat:
		if _, err := strconv.ParseFloat(string(c.data[start:c.pos]), sh.bits); err != nil {
			return &checkError{format: "%s is out of range"}
		}
		return nil
	case kindInt, kindUint:
		if intEnd != c.pos || (neg && sh.kind == kindUint) {
			return mismatch(sh)
		}
		limit := uint64(1)<<(sh.bits-1) - 1 // the largest int of these bits
		switch {
		case sh.kind == kindUint:
			limit = limit<<1 | 1
		case neg:
			limit++
		}
		if n, ok := parseUint(c.data[digits:intEnd]); !ok || n > limit {
			return &checkError{format: "%s is out of range"}
		}
		return nil
	default:
		return mismatch(sh)
	}
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// digits consumes one or more digits.
func (c *checker) digits() bool {
	start := c.pos
	for c.pos < len(c.data) && isDigit(c.data[c.pos]) {
		c.pos++
	}
	return c.pos > start
}

// parseUint parses decimal digits, reporting overflow of uint64.
func parseUint(b []byte) (uint64, bool) {
	var n uint64
	for _, d := range b {
		if n > (1<<64-1)/10 {
			return 0, false
		}
		n = n*10 + uint64(d-'0')
		if n < uint64(d-'0') {
			return 0, false
		}
	}
	return n, true
}

// str consumes a string and returns its raw content (between the quotes) and whether it
// holds escapes. Control characters and escapes that are not JSON's are refused, and so is a
// \u escape of half a surrogate pair, which could only decode to invalid UTF-8.
func (c *checker) str() (raw []byte, escaped bool, err error) {
	c.pos++ // the opening quote
	start := c.pos
	for c.pos < len(c.data) {
		switch b := c.data[c.pos]; {
		case b == '"':
			raw = c.data[start:c.pos]
			c.pos++
			return raw, escaped, nil
		case b < 0x20:
			return nil, false, c.syntax("control character in a string")
		case b == '\\':
			escaped = true
			if err := c.escape(); err != nil {
				return nil, false, err
			}
		default:
			c.pos++
		}
	}
	return nil, false, c.syntax("")
}

// escape consumes one escape sequence at c.pos.
func (c *checker) escape() error {
	if c.pos+1 >= len(c.data) {
		return c.syntax("")
	}
	switch c.data[c.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		c.pos += 2
		return nil
	case 'u':
		r, ok := hex4(c.data[c.pos+2:])
		if !ok {
			return c.syntax("invalid \\u escape")
		}
		switch {
		case utf16.IsSurrogate(r) && r < 0xDC00:
			if c.pos+7 < len(c.data) && c.data[c.pos+6] == '\\' && c.data[c.pos+7] == 'u' {
				if lo, ok := hex4(c.data[c.pos+8:]); ok && 0xDC00 <= lo && lo <= 0xDFFF {
					c.pos += 12
					return nil
				}
			}
			return c.syntax("unpaired surrogate in a \\u escape (not valid UTF-8)")
		case utf16.IsSurrogate(r):
			return c.syntax("unpaired surrogate in a \\u escape (not valid UTF-8)")
		}
		c.pos += 6
		return nil
	default:
		return c.syntax("invalid escape in a string")
	}
}

// hex4 parses the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, h := range b[:4] {
		switch {
		case '0' <= h && h <= '9':
			h -= '0'
		case 'a' <= h && h <= 'f':
			h -= 'a' - 10
		case 'A' <= h && h <= 'F':
			h -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	return r, true
}

// unescape decodes the content of a string already checked by str.
func unescape(raw []byte) string {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			out = append(out, raw[i])
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, _ := hex4(raw[i+1:])
			i += 4
			if utf16.IsSurrogate(r) {
				lo, _ := hex4(raw[i+3:])
				r = utf16.DecodeRune(r, lo)
				i += 6
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, raw[i])
		}
	}
	return string(out)
}

// object checks an object for a target of shape sh: no key twice, and for a struct only its
// fields' exact names.
func (c *checker) object(sh *shape, depth int) error {
	if sh != nil && sh.kind != kindAny && sh.kind != kindStruct && sh.kind != kindMap {
		return mismatch(sh)
	}
	var seen seenKeys
	c.pos++ // '{'
	c.space()
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		return nil
	}
	for {
		c.space()
		if c.pos >= len(c.data) || c.data[c.pos] != '"' {
			return c.syntax("expected a field name")
		}
		raw, escaped, err := c.str()
		if err != nil {
			return err
		}
		var key string
		if escaped {
			key = unescape(raw)
		}
		var elem *shape
		if sh != nil && sh.kind == kindStruct {
			if !escaped {
				// A lookup by string(raw) does not allocate.
				f, ok := sh.fields[string(raw)]
				if !ok {
					return unknownField(sh, string(raw))
				}
				if seen.bit(f.index) {
					return &checkError{format: "duplicate %s", path: []segment{{key: f.name, index: -1}}}
				}
				key, elem = f.name, shapeOf(f.typ)
			} else {
				f, ok := sh.fields[key]
				if !ok {
					return unknownField(sh, key)
				}
				if seen.bit(f.index) {
					return &checkError{format: "duplicate %s", path: []segment{{key: f.name, index: -1}}}
				}
				elem = shapeOf(f.typ)
			}
		} else {
			if !escaped {
				key = string(raw)
			}
			if seen.key(key) {
				return &checkError{format: "duplicate %s", path: []segment{{key: key, index: -1}}}
			}
			if sh != nil && sh.kind == kindMap {
				elem = shapeOf(sh.elem)
			}
		}
		c.space()
		if c.pos >= len(c.data) || c.data[c.pos] != ':' {
			return c.syntax("expected ':' after a field name")
		}
		c.pos++
		if err := c.value(elem, depth); err != nil {
			return at(err, segment{key: key, index: -1})
		}
		c.space()
		if c.pos >= len(c.data) {
			return c.syntax("")
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
		case '}':
			c.pos++
			return nil
		default:
			return c.syntax("expected ',' or '}' after an object field")
		}
	}
}

// unknownField refuses key, which names no field of sh; a key that differs from a field's
// name only in case says so, since encoding/json would have taken it for that field.
func unknownField(sh *shape, key string) error {
	err := &checkError{format: "unknown %s", path: []segment{{key: key, index: -1}}}
	for name := range sh.fields {
		if strings.EqualFold(name, key) {
			err.format = "unknown %s: field names are case-sensitive, did you mean " + strconv.Quote(name) + "?"
			break
		}
	}
	return err
}

// array checks an array for a target of shape sh.
func (c *checker) array(sh *shape, depth int) error {
	if sh != nil && sh.kind != kindAny && sh.kind != kindArray {
		return mismatch(sh)
	}
	var elem *shape
	if sh != nil && sh.kind == kindArray {
		elem = shapeOf(sh.elem)
	}
	c.pos++ // '['
	c.space()
	if c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := c.value(elem, depth); err != nil {
			return at(err, segment{index: i})
		}
		c.space()
		if c.pos >= len(c.data) {
			return c.syntax("")
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
		case ']':
			c.pos++
			return nil
		default:
			return c.syntax("expected ',' or ']' after an array element")
		}
	}
}

// seenKeys remembers the keys of one object: struct fields by their bit, other keys by name.
type seenKeys struct {
	bits  uint64
	more  map[int]bool
	names []string
	set   map[string]struct{}
}

// bit marks struct field i, reporting whether it was already marked.
func (s *seenKeys) bit(i int) bool {
	if i < 64 {
		was := s.bits&(1<<i) != 0
		s.bits |= 1 << i
		return was
	}
	if s.more == nil {
		s.more = map[int]bool{}
	}
	was := s.more[i]
	s.more[i] = true
	return was
}

// key marks key, reporting whether it was already marked. Small objects are searched
// linearly; large ones move to a set.
func (s *seenKeys) key(k string) bool {
	if s.set == nil {
		for _, n := range s.names {
			if n == k {
				return true
			}
		}
		if len(s.names) < 16 {
			s.names = append(s.names, k)
			return false
		}
		s.set = make(map[string]struct{}, 32)
		for _, n := range s.names {
			s.set[n] = struct{}{}
		}
	}
	if _, ok := s.set[k]; ok {
		return true
	}
	s.set[k] = struct{}{}
	return false
}
