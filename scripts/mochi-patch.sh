#!/usr/bin/env bash
# mochi-patch.sh - regenerate third_party/mochi-mqtt-server/ferry.patch: the diff of every Go
# file of the patched copy against upstream mochi at the version FERRY.md names (taken from the
# Go module cache; `go mod download` fetches it). `scripts/mochi-patch.sh check` exits 1 when
# the patch on disk is not what the copy holds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="$ROOT/third_party/mochi-mqtt-server"
ver=$(sed -n '1s/.*\(v[0-9][0-9.]*\).*/\1/p' "$DIR/FERRY.md")
[[ -n "$ver" ]] || { echo "mochi-patch.sh: no version in the first line of FERRY.md" >&2; exit 2; }
up=$(cd "$ROOT" && GOFLAGS=-mod=mod go mod download -json "github.com/mochi-mqtt/server/v2@$ver" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[[ -d "$up" ]] || { echo "mochi-patch.sh: mochi $ver not in the module cache" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
(
	cd "$DIR"
	find . -name '*.go' | sed 's|^\./||' | LC_ALL=C sort | while read -r f; do
		if [[ -f "$up/$f" ]]; then
			diff -u --label "a/$f" --label "b/$f" "$up/$f" "$f" || true
		else
			diff -u --label "a/$f" --label "b/$f" /dev/null "$f" || true
		fi
	done
) >"$out"
if [[ "${1:-}" == check ]]; then
	cmp -s "$out" "$DIR/ferry.patch" || { echo "mochi-patch.sh: ferry.patch is stale: run scripts/mochi-patch.sh" >&2; exit 1; }
	exit 0
fi
cp "$out" "$DIR/ferry.patch"
echo "wrote $DIR/ferry.patch ($(grep -c '^+++ ' "$DIR/ferry.patch") files)"
