package docker

// The rootful statement (rootfulNoUserns) needs docker's /info: whether
// the daemon remaps user ids is said there and nowhere cheaper. /info is
// the dearest request of a launch for the daemon, and one `docker run`
// never sends: dockerd starts two processes for it (`runc --version`,
// `docker-init --version`), beside the box's create and start.
//
// What the statement reads of it (rootless mode, userns-remap) is fixed
// for the life of the daemon's process: neither changes without a
// restart. So exec's probe remembers /info's verdict per daemon process
// and asks again only for a daemon it has not seen: the record is keyed
// by the listener's pid (SO_PEERCRED), that process's start time and the
// boot, and kept in a folder only this user can write (CheckTrustedDir)
// that boot clears (/run/deathwatch as root, else $XDG_RUNTIME_DIR).
// Only a listener that is dockerd itself is remembered: a socket that
// systemd activates has systemd (pid 1) as its listener, which outlives
// a daemon restart, and a listener in another pid namespace has no pid
// here. Anything unexpected (no record, another daemon, a record that
// does not parse, a folder not to be trusted) asks /info.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"deathwatch/supervisor"
	procfs "deathwatch/supervisor/proc"
)

// infoMemo is the remembered part of /info's verdict.
type infoMemo struct {
	Daemon   string `json:"daemon"` // daemonID of the process that answered
	Version  string `json:"version"`
	Rootless bool   `json:"rootless"`
	Detail   string `json:"detail"`
}

// info is the Info a record stands for.
func (m infoMemo) info(kind string) supervisor.Info {
	return supervisor.Info{Runtime: kind, Present: true, Version: m.Version, Rootless: m.Rootless, Detail: m.Detail}
}

// parseInfoMemo reads a record, and says whether it is daemon's.
func parseInfoMemo(b []byte, daemon string) (infoMemo, bool) {
	var m infoMemo
	if daemon == "" || json.Unmarshal(b, &m) != nil || m.Daemon != daemon {
		return infoMemo{}, false
	}
	if m.Detail != "" && m.Detail != rootfulNoUserns {
		return infoMemo{}, false // only the statement is ever remembered
	}
	return m, true
}

// daemonID names the daemon process pid as its /proc says it (boot id,
// pid, start time), "" when it cannot: no pid, a process that is not
// dockerd, or no /proc (another OS). proc is /proc, or a test's.
func daemonID(proc string, pid int) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(proc, fmt.Sprint(pid), "stat"))
	if err != nil {
		return ""
	}
	st, err := procfs.ParseStat(pid, b)
	if err != nil || st.Comm != "dockerd" {
		return ""
	}
	boot, err := os.ReadFile(filepath.Join(proc, "sys/kernel/random/boot_id"))
	if err != nil || strings.TrimSpace(string(boot)) == "" {
		return ""
	}
	return fmt.Sprintf("%s/%d/%d", strings.TrimSpace(string(boot)), pid, st.Start)
}

// infoMemoDir is where records are kept ("" nowhere): boot clears it.
func infoMemoDir(euid int, env map[string]string) string {
	if euid == 0 {
		return "/run/deathwatch/docker-info"
	}
	if d := env["XDG_RUNTIME_DIR"]; filepath.IsAbs(d) {
		return filepath.Join(d, "deathwatch", "docker-info")
	}
	return ""
}

// infoMemoPath is the record of the daemon behind socket addr.
func infoMemoPath(dir, addr string) string {
	h := sha256.Sum256([]byte(addr))
	return filepath.Join(dir, hex.EncodeToString(h[:8])+".json")
}

// procRoot is /proc (a test's fake one elsewhere).
var procRoot = "/proc"

// memo is where the client's daemon's record is ("" when it is not to
// be remembered) and the daemon's id.
func (e *Engine) memo(c *apiClient) (path, daemon string) {
	dir := e.infoMemoDir
	if dir == "" {
		dir = infoMemoDir(os.Geteuid(), envMap(e.env()))
	}
	_, pid, ok := c.listener()
	if dir == "" || !ok {
		return "", ""
	}
	if daemon = daemonID(procRoot, pid); daemon == "" {
		return "", ""
	}
	return infoMemoPath(dir, c.ep.Addr), daemon
}

// recallInfo reads the record at path if it is daemon's.
func recallInfo(path, daemon string) (infoMemo, bool) {
	if path == "" || supervisor.CheckTrustedDir(filepath.Dir(path)) != nil {
		return infoMemo{}, false
	}
	b, err := supervisor.ReadTrustedFile(path, 4<<10)
	if err != nil {
		return infoMemo{}, false
	}
	return parseInfoMemo(b, daemon)
}

// rememberInfo writes daemon's record at path (temp and rename: a reader
// sees the old record or the new one).
func rememberInfo(path, daemon string, info supervisor.Info) error {
	if path == "" {
		return nil
	}
	if info.Detail != "" && info.Detail != rootfulNoUserns {
		return nil
	}
	b, err := json.Marshal(infoMemo{Daemon: daemon, Version: info.Version, Rootless: info.Rootless, Detail: info.Detail})
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := supervisor.EnsureTrustedDir(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
