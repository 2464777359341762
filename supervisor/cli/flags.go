package cli

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"deathwatch/shared"
	"deathwatch/supervisor"
	"deathwatch/supervisor/controller"
	"deathwatch/supervisor/exitcode"
)

// parseController is the controller link of --controller-fd,
// --controller-pid and --detach: the parent process when none is given.
func parseController(fd int, pid string, detach bool) (controller.Spec, error) {
	n := 0
	for _, set := range []bool{fd >= 0, pid != "", detach} {
		if set {
			n++
		}
	}
	switch {
	case n > 1:
		return controller.Spec{}, exitcode.Usage("--controller-fd, --controller-pid and --detach each name the controller link; pass one")
	case fd >= 0 && fd <= 2:
		return controller.Spec{}, exitcode.Usage("--controller-fd %d: that is stdin, stdout or stderr; pass a descriptor of its own (3 or more)", fd)
	case fd >= 0:
		return controller.Spec{FD: fd, HasFD: true}, nil
	case detach:
		return controller.Spec{Detached: true}, nil
	case pid != "":
		p, st, _ := strings.Cut(pid, ":")
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return controller.Spec{}, exitcode.Usage("--controller-pid %q: want PID or PID:START (positive numbers)", pid)
		}
		s := controller.Spec{PID: n}
		if st != "" {
			if s.StartTime, err = strconv.ParseUint(st, 10, 64); err != nil || s.StartTime == 0 {
				return controller.Spec{}, exitcode.Usage("--controller-pid %q: START is the process's start time in clock ticks (/proc/PID/stat field 22)", pid)
			}
		}
		return s, nil
	}
	return controller.Spec{Parent: true}, nil
}

func parseLabels(in []string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return nil, exitcode.Usage("--label %q: want KEY=VALUE", kv)
		case strings.HasPrefix(k, shared.LabelPrefix):
			return nil, exitcode.Usage("--label %q: %s* labels are reserved for deathwatch", kv, shared.LabelPrefix)
		case strings.ContainsAny(kv, "\n\x00"):
			return nil, exitcode.Usage("--label %q: no newline or NUL", k)
		}
		m[k] = v
	}
	return m, nil
}

var envNameOK = func(n string) bool {
	if n == "" {
		return false
	}
	for i, c := range n {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// resolveEnv builds the agent's NAME=value list. Error messages name
// variables, never values.
func resolveEnv(names, files []string, getenv func(string) (string, bool)) ([]string, error) {
	var out []string
	seen := map[string]int{}
	add := func(name, val string) {
		if i, ok := seen[name]; ok {
			out[i] = name + "=" + val
			return
		}
		seen[name] = len(out)
		out = append(out, name+"="+val)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, exitcode.Usage("--env-file: %w", err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), shared.MaxStringLen+1024)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, val, ok := strings.Cut(line, "=")
			name = strings.TrimPrefix(strings.TrimSpace(name), "export ")
			if !ok || !envNameOK(name) {
				fh.Close()
				return nil, exitcode.Usage("--env-file %s line %d: want NAME=VALUE", f, n)
			}
			add(name, val)
		}
		err = sc.Err()
		fh.Close()
		if err != nil {
			return nil, exitcode.Usage("--env-file %s: %w", f, err)
		}
	}
	for _, name := range names {
		if strings.Contains(name, "=") {
			n, _, _ := strings.Cut(name, "=")
			return nil, exitcode.Usage("--env %s=…: pass only the NAME; its value comes from the supervisor's environment (a value in argv is visible to every process on the host)", n)
		}
		if !envNameOK(name) {
			return nil, exitcode.Usage("--env %q: not a variable name", name)
		}
		v, ok := getenv(name)
		if !ok {
			return nil, exitcode.Usage("--env %s: %s is not set in the supervisor's environment", name, name)
		}
		add(name, v)
	}
	return out, nil
}

func parseMounts(in []string) ([]supervisor.Mount, error) {
	var ms []supervisor.Mount
	for _, s := range in {
		parts := strings.Split(s, ":")
		m := supervisor.Mount{}
		switch {
		case len(parts) == 2:
		case len(parts) == 3 && (parts[2] == "ro" || parts[2] == "rw"):
			m.ReadOnly = parts[2] == "ro"
		default:
			return nil, exitcode.Usage("--mount %q: want SRC:DST or SRC:DST:ro (no ':' inside paths)", s)
		}
		m.Source, m.Target = parts[0], parts[1]
		for _, p := range []string{m.Source, m.Target} {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, ",\n\x00") {
				return nil, exitcode.Usage("--mount %q: %q is not a clean absolute path", s, p)
			}
		}
		if _, err := os.Stat(m.Source); err != nil {
			return nil, exitcode.Usage("--mount %q: %w", s, err)
		}
		if m.Target == "/" || m.Target == supervisor.WatcherMountPoint || strings.HasPrefix(m.Target, "/dw/") || m.Target == "/dw" {
			return nil, exitcode.Usage("--mount %q: %s is reserved", s, m.Target)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// parseSize reads a memory limit: parseBytes, at least 6m.
func parseSize(s string) (int64, error) {
	n, err := parseBytes(s)
	if err == nil && n < 6<<20 {
		return 0, errors.New("at least 6m (engines refuse less)")
	}
	return n, err
}

// parseBytes reads 1048576, 512k, 512m, 2g (binary units, like docker).
func parseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "b")
	t = strings.TrimSuffix(t, "i")
	mult := int64(1)
	if t != "" {
		switch t[len(t)-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a positive size like 512m or 2g")
	}
	if n > (1<<62)/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

func parseUser(s string) (uint32, uint32, error) {
	u, gs, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, errors.New("want UID:GID (numbers)")
	}
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(gs, 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, errors.New("want UID:GID (numbers)")
	}
	return uint32(uid), uint32(gid), nil
}
