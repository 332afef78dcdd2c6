#include "daemon/coordinator/partition_verdict.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardd::coordinator {
namespace {

using Link = std::pair<int, int>;

// The largest cover searched for (2^k branches per broken link).
constexpr int kMaxSearched = 4;

// Every cover of `links` with at most `budget` more members than `chosen`,
// found by branching on the first uncovered link (either end must go).
void Covers(const std::vector<Link>& links, int budget, std::set<int>& chosen,
            std::set<std::set<int>>& found) {
  const auto uncovered =
      std::find_if(links.begin(), links.end(), [&](const Link& l) {
        return chosen.count(l.first) == 0 && chosen.count(l.second) == 0;
      });
  if (uncovered == links.end()) {
    found.insert(chosen);
    return;
  }
  if (budget == 0) return;
  for (const int end : {uncovered->first, uncovered->second}) {
    chosen.insert(end);
    Covers(links, budget - 1, chosen, found);
    chosen.erase(end);
  }
}

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrJoin(ranks, ", ");
}

std::string LinkList(const std::vector<Link>& links) {
  return absl::StrJoin(links, ", ", [](std::string* out, const Link& l) {
    absl::StrAppend(out, l.first, "-", l.second);
  });
}

}  // namespace

PartitionVerdict DecidePartition(const std::vector<ReachabilityReport>& reports,
                                 int max_cut_off) {
  std::set<Link> reported;  // (reporter, unreachable)
  for (const ReachabilityReport& r : reports) {
    for (const int u : r.unreachable) {
      if (u != r.rank) reported.insert({r.rank, u});
    }
  }
  PartitionVerdict verdict;
  for (const Link& l : reported) {
    if (l.first < l.second && reported.count({l.second, l.first}) != 0) {
      verdict.broken_links.push_back(l);
    }
  }
  if (verdict.broken_links.empty()) return verdict;
  const std::string links = LinkList(verdict.broken_links);
  const int limit = std::min(max_cut_off, kMaxSearched);
  for (int k = 1; k <= limit; ++k) {
    std::set<int> chosen;
    std::set<std::set<int>> found;
    Covers(verdict.broken_links, k, chosen, found);
    if (found.empty()) continue;
    // No cover of k - 1 exists, so every one found has exactly k members.
    if (found.size() > 1) {
      std::vector<std::string> options;
      for (const std::set<int>& f : found) {
        options.push_back(absl::StrCat("{", absl::StrJoin(f, ", "), "}"));
      }
      verdict.kind = PartitionKind::kAmbiguous;
      verdict.reason = absl::StrCat(
          "links ", links, " are down both ways; removing any of ",
          absl::StrJoin(options, ", "),
          " would leave the rest connected: cannot tell which side is cut off");
      return verdict;
    }
    verdict.kind = PartitionKind::kCutOff;
    verdict.cut_off.assign(found.begin()->begin(), found.begin()->end());
    std::vector<int> accusers;
    for (const Link& l : verdict.broken_links) {
      for (const int end : {l.first, l.second}) {
        if (!std::binary_search(verdict.cut_off.begin(), verdict.cut_off.end(),
                                end)) {
          accusers.push_back(end);
        }
      }
    }
    std::sort(accusers.begin(), accusers.end());
    accusers.erase(std::unique(accusers.begin(), accusers.end()),
                   accusers.end());
    verdict.reason =
        verdict.cut_off.size() == 1
            ? absl::StrCat("rank ", verdict.cut_off[0],
                           " cut off from its peers: it and rank",
                           accusers.size() == 1 ? " " : "s ",
                           RankList(accusers),
                           " report each other unreachable (links ", links, ")")
            : absl::StrCat("ranks ", RankList(verdict.cut_off),
                           " cut off from their peers: links ", links,
                           " are down both ways");
    return verdict;
  }
  verdict.kind = PartitionKind::kTooMany;
  verdict.reason =
      absl::StrCat("links ", links, " are down both ways; no set of at most ",
                   limit, " member", limit == 1 ? "" : "s",
                   " explains them (a strict majority must remain)");
  return verdict;
}

}  // namespace shardd::coordinator
