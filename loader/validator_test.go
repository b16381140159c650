package loader

import (
	"testing"
	"time"
)

// TestValidatorHeldThenReleased: uses within the hold share one Validator;
// after a quiet spell it is dropped and the next use compiles a new one.
func TestValidatorHeldThenReleased(t *testing.T) {
	old := validatorHold
	validatorHold = 200 * time.Millisecond
	t.Cleanup(func() { validatorHold = old })

	a, _, _, err := validator()
	if err != nil {
		t.Fatal(err)
	}
	b, _, _, err := validator()
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("two uses in a row compiled two Validators")
	}
	// The second use restarted the hold: the first use's release must not
	// drop it. Poll until it is gone, however slow the machine.
	deadline := time.Now().Add(time.Minute)
	for {
		held.mu.Lock()
		gone := held.v == nil
		held.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Validator is still held a minute after its last use")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, _, _, err := validator()
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Fatal("a use after the release got the released Validator")
	}
}

// TestValidatorReleaseSkipsLaterUse: a release scheduled by an earlier use
// leaves a Validator that was used since.
func TestValidatorReleaseSkipsLaterUse(t *testing.T) {
	a, _, _, err := validator()
	if err != nil {
		t.Fatal(err)
	}
	held.mu.Lock()
	use := held.use
	held.mu.Unlock()
	if _, _, _, err := validator(); err != nil {
		t.Fatal(err)
	}
	releaseValidator(use)
	held.mu.Lock()
	v := held.v
	held.mu.Unlock()
	if v != a {
		t.Fatal("a stale release dropped a Validator in use")
	}
	releaseValidator(use + 1)
	held.mu.Lock()
	v = held.v
	held.mu.Unlock()
	if v != nil {
		t.Fatal("the release of the last use kept the Validator")
	}
}
