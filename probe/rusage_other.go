//go:build !unix

package probe

import "time"

func cpuTime() (user, sys time.Duration, ok bool) { return 0, 0, false }
