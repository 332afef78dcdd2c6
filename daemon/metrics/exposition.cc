#include "daemon/metrics/exposition.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardd::metrics {
namespace {

absl::StatusOr<double> ParseValue(absl::string_view v) {
  if (v == "+Inf") return std::numeric_limits<double>::infinity();
  if (v == "-Inf") return -std::numeric_limits<double>::infinity();
  if (v == "NaN") return std::numeric_limits<double>::quiet_NaN();
  double d = 0;
  if (!absl::SimpleAtod(v, &d)) {
    return absl::InvalidArgumentError(absl::StrCat("not a number: '", v, "'"));
  }
  return d;
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> ParseExposition(
    absl::string_view text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("exposition line '", line, "': ", why));
    };
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    const std::string name(line.substr(0, i));
    std::vector<std::pair<std::string, std::string>> labels;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == absl::string_view::npos || eq + 1 >= line.size() ||
            line[eq + 1] != '"') {
          return bad("label without =\"value\"");
        }
        std::string label(absl::StripAsciiWhitespace(line.substr(i, eq - i)));
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) ++j;
          value.push_back(line[j]);
        }
        if (j >= line.size()) return bad("unterminated label value");
        labels.emplace_back(std::move(label), std::move(value));
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return bad("unterminated label set");
      ++i;  // '}'
    }
    const std::vector<absl::string_view> rest =
        absl::StrSplit(line.substr(i), ' ', absl::SkipWhitespace());
    if (rest.empty()) return bad("no value");
    absl::StatusOr<double> value = ParseValue(rest[0]);
    if (!value.ok()) return bad(value.status().message());
    std::sort(labels.begin(), labels.end());
    std::string key = name;
    if (!labels.empty()) {
      absl::StrAppend(&key, "{",
                      absl::StrJoin(labels, ",",
                                    [](std::string* out, const auto& l) {
                                      absl::StrAppend(out, l.first, "=\"",
                                                      l.second, "\"");
                                    }),
                      "}");
    }
    if (!samples.emplace(key, *value).second) return bad("duplicate series");
  }
  return samples;
}

}  // namespace shardd::metrics
