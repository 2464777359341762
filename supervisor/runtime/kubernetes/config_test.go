package kubernetes

import (
	"os"
	"path/filepath"
	"testing"
)

func TestInCluster(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte("sa-token\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("CA"), 0o600)
	os.WriteFile(filepath.Join(dir, "namespace"), []byte("agents"), 0o600)
	c, err := inCluster(dir, "fd00::1", "443")
	if err != nil || c.Server != "https://[fd00::1]:443" || c.Token != "sa-token" || c.Namespace != "agents" || c.TokenFile != filepath.Join(dir, "token") {
		t.Fatalf("inCluster = %+v, %v", c, err)
	}
}
