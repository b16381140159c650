package loader

import (
	"testing"
	"time"
)

// TestValidatorHeldThenReleased: uses within the hold share one Validator;
// after a quiet spell it is replaced by a fresh one, which the next use
// gets.
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
		gone := held.v != a && held.v != nil && held.rested
		held.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Validator is still held a minute after its last use")
		}
		time.Sleep(10 * time.Millisecond)
	}
	held.mu.Lock()
	fresh := held.v
	held.mu.Unlock()
	c, _, _, err := validator()
	if err != nil {
		t.Fatal(err)
	}
	if c == a || c != fresh {
		t.Fatal("a use after the release did not get the fresh Validator the release left")
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
	if v == a || v == nil {
		t.Fatal("the release of the last use kept the Validator, or left none")
	}
	// A second release without a use in between changes nothing.
	releaseValidator(use + 1)
	held.mu.Lock()
	again := held.v
	held.mu.Unlock()
	if again != v {
		t.Fatal("a second release replaced the fresh Validator again")
	}
}
