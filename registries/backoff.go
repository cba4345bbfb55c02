package registries

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// Backoff yields jittered, exponentially growing delays for reconnect loops.
// The zero value uses 200ms initial and 30s maximum. Not safe for
// concurrent use.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	next    time.Duration
}

// Next returns the delay to wait before the next attempt: the current step
// with ±20% jitter; each call doubles the step up to Max.
func (b *Backoff) Next() time.Duration {
	initial, maxD := b.Initial, b.Max
	if initial <= 0 {
		initial = 200 * time.Millisecond
	}
	if maxD <= 0 {
		maxD = 30 * time.Second
	}
	if b.next < initial {
		b.next = initial
	}
	d := b.next
	b.next = min(b.next*2, maxD)
	jitter := time.Duration(rand.Int64N(int64(d)/5*2+1)) - d/5
	return d + jitter
}

// Reset starts the sequence again after a success.
func (b *Backoff) Reset() { b.next = 0 }

// Wait sleeps for the next delay or until ctx ends, whichever is first, and
// returns ctx.Err() if ctx ended.
func (b *Backoff) Wait(ctx context.Context) error {
	return Sleep(ctx, b.Next())
}

// Sleep waits for d or until ctx ends; it returns ctx.Err() if ctx ended.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
