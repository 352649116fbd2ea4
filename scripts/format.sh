#!/usr/bin/env bash
# clang-format-14 (.clang-format) over every tracked C++ and CUDA source.
#   bash scripts/format.sh           reformat in place
#   bash scripts/format.sh --check   list the files that differ and exit 1 (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format-14 --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'attnsweep: not clang-formatted (bash scripts/format.sh fixes it): %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "attnsweep: clang-format: ${#files[@]} files clean"
else
  clang-format-14 -i "${files[@]}"
fi
