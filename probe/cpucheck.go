package probe

import (
	"fmt"
	"runtime"
	"time"
)

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// cpuCheck is the self-check line about the probe's own CPU: cores used,
// CPU per message sent, its share of the machine's busy CPU, and a verdict
// naming the limit. sent is the number of messages the generator sent.
func (r *runner) cpuCheck(sent int64) (string, bool) {
	user, sys, ok := cpuTime()
	if !ok {
		return "", false
	}
	wall := time.Duration(r.endNs - r.startNs)
	cpu := user - r.cpuUser + sys - r.cpuSys
	ncpu := runtime.NumCPU()
	cores := cpu.Seconds() / wall.Seconds()
	line := fmt.Sprintf("probe CPU: user %.2fs + sys %.2fs over %.2fs = %.2f of %d cores",
		(user - r.cpuUser).Seconds(), (sys - r.cpuSys).Seconds(), wall.Seconds(), cores, ncpu)
	if sent > 0 {
		line += fmt.Sprintf(", %.2f µs per message", float64(cpu.Microseconds())/float64(sent))
	}
	machine := -1.0 // busy cores of the whole machine, -1 unknown
	share := 0.0
	if s1, ok := readSysCPU(); ok && s1.total > r.sysBusy0.total {
		busy := float64(s1.busy-r.sysBusy0.busy) / userHZ
		machine = busy / wall.Seconds()
		if busy > 0 {
			share = min(1, cpu.Seconds()/busy)
		}
		line += fmt.Sprintf("; machine busy %.2f of %d cores, the probe's share %.0f%%", machine, ncpu, 100*share)
	}
	return line + ": " + cpuVerdict(cores, machine, share, ncpu), true
}

// cpuVerdict names the limit of a run: the probe (it used most of a machine
// or most of the busy CPU of a saturated one), possibly the probe, the
// system under test, or nothing. machine < 0 means the machine's CPU is
// unknown.
func cpuVerdict(probeCores, machine, share float64, ncpu int) string {
	saturated := machine >= 0.9*float64(ncpu)
	switch {
	case probeCores > 0.7*float64(ncpu) || (saturated && share > 0.5):
		return "PROBE IS THE LIMIT (it measures itself: fewer --clients, a larger --inflight or another machine)"
	case saturated && share > 1.0/3:
		return "CPU SATURATED and the probe holds a large share: the probe may be part of the limit"
	case saturated:
		return "CPU saturated by the system under test (bridge, Kafka) and other processes, not by the probe"
	default:
		return "ok, the probe is not the limit"
	}
}
