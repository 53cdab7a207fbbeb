//go:build !linux

package probe

// sysCPU is the machine's CPU time; not available on this system.
type sysCPU struct {
	busy, total int64
}

func readSysCPU() (sysCPU, bool) { return sysCPU{}, false }
