#include "bench/bench_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardd::bench {
namespace {

std::string CellText(const BenchReport::Cell& cell) {
  if (const std::string* text = std::get_if<std::string>(&cell)) return *text;
  const double value = std::get<double>(cell);
  if (std::isfinite(value) && value == std::floor(value) &&
      std::abs(value) < 1e15) {
    return absl::StrFormat("%.0f", value);
  }
  return absl::StrFormat("%.4g", value);
}

}  // namespace

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;  // UTF-8 passes through.
        }
    }
  }
  out += '"';
  return out;
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  if (value == std::floor(value) && std::abs(value) < 9007199254740992.0) {
    return absl::StrFormat("%.0f", value);
  }
  return absl::StrFormat("%.10g", value);
}

void BenchReport::AddRow(Row row) {
  for (const auto& [column, cell] : row) {
    if (std::find(columns_.begin(), columns_.end(), column) == columns_.end()) {
      columns_.push_back(column);
    }
  }
  rows_.push_back(std::move(row));
}

void BenchReport::SetFigure(const std::string& name, double value) {
  figures_[name] = value;
}

std::string BenchReport::Table() const {
  // Cells by column, "-" where a row lacks the column.
  std::vector<std::vector<std::string>> cells(rows_.size());
  std::vector<size_t> widths;
  for (const std::string& column : columns_) widths.push_back(column.size());
  for (size_t r = 0; r < rows_.size(); ++r) {
    for (size_t c = 0; c < columns_.size(); ++c) {
      std::string text = "-";
      for (const auto& [column, cell] : rows_[r]) {
        if (column == columns_[c]) text = CellText(cell);
      }
      widths[c] = std::max(widths[c], text.size());
      cells[r].push_back(std::move(text));
    }
  }
  std::string out = absl::StrCat("== ", name_, " ==\n");
  auto append_line = [&](const std::vector<std::string>& line) {
    for (size_t c = 0; c < line.size(); ++c) {
      // Right-aligned: the cells are mostly numbers.
      absl::StrAppend(&out, c == 0 ? "" : "  ",
                      std::string(widths[c] - line[c].size(), ' '), line[c]);
    }
    out += '\n';
  };
  append_line(columns_);
  for (const auto& line : cells) append_line(line);
  if (!figures_.empty()) {
    out += "figures:\n";
    for (const auto& [name, value] : figures_) {
      absl::StrAppend(&out, "  ", name, " = ", CellText(value), "\n");
    }
  }
  return out;
}

std::string BenchReport::ToJson() const {
  std::string out =
      absl::StrCat("{\n  \"name\": ", JsonString(name_), ",\n  \"figures\": {");
  bool first = true;
  for (const auto& [name, value] : figures_) {
    absl::StrAppend(&out, first ? "\n    " : ",\n    ", JsonString(name), ": ",
                    JsonNumber(value));
    first = false;
  }
  out += first ? "},\n  \"rows\": [" : "\n  },\n  \"rows\": [";
  for (size_t r = 0; r < rows_.size(); ++r) {
    absl::StrAppend(&out, r == 0 ? "\n    {" : ",\n    {");
    for (size_t c = 0; c < rows_[r].size(); ++c) {
      const auto& [column, cell] = rows_[r][c];
      absl::StrAppend(&out, c == 0 ? "" : ", ", JsonString(column), ": ");
      if (const std::string* text = std::get_if<std::string>(&cell)) {
        out += JsonString(*text);
      } else {
        out += JsonNumber(std::get<double>(cell));
      }
    }
    out += '}';
  }
  out += rows_.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

absl::Status BenchReport::WriteJson(const std::string& path) const {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  const std::string json = ToJson();
  const size_t written = std::fwrite(json.data(), 1, json.size(), file);
  const bool closed = std::fclose(file) == 0;
  if (written != json.size() || !closed) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

int BenchReport::Publish(const std::string& json_path, std::ostream& out,
                         std::ostream& err) const {
  out << Table() << std::flush;
  if (json_path.empty()) return 0;
  if (absl::Status s = WriteJson(json_path); !s.ok()) {
    err << name_ << ": " << s << "\n";
    return 1;
  }
  out << "wrote " << json_path << "\n";
  return 0;
}

}  // namespace shardd::bench
