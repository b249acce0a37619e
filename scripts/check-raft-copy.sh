#!/usr/bin/env bash
# Checks that third_party/hashicorp-raft is hashicorp/raft v1.7.3 as
# released plus exactly the recorded patch: the same files but upstream's
# CI, release files and prose; Cairn's own files added; every shared file
# identical but those CAIRN.patch changes, and those exactly as it says.
# With --record, writes CAIRN.patch from the copy instead (after a change to
# the patch, which CAIRN.md must then describe).
set -euo pipefail
cd "$(dirname "$0")/.."

version=v1.7.3
copy=third_party/hashicorp-raft
patched=(config.go net_transport.go raft.go testing.go)
# Upstream files the copy leaves out, and files only the copy has.
left_out=".github .gitignore .gitmodules .golangci-lint.yml .travis.yml CHANGELOG.md Makefile README.md docs membership.md tag.sh"
added="CAIRN.md CAIRN.patch check_rpc_cairn_test.go notify_commit_cairn_test.go staging_cairn_test.go"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && go mod init raftcopycheck >/dev/null 2>&1 && go mod download "github.com/hashicorp/raft@$version")
upstream="$(go env GOMODCACHE)/github.com/hashicorp/raft@$version"

diffs() {
  for f in "${patched[@]}"; do
    diff -u --label "a/$f" --label "b/$f" "$upstream/$f" "$copy/$f" || true
  done
}

if [ "${1:-}" = "--record" ]; then
  diffs >"$copy/CAIRN.patch"
  echo "check-raft-copy: recorded $copy/CAIRN.patch"
  exit 0
fi

fail=0
only_upstream=$(cd "$upstream" && ls -A | sort)
only_copy=$(cd "$copy" && ls -A | sort)
missing=$(comm -23 <(echo "$only_upstream") <(echo "$only_copy") | tr '\n' ' ')
extra=$(comm -13 <(echo "$only_upstream") <(echo "$only_copy") | tr '\n' ' ')
if [ "$missing" != "$left_out " ]; then
  echo "check-raft-copy: upstream files missing from the copy: '$missing'; expected only '$left_out '" >&2
  fail=1
fi
if [ "$extra" != "$added " ]; then
  echo "check-raft-copy: files only in the copy: '$extra'; expected only '$added '" >&2
  fail=1
fi
for f in $(comm -12 <(echo "$only_upstream") <(echo "$only_copy")); do
  case " ${patched[*]} " in *" $f "*) continue ;; esac
  if ! diff -rq "$upstream/$f" "$copy/$f" >/dev/null; then
    echo "check-raft-copy: $copy/$f differs from hashicorp/raft $version, and CAIRN.patch does not change it" >&2
    fail=1
  fi
done
if ! diff -u "$copy/CAIRN.patch" <(diffs) >"$tmp/unrecorded"; then
  echo "check-raft-copy: the copy differs from hashicorp/raft $version by more or less than CAIRN.patch:" >&2
  cat "$tmp/unrecorded" >&2
  fail=1
fi
if [ "$fail" != 0 ]; then
  echo "check-raft-copy: describe a change to the patch in $copy/CAIRN.md, then run $0 --record" >&2
  exit 1
fi
echo "check-raft-copy: $copy is hashicorp/raft $version plus CAIRN.patch"
