#!/usr/bin/env bash
# The alert rules and the dashboard's PromQL, checked by promtool offline:
#   * promtool check rules accepts deploy/prometheus/alerts.yml;
#   * promtool test rules passes deploy/prometheus/alerts_test.yml (each
#     alert once firing and once quiet);
#   * every dashboard query parses (as a recording rule: promtool check
#     rules), Grafana's variables replaced;
#   * a broken rule is refused (the checks can fail).
# Fails, never skips, when promtool or node is missing.
set -uo pipefail
alerts="$1"; alerts_test="$2"; dashboard="$3"; validate="$4"
source "$(dirname "$0")/junit.sh"
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/rules_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

check "promtool is installed (scripts/install-deps)" command -v promtool
check "node is installed (scripts/install-deps)" command -v node
check "promtool check rules alerts.yml" promtool check rules "$alerts"
check "promtool test rules alerts_test.yml" promtool test rules "$alerts_test"
check "alerts_test.yml has a firing and a quiet case per alert" bash -c '
  for a in $(grep -oE "^ *- alert: [A-Za-z]+" "$1" | awk "{print \$3}"); do
    grep -A3 "alertname: $a\$" "$2" | grep -q "exp_alerts: \[\]" || { echo "$a: no quiet case"; exit 1; }
    grep -A3 "alertname: $a\$" "$2" | grep -q "exp_labels:" || { echo "$a: no firing case"; exit 1; }
  done' _ "$alerts" "$alerts_test"
# Node resolves validate.mjs's modules next to its real path (the source
# tree), where scripts/install-deps put node_modules.
check "dashboard queries as recording rules" \
  bash -c 'node "$(readlink -f "$1")" dashboard-rules "$2" >"$3"' _ "$validate" "$dashboard" "$tmp/dashboard-rules.yml"
check "promtool check rules on every dashboard query" promtool check rules "$tmp/dashboard-rules.yml"
cat >"$tmp/broken.yml" <<'YAML'
groups:
  - name: broken
    rules:
      - alert: Broken
        expr: sum(rate(shardd_steps_committed_total[5m])
YAML
check "promtool refuses a rule with a PromQL syntax error" bash -c '
  out=$(promtool check rules "$1" 2>&1)
  [[ $? -eq 1 ]] && grep -q "unclosed left parenthesis" <<<"$out"' _ "$tmp/broken.yml"
finish
