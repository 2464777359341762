//go:build !linux

package hostcheck

// cgroupMode: cgroups are Linux's; elsewhere the boxes' limits are the
// engine VM's business.
func cgroupMode() string { return "none (not Linux)" }
