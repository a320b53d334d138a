package ids_test

import (
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/ids"
)

// TestFloor: an id made after t is at least Floor(t), and one made before t is below it, so
// that ids >= Floor(t) holds exactly the rows made since t (on agreeing clocks).
func TestFloor(t *testing.T) {
	g, err := ids.New(1023)
	if err != nil {
		t.Fatal(err)
	}
	before := g.Next()
	time.Sleep(2 * time.Millisecond)
	at := time.Now()
	after := g.Next()
	if f := ids.Floor(at); after < f || before >= f {
		t.Errorf("Floor(%s) = %d: the id made before is %d, the one after %d", at, f, before, after)
	}
	if f := ids.Floor(time.Unix(0, 0)); f != 0 {
		t.Errorf("Floor before the epoch = %d, want 0", f)
	}
}
