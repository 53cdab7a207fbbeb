package session

import (
	"hash/fnv"
)

// Rendezvous hashing: which of the live instances acts for a key (a dead
// owner's session, an expired session); admission's client hash mixes the
// same way (mix64).

// ChooseInstance is rendezvous hashing: of ids, the one whose hash with
// key is highest (ties: the smallest id). Every instance that knows the
// same ids picks the same one; an instance leaving moves only its keys.
func ChooseInstance(key string, ids []string) string {
	var best string
	var bestH uint64
	for _, id := range ids {
		h := fnv.New64a()
		_, _ = h.Write([]byte(key))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(id))
		s := mix64(h.Sum64())
		if best == "" || s > bestH || s == bestH && id < best {
			best, bestH = id, s
		}
	}
	return best
}

// mix64 is splitmix64's finalizer: FNV of similar strings differs in few
// bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
