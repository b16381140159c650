#!/usr/bin/env bash
# Fails when `make generate` changes anything under the generated paths
# (default: gen deploy/crds api), printing what changed: generated code, CRDs
# and deepcopy functions must be committed current.
#
# The check compares the tree of those paths (tracked and untracked files,
# .gitignore respected) before and after `make generate`, using a scratch git
# index so the real index is not touched. In CI's clean clone that is exactly
# "git status shows no changes"; on a developer's machine, uncommitted edits
# that are already regenerated do not fail it.
set -euo pipefail
cd "$(dirname "$0")/.."

paths=("$@")
((${#paths[@]})) || paths=(gen deploy/crds api)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# snapshot prints the git tree id of HEAD with the working-tree state of
# $paths laid over it.
snapshot() {
	local existing=() p
	for p in "${paths[@]}"; do
		[[ -e $p ]] && existing+=("$p")
	done
	export GIT_INDEX_FILE=$scratch/index
	git read-tree HEAD
	((${#existing[@]})) && git add -A -- "${existing[@]}"
	# Paths removed from the working tree altogether.
	for p in "${paths[@]}"; do
		[[ -e $p ]] || git rm -r -q --cached --ignore-unmatch -- "$p"
	done
	git write-tree
	unset GIT_INDEX_FILE
}

before=$(snapshot)
make -s --no-print-directory generate
after=$(snapshot)

if [[ $before != "$after" ]]; then
	echo "verify-generate: 'make generate' changed generated files; run it and commit the result:" >&2
	git --no-pager diff --stat "$before" "$after" -- "${paths[@]}" >&2
	git --no-pager diff "$before" "$after" -- "${paths[@]}" | head -n 200 >&2
	exit 1
fi
if [[ ${CI:-} == true ]]; then
	# A clean clone must also match what is committed.
	changes=$(git status --porcelain --untracked-files=all -- "${paths[@]}")
	if [[ -n $changes ]]; then
		echo "verify-generate: uncommitted changes under ${paths[*]}:" >&2
		echo "$changes" >&2
		git --no-pager diff -- "${paths[@]}" | head -n 200 >&2
		exit 1
	fi
fi
echo "verify-generate: generated files are current"
