package mono

import (
	"strings"
	"testing"
	"time"
)

func TestNowFollowsTime(t *testing.T) {
	before := time.Now()
	d := Now()
	after := time.Now()
	at := Time(d)
	if at.Before(before) || at.After(after) {
		t.Fatalf("Time(Now()) = %v, want between %v and %v", at, before, after)
	}
	if d2 := Now(); d2 < d {
		t.Fatalf("Now went back: %v after %v", d2, d)
	}
	// A deadline built from a reading must follow the monotonic clock, as
	// one from time.Now does (String shows the reading as "m=+…").
	if s := at.String(); !strings.Contains(s, " m=+") {
		t.Fatalf("Time(d) = %q carries no monotonic reading", s)
	}
	if s := at.Round(0).String(); strings.Contains(s, " m=+") {
		t.Fatalf("the check above cannot fail: %q", s)
	}
}
