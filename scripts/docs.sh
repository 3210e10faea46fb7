#!/usr/bin/env bash
# Builds the book in docs/ and checks its links, with the tools scripts/docs-tools.sh builds
# (once per machine, cached).
#
#   scripts/docs.sh build   the book into $TARGET/book (open $TARGET/book/index.html)
#   scripts/docs.sh check   the same, then lychee --offline over the built HTML and the
#                           top-level Markdown: every internal link and #anchor must resolve
#
# The book is built from a copy of docs/ under the target directory, so nothing is written
# into the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:?usage: scripts/docs.sh build|check}
target=${CARGO_TARGET_DIR:-$root/target}
mdbook=$("$root/scripts/docs-tools.sh" mdbook)

work="$target/docs-build"
rm -rf "$work"
mkdir -p "$work"
cp -R "$root/docs/." "$work/"
start=$(date +%s)
"$mdbook" build "$work" --dest-dir "$target/book" >&2
echo "docs: book built in $(( $(date +%s) - start ))s: $target/book/index.html" >&2
[ "$mode" = build ] && exit 0
[ "$mode" = check ] || { echo "usage: scripts/docs.sh build|check" >&2; exit 2; }

lychee=$("$root/scripts/docs-tools.sh" lychee)
start=$(date +%s)
# --offline: only files on this machine are checked (no request leaves it); web links are
# excluded. --include-fragments: a link's #anchor must exist in the page it points to.
# print.html repeats every page; 404.html and the theme's own pages are not ours.
cd "$root"
"$lychee" --offline --include-fragments --no-progress --root-dir "$target/book" \
  --exclude-path "$target/book/print.html" --exclude-path "$target/book/404.html" \
  --exclude-path "$target/book/toc.html" \
  "$target/book" README.md CONTRIBUTING.md SECURITY.md CHANGELOG.md examples/README.md >&2
echo "docs: links checked in $(( $(date +%s) - start ))s" >&2
