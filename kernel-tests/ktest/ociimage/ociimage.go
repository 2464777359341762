// Package ociimage turns a root file system folder into a single-layer OCI
// image archive (an OCI image layout in a tar stream) that
// `ctr -n k8s.io images import` takes, named by the reference given.
//
// The output is reproducible: entries are sorted, owned by 0:0 and dated at
// the Unix epoch, so the same folder gives the same image digest.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"
)

// Config is the part of an OCI image config a box image needs.
type Config struct {
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
}

// Media types and annotations of the OCI image spec and containerd.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
	// containerd's importer names the image after this annotation.
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type imageConfig struct {
	Created      time.Time `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       struct {
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		Env        []string `json:"Env,omitempty"`
		User       string   `json:"User,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// Write writes the image ref (e.g. "localhost/deathwatch/busybox:1") with
// rootfs as its one layer and cfg as its config to w. rootfs may hold
// directories, regular files and symbolic links; anything else (devices,
// sockets, fifos) is refused, since a box image has no use for them.
func Write(w io.Writer, ref string, rootfs string, cfg Config) error {
	if ref == "" {
		return fmt.Errorf("image reference is empty")
	}
	var layer bytes.Buffer
	if err := writeLayer(&layer, rootfs); err != nil {
		return fmt.Errorf("layer from %s: %w", rootfs, err)
	}
	return WriteLayer(w, ref, layer.Bytes(), cfg)
}

// WriteLayer is Write for a layer that is already an uncompressed tar
// stream (owners and modes as the caller made them).
func WriteLayer(w io.Writer, ref string, layer []byte, cfg Config) error {
	if ref == "" {
		return fmt.Errorf("image reference is empty")
	}
	layerDesc := describe(mediaLayer, layer)

	var ic imageConfig
	ic.Created = time.Unix(0, 0).UTC()
	ic.Architecture = runtime.GOARCH
	ic.OS = "linux"
	ic.Config.Entrypoint = cfg.Entrypoint
	ic.Config.Cmd = cfg.Cmd
	ic.Config.Env = cfg.Env
	ic.Config.User = cfg.User
	ic.Config.WorkingDir = cfg.WorkingDir
	ic.RootFS.Type = "layers"
	ic.RootFS.DiffIDs = []string{layerDesc.Digest} // uncompressed: diff ID = digest
	configJSON, err := json.Marshal(ic)
	if err != nil {
		return err
	}
	configDesc := describe(mediaConfig, configJSON)

	manifestJSON, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: configDesc, Layers: []descriptor{layerDesc}})
	if err != nil {
		return err
	}
	manifestDesc := describe(mediaManifest, manifestJSON)
	manifestDesc.Annotations = map[string]string{annotationImageName: ref, annotationRefName: ref}
	indexJSON, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{manifestDesc}})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexJSON},
		{blobPath(configDesc), configJSON},
		{blobPath(manifestDesc), manifestJSON},
		{blobPath(layerDesc), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func describe(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d descriptor) string { return "blobs/sha256/" + d.Digest[len("sha256:"):] }

// writeLayer writes rootfs as a tar stream: sorted, owned by 0:0, dated at
// the epoch, with modes kept.
func writeLayer(w io.Writer, rootfs string) error {
	info, err := os.Stat(rootfs)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("not a directory")
	}
	var paths []string
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != rootfs {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, err := filepath.Rel(rootfs, p)
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: tarMode(fi.Mode()), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case fi.Mode().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		default:
			return fmt.Errorf("%s is a %s: an image takes only directories, regular files and symbolic links", rel, kind(fi.Mode()))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, hdr.Size)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
	}
	return tw.Close()
}

// tarMode is a file mode as tar stores it: permission bits plus setuid,
// setgid and sticky (c_ISUID, c_ISGID, c_ISVTX).
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file (" + m.Type().String() + ")"
}
