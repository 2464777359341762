// Command mkimage writes a root file system folder as an image archive that
// `ctr -n k8s.io images import` (and kernel-tests/k8s/cluster.sh import)
// takes:
//
//	mkimage -ref localhost/deathwatch/busybox:1 -rootfs DIR [-entrypoint ARG]... [-cmd ARG]... -o FILE
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"deathwatch/kernel-tests/ktest/ociimage"
)

func main() {
	var cfg ociimage.Config
	ref := flag.String("ref", "", "image reference, e.g. localhost/deathwatch/busybox:1")
	rootfs := flag.String("rootfs", "", "root file system folder")
	out := flag.String("o", "", "archive to write")
	flag.Func("entrypoint", "entrypoint argument (repeat for each)", func(s string) error { cfg.Entrypoint = append(cfg.Entrypoint, s); return nil })
	flag.Func("cmd", "cmd argument (repeat for each)", func(s string) error { cfg.Cmd = append(cfg.Cmd, s); return nil })
	flag.Func("env", "NAME=VALUE (repeat for each)", func(s string) error { cfg.Env = append(cfg.Env, s); return nil })
	flag.Parse()
	if *ref == "" || *rootfs == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "mkimage: -ref, -rootfs and -o are required and nothing else is taken; see -h")
		os.Exit(2)
	}
	if err := write(*out, *ref, *rootfs, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

// write writes the archive to a temporary file beside out and renames it,
// so a failed run leaves no half archive.
func write(out, ref, rootfs string, cfg ociimage.Config) error {
	f, err := os.CreateTemp(filepath.Dir(out), ".mkimage-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := ociimage.Write(f, ref, rootfs, cfg); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}
