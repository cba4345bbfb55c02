package filewatch

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshfed/meshfed/registries/registrytest"
)

// TestWakeFromRealEvents: on the platform's real events, a file renamed
// into place from the same directory is read at once, while a file
// created and written in place is not: its create waits the quiet period
// and its writes the settle time (a half-written file is never read as
// truth).
func TestWakeFromRealEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	moved, inPlace := filepath.Join(dir, "moved.yaml"), filepath.Join(dir, "inplace.yaml")
	put(t, moved, "a\n")
	f, err := os.Create(inPlace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("b\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	got := map[string][]int{} // by name: the wake of each event with Create or Write
	deadline := time.After(wait)
	for len(got[moved]) < 1 || len(got[inPlace]) < 2 {
		select {
		case ev := <-w.Events:
			if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) {
				got[ev.Name] = append(got[ev.Name], wake(ev))
			}
		case err := <-w.Errors:
			t.Fatal(err)
		case <-deadline:
			t.Fatalf("events within %s: %v", wait, got)
		}
	}
	if want := []int{wakeNow}; !slices.Equal(got[moved], want) {
		t.Errorf("renamed into place: wake %v, want %v (read at once)", got[moved], want)
	}
	if want := []int{wakeQuiet, wakeSettled}; !slices.Equal(got[inPlace], want) {
		t.Errorf("created and written in place: wake %v, want %v (never at once)", got[inPlace], want)
	}
}

// TestRenameIntoPlaceIsReadAtOnce: with the quiet period and the settle
// time an hour long, a file renamed into place is still read: at once.
func TestRenameIntoPlaceIsReadAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	put(t, filepath.Join(dir, "a.yaml"), "a1\n")
	w := lines(dir)
	w.Quiet, w.MaxWait, w.Settle = time.Hour, time.Hour, time.Hour
	sink := registrytest.NewSink()
	defer registrytest.Start(t, w, sink)()
	sink.WaitFor(t, wait, func(s registrytest.State) bool { return hostnames(s) == "a1" })
	for _, want := range []string{"a2", "a3"} {
		put(t, filepath.Join(dir, "a.yaml"), want+"\n")
		sink.WaitFor(t, wait, func(s registrytest.State) bool { return hostnames(s) == want })
	}
}

// TestRealPathIsEvalSymlinks: realPath resolves what EvalSymlinks
// resolves — a plain file, a file in a symlinked directory, a symlink to
// a file elsewhere, a ConfigMap-style chain through ..data — and fails
// where it fails.
func TestRealPathIsEvalSymlinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	real, link, cm := filepath.Join(root, "real"), filepath.Join(root, "link"), filepath.Join(root, "cm")
	must(os.MkdirAll(filepath.Join(cm, "..2026_01_01"), 0o755))
	must(os.Mkdir(real, 0o755))
	must(os.WriteFile(filepath.Join(real, "a.yaml"), nil, 0o644))
	must(os.WriteFile(filepath.Join(cm, "..2026_01_01", "s.yaml"), nil, 0o644))
	must(os.Symlink(real, link))
	must(os.Symlink(filepath.Join(real, "a.yaml"), filepath.Join(root, "b.yaml")))
	must(os.Symlink("..2026_01_01", filepath.Join(cm, "..data")))
	must(os.Symlink(filepath.Join("..data", "s.yaml"), filepath.Join(cm, "s.yaml")))
	dirs := map[string]string{}
	for _, f := range []string{
		filepath.Join(real, "a.yaml"), filepath.Join(link, "a.yaml"), filepath.Join(root, "b.yaml"),
		filepath.Join(cm, "s.yaml"), filepath.Join(link, "missing.yaml"),
	} {
		want, wantErr := filepath.EvalSymlinks(f)
		got, err := realPath(f, dirs)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Errorf("realPath(%s) = %q, %v; EvalSymlinks: %q, %v", f, got, err, want, wantErr)
		}
	}
}
