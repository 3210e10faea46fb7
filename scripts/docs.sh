#!/usr/bin/env bash
# Builds the book in docs/ and checks its links, with the tools scripts/docs-tools.sh builds
# (once per machine, cached).
#
#   scripts/docs.sh build   the book into $TARGET/book (open $TARGET/book/index.html)
#   scripts/docs.sh check   the same, then hyperlink over the built HTML (every internal link
#                           and #anchor must resolve) and the top-level Markdown's relative
#                           links (each must name a file that exists)
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

hyperlink=$("$root/scripts/docs-tools.sh" hyperlink)
start=$(date +%s)
# Every page's links and #anchors, print.html and the theme's pages included; hyperlink reads
# files only (it has no HTTP client), and web links are not its business.
"$hyperlink" "$target/book" --check-anchors >&2 || {
  echo "docs: broken links or anchors in the book (above; the page is docs/src/<same path>.md)" >&2
  exit 1
}

# The top-level Markdown files are not part of the book: each relative link (inline or a
# reference definition) must name a file or folder that exists.
cd "$root"
broken=0
for file in README.md CONTRIBUTING.md SECURITY.md CHANGELOG.md examples/README.md; do
  dir=$(dirname "$file")
  while IFS= read -r link; do
    path=${link%%#*}
    [ -z "$path" ] && continue
    if [ ! -e "$dir/$path" ]; then
      echo "docs: $file links to $link, which does not exist" >&2
      broken=1
    fi
  done < <(grep -oE '\]\([^)[:space:]]+\)|^\[[^]]+\]:[[:space:]]+[^[:space:]]+' "$file" |
    sed -E 's/^\]\(//; s/\)$//; s/^\[[^]]+\]:[[:space:]]+//' | grep -vE '^([a-z][a-z0-9+.-]*:|#)' || true)
done
[ "$broken" = 0 ] || exit 1
echo "docs: links checked in $(( $(date +%s) - start ))s" >&2
