package filewatch

import (
	"time"
)

// DefaultConfirmAfter is how long the files must stay as they are before
// a Watch sends an update that removed endpoints again.
//
// The aggregator's hold-down (maxDeleteRatio, docs/architecture.md)
// applies a held update when the registry sends it again. A registry that
// polls or watches a backend does so on its next answer; a Watch
// publishes only what changed, so without this it would never confirm and
// every held update would wait for the hold-down time (1 minute). With it,
// an update that removed endpoints (and the first update of a Run, which
// may remove endpoints of a restored or previous state) is re-read once the
// files stayed as they were for DefaultConfirmAfter and, unchanged and
// without errors, sent again: a truncated or emptied file that nobody
// fixes within 30 s is applied then; a fix written before replaces it.
const DefaultConfirmAfter = 30 * time.Second

// confirmation tracks the last published update that awaits confirmation.
// Only Run's goroutine uses it.
type confirmation struct {
	after     time.Duration
	timer     *time.Timer // fires when the pending update is due; stopped otherwise
	pending   bool        // the last published update is to be sent again
	seq       uint64      // number of updates published in this Run
	endpoints int         // endpoints of the last published update
	removed   bool        // the pending update removed endpoints (else: the Run's first)
}

func newConfirmation(after time.Duration) *confirmation {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &confirmation{after: after, timer: t}
}

// published records an update sent with Replace (n: its endpoints): the first of a Run and
// one with fewer endpoints than the previous one await confirmation.
func (c *confirmation) published(n int) {
	c.removed = c.seq > 0 && n < c.endpoints
	c.pending = c.seq == 0 || c.removed
	c.seq++
	c.endpoints = n
	c.timer.Stop()
	if c.pending {
		c.timer.Reset(c.after)
	}
}

// due is called when the timer fired and the files were re-read: seq is
// the count of updates before that read, busy says a read is still due
// (a file changing), failing that a file has an error. It reports whether
// the pending update is to be sent again now; otherwise a still pending
// update is retried after another period.
func (c *confirmation) due(seq uint64, busy, failing bool) bool {
	switch {
	case !c.pending || c.seq != seq: // confirmed already, or a newer update re-armed it
		return false
	case busy || failing:
		c.timer.Reset(c.after)
		return false
	}
	c.pending = false
	return true
}
