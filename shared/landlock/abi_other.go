//go:build !linux

package landlock

import "errors"

// ABI: Landlock is Linux's; elsewhere the boxes run in the engine's VM,
// whose kernel doctor cannot ask from here.
func ABI() (int, error) { return 0, errors.New("not Linux") }
