//go:build race

package mochipatch

// raceEnabled: the race detector is on (sync.Pool then drops a quarter of
// what is put back, on purpose).
const raceEnabled = true
