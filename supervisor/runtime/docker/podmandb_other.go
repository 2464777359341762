//go:build !linux

package docker

import "errors"

// podmanStateDB: only a Linux podman is local (elsewhere it runs in a
// VM, behind its service), so the listing proves removal.
func podmanStateDB(env map[string]string, euid int) string { return "" }

type dbFile struct{ path string }

func podmanDBHas(path, id, name string) (bool, dbFile, error) {
	return false, dbFile{}, errors.New("no local podman state database on this system")
}
