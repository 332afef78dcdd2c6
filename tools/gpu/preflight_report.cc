#include "tools/gpu/preflight_report.h"

#include "absl/strings/str_cat.h"

namespace shardd::tools {
namespace {

std::string OneLine(absl::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  return out;
}

}  // namespace

std::string PreflightReport::Line(absl::string_view name, bool ok,
                                  absl::string_view text) {
  std::string line =
      absl::StrCat("preflight ", OneLine(name), ": ", ok ? "ok" : "FAIL");
  if (!text.empty()) absl::StrAppend(&line, " ", OneLine(text));
  return line;
}

void PreflightReport::Ok(absl::string_view name, absl::string_view detail) {
  ++passes_;
  Print(name, true, detail);
}

void PreflightReport::Fail(absl::string_view name, absl::string_view reason) {
  ++failures_;
  Print(name, false, reason.empty() ? "(no reason given)" : reason);
}

void PreflightReport::NotRun(absl::string_view name,
                             absl::string_view because) {
  Fail(name, absl::StrCat("not run: ", because));
}

void PreflightReport::Print(absl::string_view name, bool ok,
                            absl::string_view text) {
  const std::string line = Line(name, ok, text);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace shardd::tools
