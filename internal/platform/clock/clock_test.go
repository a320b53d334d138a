package clock

import (
	"testing"
	"time"
)

func TestOffset(t *testing.T) {
	prev := SetOffset(10 * time.Minute)
	t.Cleanup(func() { SetOffset(prev) })
	if d := time.Until(Now()); d < 10*time.Minute-time.Second || d > 10*time.Minute+time.Second {
		t.Fatalf("Now is %s off the machine's clock, want 10m", d)
	}
	SetOffset(-10 * time.Minute)
	if d := time.Since(Now()); d < 10*time.Minute-time.Second || d > 10*time.Minute+time.Second {
		t.Fatalf("Now is %s behind the machine's clock, want 10m", d)
	}
	if Now().Location() != time.UTC {
		t.Fatal("Now is not in UTC")
	}
}
