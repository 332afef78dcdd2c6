// commit_log_check: checks the commit logs of one run (see commit_log.h for
// the rules) and prints a one-line verdict.
//
//   commit_log_check --world_size=W --sharding_factor=F [--final_step=N]
//       [--first_step=S] FILE...     (one command line)
//
// --first_step: the job resumed from its checkpoints of step S (each log
// starts with checkpoint_restored at S): steps are counted from S.
//
// Exit 0 and "commit logs OK: N records, ranks 0,1,2,3, final step S";
// exit 1 and the violations (with the index -> file table) otherwise; exit
// 2 for bad usage.

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/recovery/commit_log.h"

ABSL_FLAG(int, world_size, 0, "W: number of ranks (required)");
ABSL_FLAG(int, sharding_factor, 0, "F: ranks per shard group (required)");
ABSL_FLAG(int64_t, final_step, -1,
          "every rank's last step must be this (-1: not checked)");
ABSL_FLAG(int64_t, first_step, 0,
          "a job resumed from its checkpoints of this step: every rank's "
          "steps are counted from it");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "commit_log_check --world_size=W --sharding_factor=F [--final_step=N] "
      "[--first_step=S] FILE...");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> files(args.begin() + 1, args.end());
  if (files.empty() || absl::GetFlag(FLAGS_world_size) < 1 ||
      absl::GetFlag(FLAGS_sharding_factor) < 1) {
    std::fprintf(stderr,
                 "usage: commit_log_check --world_size=W --sharding_factor=F "
                 "[--final_step=N] [--first_step=S] FILE...\n");
    return 2;
  }
  std::vector<std::vector<shardd::recovery::CommitRecord>> logs;
  for (const std::string& file : files) {
    auto records = shardd::recovery::CommitLog::Read(file);
    if (!records.ok()) {
      std::fprintf(stderr, "commit logs BAD: %s\n",
                   records.status().ToString().c_str());
      return 1;
    }
    logs.push_back(*std::move(records));
  }
  absl::Status status = shardd::recovery::CheckCommitLogs(
      logs, absl::GetFlag(FLAGS_world_size),
      absl::GetFlag(FLAGS_sharding_factor), absl::GetFlag(FLAGS_final_step),
      absl::GetFlag(FLAGS_first_step));
  if (!status.ok()) {
    std::fprintf(stderr, "commit logs BAD: %s\n", status.ToString().c_str());
    for (size_t i = 0; i < files.size(); ++i) {
      std::fprintf(stderr, "  log #%zu = %s\n", i, files[i].c_str());
    }
    return 1;
  }
  const shardd::recovery::CommitLogSummary summary =
      shardd::recovery::SummarizeCommitLogs(logs);
  const std::string final_step =
      summary.min_final_step == summary.max_final_step
          ? absl::StrCat("final step ", summary.max_final_step)
          : absl::StrCat("final steps ", summary.min_final_step, "..",
                         summary.max_final_step);
  std::printf("commit logs OK: %lld records, ranks %s, %s\n",
              static_cast<long long>(summary.records),
              absl::StrJoin(summary.ranks, ",").c_str(), final_step.c_str());
  return 0;
}
