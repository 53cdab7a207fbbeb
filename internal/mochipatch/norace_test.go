//go:build !race

package mochipatch

const raceEnabled = false
