// Package mochipatch holds the tests of Ferry's patches to mochi-mqtt
// (third_party/mochi-mqtt-server, see its FERRY.md): each fails against the
// upstream module (drop go.mod's replace to see it), but for the ones that
// hold a behaviour a patch must keep (they say so). A package of its own,
// so that nothing else allocates while its tests count allocations.
package mochipatch
