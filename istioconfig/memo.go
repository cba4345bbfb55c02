package istioconfig

import (
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
)

// objectMemo keeps what the Source derived from each object at its last
// read, so that a read after one object changed hashes and validates
// that object only (a DeltaFeed's objects keep theirs in the feedView
// instead: viewObject):
//
//   - the hash of a feed object, by (feed part, kind, namespace, name)
//     and Spec pointer: a Feed returns the same Spec for an unchanged
//     object (FeedObject.Spec);
//   - the validation result of any object, by its hash (kind, namespace,
//     name and content: files have no resourceVersion, so their objects
//     are recognised by content).
//
// Entries are usable at once (Source.update reads one object between two
// Reloads); entries not used by a Reload are dropped at its end (done). It is safe
// for concurrent use; concurrent reads only lose entries, not correctness.
type objectMemo struct {
	mu     sync.Mutex
	hashes map[feedKey]feedHash
	valid  map[string]error // by hash; nil: valid
	// used in the read under way (since the last done).
	usedHashes map[feedKey]feedHash
	usedValid  map[string]error

	hashed, validated atomic.Uint64 // work done, for tests
}

type feedKey struct{ group, kind, namespace, name string }

type feedHash struct {
	spec proto.Message
	hash string
}

// hash returns the hash of o, read from the feed part group, computed
// only when o's Spec is not the one of the last read.
func (m *objectMemo) hash(group string, o FeedObject) string {
	k := feedKey{group, o.Kind, o.Namespace, o.Name}
	m.mu.Lock()
	h, ok := m.hashes[k]
	m.mu.Unlock()
	if !ok || h.spec != o.Spec {
		h = feedHash{spec: o.Spec, hash: hashOf(o.Kind, o.Namespace, o.Name, o.Spec)}
		m.hashed.Add(1)
	}
	m.mu.Lock()
	if m.usedHashes == nil {
		m.usedHashes = map[feedKey]feedHash{}
	}
	if m.hashes == nil {
		m.hashes = map[feedKey]feedHash{}
	}
	m.usedHashes[k], m.hashes[k] = h, h
	m.mu.Unlock()
	return h.hash
}

// validate returns validate(p), computed only for a hash not validated at
// the last read, or, for an object of a feedView, once per viewObject
// (kept there, not here).
func (m *objectMemo) validate(p *parsed) error {
	if v := p.view; v != nil {
		if !v.checked {
			v.err, v.checked = validate(p), true
			m.validated.Add(1)
		}
		return v.err
	}
	m.mu.Lock()
	err, ok := m.valid[p.hash]
	m.mu.Unlock()
	if !ok || p.hash == "" {
		err = validate(p)
		m.validated.Add(1)
	}
	m.mu.Lock()
	if m.usedValid == nil {
		m.usedValid = map[string]error{}
	}
	if m.valid == nil {
		m.valid = map[string]error{}
	}
	m.usedValid[p.hash], m.valid[p.hash] = err, err
	m.mu.Unlock()
	return err
}

// done ends a read: what it did not use is forgotten.
func (m *objectMemo) done() {
	m.mu.Lock()
	m.hashes, m.valid = m.usedHashes, m.usedValid
	m.usedHashes, m.usedValid = nil, nil
	m.mu.Unlock()
}
