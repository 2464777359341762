package ktest

import (
	"slices"
	"testing"
)

func TestMachineRigs(t *testing.T) {
	for _, c := range []struct {
		env     string
		want    []string
		wantErr bool
	}{
		{env: "", want: RigNames},
		{env: "native", want: []string{"native"}},
		{env: "native,native-unprivileged", want: []string{"native", "native-unprivileged"}},
		{env: "native,dockr", wantErr: true},
		{env: "native,", wantErr: true},
	} {
		got, err := MachineRigs(c.env)
		if (err != nil) != c.wantErr || !slices.Equal(got, c.want) {
			t.Errorf("MachineRigs(%q) = %v, %v; want %v (error: %v)", c.env, got, err, c.want, c.wantErr)
		}
	}
}
