// Package ids generates snowflake ids: 64-bit, time-ordered, unique across instances as long
// as each instance has its own node id (ONCEPAY_NODE_ID). They travel as JSON strings.
package ids

import (
	"fmt"
	"strconv"
	"time"

	"github.com/bwmarrin/snowflake"
)

// Generator hands out snowflake ids. It is safe for concurrent use.
type Generator struct{ node *snowflake.Node }

// New returns a generator for node (0..1023).
func New(node int64) (*Generator, error) {
	n, err := snowflake.NewNode(node)
	if err != nil {
		return nil, fmt.Errorf("snowflake node %d: %w", node, err)
	}
	return &Generator{node: n}, nil
}

// Next returns a new id.
func (g *Generator) Next() int64 { return g.node.Generate().Int64() }

// Format renders an id as the decimal string the API uses.
func Format(id int64) string { return strconv.FormatInt(id, 10) }

// Parse reads an id from its decimal string, in the one form Format writes: ok is false for
// anything else, also for another spelling of a valid id ("+123", "0123"), so that an id,
// like a key, has one spelling on every path (a URL, an out_trade_no, an admin selector).
func Parse(s string) (id int64, ok bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

// Floor is the smallest id any generator hands out at t or later: a snowflake begins with its
// millisecond, so ids >= Floor(t) is a primary-key range that holds every row made since t
// (on instances whose clocks agree with this one's).
func Floor(t time.Time) int64 {
	ms := max(t.UnixMilli()-snowflake.Epoch, 0)
	return ms << (snowflake.NodeBits + snowflake.StepBits)
}
