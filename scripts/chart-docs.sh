#!/usr/bin/env bash
# Generates the chart's documentation from the comments in charts/konnector/values.yaml with
# helm-docs (scripts/helm-docs.sh builds it from its Go module): charts/konnector/README.md
# (template charts/konnector/README.md.gotmpl) and docs/src/reference/helm-values.md
# (template tools/helm-docs/helm-values.md.gotmpl). The chart tests check that every value in
# values.yaml is documented (a `# --` comment on it or on an object holding it).
#
# Usage: scripts/chart-docs.sh          write both files
#        scripts/chart-docs.sh --check  write nothing; fail when either file differs from what
#                                       would be generated (the drift check)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
helm_docs=$("$root/scripts/helm-docs.sh")
chart="$root/charts/konnector"
check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# $1: template path, $2: output path (both absolute). Prints the document on stdout.
render() {
  ( cd "$chart" && "$helm_docs" --chart-search-root . --template-files "$1" \
      --sort-values-order file --skip-version-footer \
      --log-level warning --dry-run )
}

status=0
for pair in "$chart/README.md.gotmpl:$chart/README.md" \
            "$root/tools/helm-docs/helm-values.md.gotmpl:$root/docs/src/reference/helm-values.md"; do
  template=${pair%%:*} out=${pair#*:}
  generated=$(render "$template")
  if ! grep -q '^| Key | Type | Default | Description |' <<<"$generated"; then
    echo "chart-docs: helm-docs produced no values table for ${out#"$root"/}" >&2
    exit 1
  fi
  if $check; then
    if [ "$generated" != "$(cat "$out" 2>/dev/null)" ]; then
      echo "chart-docs: ${out#"$root"/} is not what values.yaml generates; run make chart-docs" >&2
      diff -u "$out" <(printf '%s\n' "$generated") >&2 || true
      status=1
    fi
  else
    mkdir -p "$(dirname "$out")"
    printf '%s\n' "$generated" >"$out"
    echo "chart-docs: wrote ${out#"$root"/}" >&2
  fi
done
exit $status
