package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readTar returns the entries of a tar stream by name, with their contents.
func readTar(t *testing.T, data []byte) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	hdrs, files := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs[h.Name], files[h.Name] = h, b
	}
}

func rootfs(t *testing.T) string {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(os.Mkdir(filepath.Join(dir, "tmp"), 0o755))
	must(os.Chmod(filepath.Join(dir, "tmp"), os.ModeSticky|0o777))
	must(os.WriteFile(filepath.Join(dir, "bin", "busybox"), []byte("#!fake busybox\n"), 0o755))
	must(os.Symlink("/bin/busybox", filepath.Join(dir, "bin", "sh")))
	must(os.WriteFile(filepath.Join(dir, "secret"), []byte("x"), 0o600))
	return dir
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// blob returns the blob a descriptor names, checking its digest and size.
func blob(t *testing.T, files map[string][]byte, d descriptor) []byte {
	t.Helper()
	b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing from the archive", d.Digest)
	}
	if digestOf(b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: digest %s, size %d (descriptor says %d)", d.Digest, digestOf(b), len(b), d.Size)
	}
	return b
}

func TestWriteIsAnOCILayoutNamedByRef(t *testing.T) {
	var out bytes.Buffer
	cfg := Config{Entrypoint: []string{"/bin/sh"}, Cmd: []string{"-c", "true"}, Env: []string{"PATH=/bin"}, User: "65534", WorkingDir: "/tmp"}
	if err := Write(&out, "localhost/deathwatch/test:1", rootfs(t), cfg); err != nil {
		t.Fatal(err)
	}
	_, files := readTar(t, out.Bytes())
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q", files["oci-layout"])
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations[annotationImageName] != "localhost/deathwatch/test:1" {
		t.Fatalf("index.json names no image localhost/deathwatch/test:1: %s", files["index.json"])
	}
	var m manifest
	if err := json.Unmarshal(blob(t, files, idx.Manifests[0]), &m); err != nil {
		t.Fatal(err)
	}
	var ic imageConfig
	if err := json.Unmarshal(blob(t, files, m.Config), &ic); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ic.Config.Entrypoint, cfg.Entrypoint) || !reflect.DeepEqual(ic.Config.Cmd, cfg.Cmd) ||
		!reflect.DeepEqual(ic.Config.Env, cfg.Env) || ic.Config.User != cfg.User || ic.Config.WorkingDir != cfg.WorkingDir || ic.OS != "linux" {
		t.Fatalf("image config %+v does not say %+v", ic, cfg)
	}
	if len(m.Layers) != 1 || len(ic.RootFS.DiffIDs) != 1 || ic.RootFS.DiffIDs[0] != m.Layers[0].Digest {
		t.Fatalf("one uncompressed layer whose diff ID is its digest expected: layers %+v, diff IDs %v", m.Layers, ic.RootFS.DiffIDs)
	}
	hdrs, layer := readTar(t, blob(t, files, m.Layers[0]))
	want := map[string]struct {
		typ  byte
		mode int64
	}{
		"bin/":        {tar.TypeDir, 0o755},
		"bin/busybox": {tar.TypeReg, 0o755},
		"bin/sh":      {tar.TypeSymlink, 0o777},
		"secret":      {tar.TypeReg, 0o600},
		"tmp/":        {tar.TypeDir, 0o1777},
	}
	if len(hdrs) != len(want) {
		t.Fatalf("layer has %d entries, want %d: %v", len(hdrs), len(want), hdrs)
	}
	for name, w := range want {
		h := hdrs[name]
		if h == nil {
			t.Fatalf("layer lacks %s", name)
		}
		if h.Typeflag != w.typ || h.Mode != w.mode || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: type %c mode %o owner %d:%d, want type %c mode %o owner 0:0", name, h.Typeflag, h.Mode, h.Uid, h.Gid, w.typ, w.mode)
		}
	}
	if hdrs["bin/sh"].Linkname != "/bin/busybox" || string(layer["bin/busybox"]) != "#!fake busybox\n" {
		t.Fatalf("link target %q, file %q", hdrs["bin/sh"].Linkname, layer["bin/busybox"])
	}
}

func TestWriteIsReproducible(t *testing.T) {
	dir := rootfs(t)
	var a, b bytes.Buffer
	if err := Write(&a, "x:1", dir, Config{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, "secret"), testTime, testTime); err != nil {
		t.Fatal(err)
	}
	if err := Write(&b, "x:1", dir, Config{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the same folder gave two different archives")
	}
}

func TestWriteRefuses(t *testing.T) {
	dir := rootfs(t)
	if err := Write(io.Discard, "", dir, Config{}); err == nil {
		t.Error("an empty reference was taken")
	}
	if err := Write(io.Discard, "x:1", filepath.Join(dir, "secret"), Config{}); err == nil {
		t.Error("a file as rootfs was taken")
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	err := Write(io.Discard, "x:1", dir, Config{})
	if err == nil || !strings.Contains(err.Error(), "fifo") {
		t.Errorf("a fifo in the rootfs: err = %v, want one naming fifo", err)
	}
}

var testTime = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
