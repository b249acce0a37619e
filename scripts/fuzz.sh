#!/usr/bin/env bash
# fuzz.sh [TIME]: runs every fuzz target of the module (func FuzzX in a
# _test.go file) for TIME each (default 30s), one after another. make test
# runs their seed corpora only; this searches for new inputs. A failing
# input is written under the package's testdata/fuzz/ for go test to run.
set -euo pipefail
TIME=${1:-30s}
cd "$(dirname "$0")/.."
grep -rl --include='*_test.go' '^func Fuzz' --exclude-dir=third_party . | sort | while read -r file; do
  pkg=./$(dirname "${file#./}")
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
    echo "fuzz: $pkg $target for $TIME"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$TIME" "$pkg"
  done
done
