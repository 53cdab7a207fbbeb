package probe

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// sysCPU is the machine's CPU time so far from /proc/stat, in clock ticks:
// busy (everything but idle and iowait) and total.
type sysCPU struct {
	busy, total int64
}

// readSysCPU reads the aggregate "cpu" line of /proc/stat.
func readSysCPU() (sysCPU, bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return sysCPU{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return sysCPU{}, false
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return sysCPU{}, false
	}
	var c sysCPU
	for i, v := range fields[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return sysCPU{}, false
		}
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c, true
}
