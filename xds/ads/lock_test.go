package ads

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestLockOrDone(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	if !lockOrDone(&mu, context.Background()) {
		t.Fatal("free mutex not taken")
	}
	// Held elsewhere: a cancelled wait gives up and leaves the mutex to
	// its holder, then frees what it took late.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- lockOrDone(&mu, ctx) }()
	cancel()
	if <-done {
		t.Fatal("lockOrDone took a held mutex after ctx ended")
	}
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for !mu.TryLock() {
		if time.Now().After(deadline) {
			t.Fatal("the late lock was never released")
		}
		time.Sleep(time.Millisecond)
	}
	mu.Unlock()
	// Held and then released: the waiter gets it.
	mu.Lock()
	go func() { done <- lockOrDone(&mu, context.Background()) }()
	mu.Unlock()
	if !<-done {
		t.Fatal("lockOrDone gave up without ctx ending")
	}
	mu.Unlock()
}
