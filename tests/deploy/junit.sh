# Sourced by the tests of this folder: records named checks and writes them
# as JUnit XML to $XML_OUTPUT_FILE (Bazel then counts each check as a test
# case instead of one per target).
#   check NAME COMMAND...   runs COMMAND; a pass or a failure named NAME
#   finish                  writes the XML; exits 1 if a check failed
_junit_cases=""
_junit_failed=0
_junit_total=0
_xml_escape() {
  sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g'
}
check() {
  local name=$1 out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  _junit_total=$((_junit_total + 1))
  local ename
  ename=$(printf '%s' "$name" | _xml_escape)
  if [[ $rc -eq 0 ]]; then
    echo "ok: $name"
    _junit_cases+="  <testcase classname=\"${TEST_TARGET:-deploy}\" name=\"$ename\"/>"$'\n'
  else
    echo "FAILED: $name"
    printf '%s\n' "$out" | sed 's/^/    /'
    _junit_failed=$((_junit_failed + 1))
    local eout
    eout=$(printf '%s' "$out" | tail -40 | _xml_escape)
    _junit_cases+="  <testcase classname=\"${TEST_TARGET:-deploy}\" name=\"$ename\"><failure message=\"exit $rc\">$eout</failure></testcase>"$'\n'
  fi
}
finish() {
  if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
    {
      echo '<?xml version="1.0" encoding="UTF-8"?>'
      echo "<testsuites><testsuite name=\"${TEST_TARGET:-deploy}\" tests=\"$_junit_total\" failures=\"$_junit_failed\">"
      printf '%s' "$_junit_cases"
      echo "</testsuite></testsuites>"
    } >"$XML_OUTPUT_FILE"
  fi
  echo "$((_junit_total - _junit_failed)) passed, $_junit_failed failed"
  [[ $_junit_failed -eq 0 ]]
}
