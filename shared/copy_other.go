//go:build !linux

package shared

import "errors"

// Copies write with openat2 and read with SEEK_DATA: Linux only. The
// supervisor builds elsewhere (it drives remote engines), and refuses
// --copy-in and --copy-out there.

var errCopyLinux = errors.New("--copy-in and --copy-out need Linux (openat2) on the supervisor's side")

type CopySender struct {
	Frames       CopyFrames
	Send         func(t FrameType, payload []byte) error
	Limit        int64
	Skipped      func(p string, mode uint32)
	Allow        func(uid, mode uint32) bool
	Files, Bytes int64
}

func (s *CopySender) SendTree(root uint32, dirfd int, name string) error { return errCopyLinux }

type CopyReceiver struct {
	Root         int
	Bases        []string
	Chown        bool
	UID, GID     int
	Symlink      func(p, t string) bool
	Limit        int64
	Refused      []string
	Files, Bytes int64
}

func (r *CopyReceiver) Manifest() []byte { return nil }

func (r *CopyReceiver) Frame(f CopyFrames, fr Frame) (bool, uint32, error) {
	return false, 0, errCopyLinux
}

func (r *CopyReceiver) Close() {}
