"""The documentation's checks (tools/docs/docs_reference.py) on this
repository, and tests of the checker on small fixtures.

Environment (set by docs_test.sh): DOCS_ROOT, the repository's source tree;
DOCS_SHARDD and DOCS_COORDINATOR, the binaries whose flags are documented.
"""

import os
import stat
import sys
import textwrap

ROOT = os.environ.get("DOCS_ROOT") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
sys.dont_write_bytecode = True  # Nothing lands in the source tree.
sys.path.insert(0, os.path.join(ROOT, "tools", "docs"))

import docs_reference  # noqa: E402
import proto_doc  # noqa: E402

SHARDD = os.environ.get("DOCS_SHARDD",
                        os.path.join(ROOT, "bazel-bin/daemon/node/shardd"))
COORDINATOR = os.environ.get(
    "DOCS_COORDINATOR",
    os.path.join(ROOT, "bazel-bin/daemon/coordinator/coordinator"))


def _report(problems):
    return "\n".join(problems)


# ---------------------------------------------------------------------------
# This repository


def test_every_flag_of_both_binaries_is_in_operations_md():
    problems = docs_reference.check_flags(ROOT, SHARDD, COORDINATOR)
    assert problems == [], _report(problems)


def test_generated_flag_and_api_references_are_fresh():
    problems = docs_reference.check_fresh(ROOT, SHARDD, COORDINATOR)
    assert problems == [], _report(problems)


def test_every_exported_metric_is_in_metrics_md_and_only_those():
    problems = docs_reference.check_metrics(ROOT)
    assert problems == [], _report(problems)


def test_every_alert_has_a_row_in_operations_md_linking_its_runbook():
    problems = docs_reference.check_alerts(ROOT)
    assert problems == [], _report(problems)


def test_every_relative_link_points_to_a_file_and_heading_that_exist():
    problems = docs_reference.check_links(ROOT)
    assert problems == [], _report(problems)


def test_both_binaries_have_flags_from_their_main_and_tls_files():
    # Guards the flag check against an empty parse (which would pass).
    for binary, main in ((SHARDD, "daemon/node/shardd_main.cc"),
                         (COORDINATOR,
                          "daemon/coordinator/coordinator_main.cc")):
        flags = docs_reference.parse_helpfull(
            docs_reference.helpfull(binary))
        sources = {f.source for f in flags}
        assert main in sources, sources
        assert "daemon/rpc/tls_flags.cc" in sources, sources
        assert len(flags) >= 15


# ---------------------------------------------------------------------------
# The checker, on fixtures

HELP = textwrap.dedent("""\
    tool: a tool

      Flags from ./absl/flags/parse.cc:
        --flagfile (comma-separated list of files to load flags from); default: ;

      Flags from daemon/tool_main.cc:
        --alpha (the first flag (with parentheses) that wraps over two
          lines); default: "a";
        --beta_ms (the second); default: 30;

    Try --helpfull to get a list of all flags.
    """)


def _fake_binary(tmp_path, name, text):
    path = tmp_path / name
    path.write_text("#!/bin/sh\ncat <<'HELP'\n" + text + "HELP\nexit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_helpfull_parse_joins_wrapped_lines_and_drops_absls_flags():
    flags = docs_reference.parse_helpfull(HELP)
    assert [(f.name, f.default, f.source) for f in flags] == [
        ("alpha", '"a"', "daemon/tool_main.cc"),
        ("beta_ms", "30", "daemon/tool_main.cc"),
    ]
    assert flags[0].meaning == ("the first flag (with parentheses) that "
                                "wraps over two lines")


def test_a_flag_missing_from_operations_md_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "operations.md").write_text(
        "Set `--alpha`, and `--beta` (not beta_ms).\n")
    binary = _fake_binary(tmp_path, "tool", HELP)
    problems = docs_reference.check_flags(str(tmp_path), binary, binary)
    assert any("--beta_ms" in p for p in problems), problems
    assert not any("--alpha " in p for p in problems), problems


def test_a_stale_generated_section_is_replaced_and_a_missing_one_refused():
    begin, end = docs_reference._markers("flags")
    page = f"intro\n{begin}\nold\n{end}\noutro\n"
    new = docs_reference.replace_section(page, "flags", "new\n", "p.md")
    assert new == f"intro\n{begin}\n\nnew\n\n{end}\noutro\n"
    try:
        docs_reference.replace_section("no markers", "flags", "x", "p.md")
    except ValueError as e:
        assert "p.md" in str(e)
    else:
        raise AssertionError("a page without markers was accepted")


def test_broken_links_are_reported_and_good_ones_pass(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "README.md").write_text(
        "# deploy/\n\n## Runbooks\n\n### SharddJobFailed\n")
    (tmp_path / "docs" / "a.md").write_text(textwrap.dedent("""\
        # Page A

        ## Same
        ## Same
        ## Status codes, and `how` a client reacts (v1.2)

        [ok](b.md) [ok](#same-1) [ok](#status-codes-and-how-a-client-reacts-v12)
        [ok](../deploy/README.md#sharddjobfailed) [ok](https://x.invalid/y)
        [ok](../deploy/) [missing file](c.md) [missing anchor](b.md#nowhere)
        [missing here](#same-2) [outside](../../elsewhere.md)
        `[in code](nowhere.md)`

            [indented code](nowhere.md)

        ```
        [fenced](nowhere.md)
        ```
        [ref]: gone.md
        """))
    (tmp_path / "docs" / "b.md").write_text("# B\n")
    (tmp_path / "README.md").write_text("[docs](docs/a.md#page-a)\n")
    problems = docs_reference.check_links(str(tmp_path))
    text = _report(problems)
    assert len(problems) == 5, text
    assert "'c.md': docs/c.md does not exist" in text
    assert "'b.md#nowhere'" in text
    assert "'#same-2'" in text
    assert "'../../elsewhere.md' leaves the repository" in text
    assert "'gone.md'" in text
    assert "nowhere.md" not in text


def test_a_metric_missing_from_the_page_or_not_exported_is_reported(
        tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "deploy").mkdir()
    (tmp_path / "docs" / "metrics.md").write_text(textwrap.dedent("""\
        | name | type | labels | meaning |
        |---|---|---|---|
        | a_total | counter | | a |
        | gone_bytes | gauge | | documented, not exported |
        | DCGM_FI_DEV_GPU_UTIL | the GPU exporter's, not ours |
        ## both
        process_open_fds (gauge)
        ## Implementation notes
        cause process_exited is a label value, not a metric
        """))
    (tmp_path / "deploy" / "exported_metrics.txt").write_text(
        "a_total\nb_seconds\nprocess_open_fds\nexposer_scrapes_total\n")
    problems = docs_reference.check_metrics(str(tmp_path))
    text = _report(problems)
    assert len(problems) == 2, text
    assert "b_seconds" in text and "is not documented" in text
    assert "gone_bytes is documented but not exported" in text


def test_an_alert_without_a_runbook_row_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "deploy" / "prometheus").mkdir(parents=True)
    (tmp_path / "deploy" / "prometheus" / "alerts.yml").write_text(
        "groups:\n  - rules:\n      - alert: SharddA\n        expr: x\n"
        "      - alert: SharddB\n        expr: y\n")
    (tmp_path / "docs" / "operations.md").write_text(
        "| SharddA | fires | [SharddA](../deploy/README.md#sbbdda) |\n"
        "| SharddA | fires | [SharddA](../deploy/README.md#sharddb) |\n")
    problems = docs_reference.check_alerts(str(tmp_path))
    text = _report(problems)
    assert len(problems) == 2, text
    assert "SharddA" in text and "deploy/README.md#shardda" in text
    assert "SharddB" in text


PROTO = textwrap.dedent("""\
    // Header of the file.

    syntax = "proto3";
    package shardd.v1;

    // The service.
    service Thing {
      // Does it.
      //
      // Status codes:
      //   OK
      //   ABORTED   retry
      rpc Do(DoRequest)
          returns (stream DoResponse);
    }

    // ---------------------------------------------------------------------
    // Requests
    // ---------------------------------------------------------------------

    // A request with a *starred* name.
    message DoRequest {
      // Which one.
      int64 id = 1;
      repeated Inner items = 2;  // The items.
      oneof kind {
        string name = 3;
      }
      map<string, Inner> by_name = 4 [deprecated = true];
      message Inner {
        Mode mode = 1;
      }
      enum Mode {
        MODE_UNSPECIFIED = 0;  // Default.
      }
    }

    message DoResponse {}
    """)


def test_proto_comments_become_the_api_reference():
    f = proto_doc.parse_file("x/thing.proto", PROTO)
    assert f.header == "Header of the file."
    rpc = f.services[0].rpcs[0]
    assert (rpc.name, rpc.request, rpc.response, rpc.response_stream) == (
        "Do", "DoRequest", "DoResponse", True)
    names = [t.name for t in f.order]
    assert names == ["DoRequest", "DoRequest.Inner", "DoRequest.Mode",
                     "DoResponse"]
    fields = {fl.name: fl for fl in f.messages[0].fields}
    assert fields["id"].doc == "Which one."
    assert fields["items"].doc == "The items."
    assert fields["name"].oneof == "kind"
    assert fields["by_name"].type == "map<string, Inner>"
    page = proto_doc.render_api([f])
    assert "## Thing service" in page
    assert ("`rpc Do` ([`DoRequest`](#dorequest)) returns (stream "
            "[`DoResponse`](#doresponse))") in page
    assert "```\n  OK\n  ABORTED   retry\n```" in page
    assert "A request with a \\*starred\\* name." in page
    assert "**Requests**" in page
    assert ("- `mode` ([`Mode`](#dorequestmode), 1)") in page
    # Every link of the page lands on one of its headings.
    anchors = docs_reference.anchors(page)
    for target in docs_reference.links(page):
        assert target.lstrip("#") in anchors, target
