#include "bench/bench_report.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace shardd::bench {
namespace {

TEST(BenchReportTest, JsonHasNameFiguresAndRowsInOrder) {
  BenchReport report("demo");
  report.AddRow({{"size", std::string("4k")}, {"gbps", 1.5}});
  report.AddRow({{"size", std::string("8k")}, {"gbps", 2.0}});
  report.SetFigure("ratio", 0.95);
  EXPECT_EQ(report.ToJson(),
            "{\n  \"name\": \"demo\",\n  \"figures\": {\n    \"ratio\": 0.95\n"
            "  },\n  \"rows\": [\n    {\"size\": \"4k\", \"gbps\": 1.5},\n"
            "    {\"size\": \"8k\", \"gbps\": 2}\n  ]\n}\n");
}

TEST(BenchReportTest, EscapesStringsAndWritesNonFiniteAsNull) {
  EXPECT_EQ(JsonString("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonNumber(std::nan("")), "null");
  EXPECT_EQ(JsonNumber(3.0), "3");
}

TEST(BenchReportTest, TableListsEveryColumn) {
  BenchReport report("t");
  report.AddRow({{"a", 1.0}});
  report.AddRow({{"b", std::string("x")}});
  const std::string table = report.Table();
  EXPECT_NE(table.find("a"), std::string::npos);
  EXPECT_NE(table.find("b"), std::string::npos);
  EXPECT_NE(table.find("x"), std::string::npos);
}

TEST(BenchReportTest, WriteJsonReportsAnUnwritablePath) {
  BenchReport report("t");
  EXPECT_FALSE(report.WriteJson("/nonexistent-dir/x.json").ok());
}

TEST(BenchReportTest, PublishPrintsTheTableAndFailsOnAnUnwritablePath) {
  BenchReport report("t");
  report.SetFigure("f", 1);
  std::ostringstream out, err;
  EXPECT_EQ(report.Publish("", out, err), 0);
  EXPECT_EQ(out.str(), report.Table());
  EXPECT_TRUE(err.str().empty());
  std::ostringstream out2, err2;
  EXPECT_EQ(report.Publish("/nonexistent-dir/x.json", out2, err2), 1);
  EXPECT_EQ(out2.str(), report.Table());
  EXPECT_EQ(err2.str().rfind("t: ", 0), 0u) << err2.str();
}

}  // namespace
}  // namespace shardd::bench
