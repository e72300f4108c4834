package acp

import "testing"

func TestLineClasses(t *testing.T) {
	for n := minPooled; n <= maxPooled; n += 4099 {
		i, size := classUp(n)
		if size < n || size-n > n/classesPerX2 {
			t.Fatalf("classUp(%d) = size %d", n, size)
		}
		if j := classDown(size); j != i {
			t.Fatalf("classDown(%d) = %d, classUp(%d) = %d", size, j, n, i)
		}
		if j := classDown(size + 1); j != i {
			t.Fatalf("classDown(%d) = %d, want %d", size+1, j, i)
		}
		if j := classDown(size - 1); j >= i {
			t.Fatalf("classDown(%d) = %d, want below %d", size-1, j, i)
		}
	}
	if getLine(maxPooled+1) != nil || getLine(minPooled-1) != nil {
		t.Error("a line out of the pooled range got a pooled buffer")
	}
	sh := getLine(1 << 20)
	if cap(sh.b) < 1<<20 || sh.refs.Load() != 1 {
		t.Fatalf("getLine: cap %d refs %d", cap(sh.b), sh.refs.Load())
	}
	sh.Hold()
	sh.Release()
	sh.Release()
	defer func() {
		if recover() == nil {
			t.Error("no panic on a release too many")
		}
	}()
	sh.Release()
}
