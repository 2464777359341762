package shared

import "testing"

func TestCheckPidsLimit(t *testing.T) {
	for n, ok := range map[int64]bool{0: true, 1: false, MinPidsLimit - 1: false, MinPidsLimit: true, 4096: true} {
		if err := CheckPidsLimit(n); (err == nil) != ok {
			t.Errorf("CheckPidsLimit(%d) = %v, want ok=%v", n, err, ok)
		}
	}
}
