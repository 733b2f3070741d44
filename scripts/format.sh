#!/usr/bin/env bash
# Formats every C++/CUDA source in place with the repository's .clang-format (clang-format 14, as
# Debian 12 ships it). `--check` changes nothing and exits 1 listing the files that would change.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$fmt" ] || { echo "format: clang-format is needed (Debian: apt-get install clang-format-14)" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = --check ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1; then echo "$f"; bad=1; fi
  done
  exit $bad
fi
"$fmt" -i "${files[@]}"
