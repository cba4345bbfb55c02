package yamlpath

import (
	"errors"
	"fmt"
	"testing"
)

func TestLeaves(t *testing.T) {
	t.Parallel()
	a, b, c := errors.New("a"), errors.New("b"), errors.New("c")
	got := Leaves(errors.Join(a, errors.Join(b, nil, c)))
	if fmt.Sprint(got) != "[a b c]" {
		t.Errorf("Leaves = %v, want [a b c] in order", got)
	}
	if Leaves(nil) != nil {
		t.Error("Leaves(nil) is not empty")
	}
	if got := Leaves(a); len(got) != 1 || got[0] != a {
		t.Errorf("Leaves(a) = %v, want [a]", got)
	}
}
