#!/usr/bin/env bash
# Fails when `make generate` changes anything under version control: the
# generated code, CRDs and deepcopy functions must be committed current.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s generate
changes=$(git status --porcelain -- gen deploy/crds api)
if [[ -n $changes ]]; then
	echo "verify-generate: 'make generate' changed files; commit the result:" >&2
	echo "$changes" >&2
	git --no-pager diff -- gen deploy/crds api | head -100 >&2
	exit 1
fi
echo "verify-generate: generated files are current"
