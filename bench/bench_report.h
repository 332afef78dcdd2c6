#ifndef SHARDD_BENCH_BENCH_REPORT_H_
#define SHARDD_BENCH_BENCH_REPORT_H_

#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardd::bench {

// The result of one benchmark run: a table of rows and the headline figures.
//
// Responsible for: keeping the rows (ordered columns whose cells are strings
// or numbers) and the named figures, printing them as an aligned table, and
// writing them as the JSON object that scripts/bench promises:
//   {"name": ..., "figures": {name: number, ...}, "rows": [{col: cell, ...}]}
// Non-finite numbers become JSON null. Not thread-safe; owns copies of
// everything it is given.
class BenchReport {
 public:
  using Cell = std::variant<std::string, double>;
  using Row = std::vector<std::pair<std::string, Cell>>;

  explicit BenchReport(std::string name) : name_(std::move(name)) {}

  // Columns keep the order in which they first appear across rows; a row may
  // leave a column out (printed as "-", omitted from its JSON object).
  void AddRow(Row row);
  // Sets (or replaces) a headline figure. Figures are written sorted by name.
  void SetFigure(const std::string& name, double value);

  const std::string& name() const { return name_; }
  const std::map<std::string, double>& figures() const { return figures_; }
  const std::vector<Row>& rows() const { return rows_; }

  // The rows as an aligned text table followed by the figures.
  std::string Table() const;
  std::string ToJson() const;
  // Writes ToJson() to `path` (replacing it); INTERNAL / NOT_FOUND-style
  // errors name the path.
  absl::Status WriteJson(const std::string& path) const;
  // How every benchmark ends: Table() on `out`, then, when `json_path` is
  // not empty, the JSON written there ("wrote PATH" on `out`, or
  // "NAME: error" on `err`). Returns the process exit code: 0, or 1 when
  // the JSON could not be written.
  int Publish(const std::string& json_path, std::ostream& out,
              std::ostream& err) const;

 private:
  std::string name_;
  std::vector<std::string> columns_;
  std::vector<Row> rows_;
  std::map<std::string, double> figures_;
};

// JSON string literal for `text` (quotes included, control characters,
// quotes and backslashes escaped).
std::string JsonString(absl::string_view text);
// JSON number for `value`: integers exactly, others with 10 significant
// digits; NaN and infinities as null.
std::string JsonNumber(double value);

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_BENCH_REPORT_H_
