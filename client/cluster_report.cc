#include "client/cluster_report.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"

namespace shardd::client {
namespace {

std::string EnumName(const std::string& name, absl::string_view prefix) {
  absl::string_view view = name;
  absl::ConsumePrefix(&view, prefix);
  return std::string(view);
}

std::string Utc(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string Ranks(const google::protobuf::RepeatedField<int32_t>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ", "), "]");
}

std::string PlanLine(const v1::RecoveryPlan& p) {
  std::string out = absl::StrFormat(
      "%s from step %d",
      EnumName(v1::EpochPlanKind_Name(p.kind()), "EPOCH_PLAN_KIND_"), p.step());
  if (!p.restore_ranks().empty()) {
    absl::StrAppend(&out, ", ranks ", Ranks(p.restore_ranks()),
                    " restore their checkpoint");
  }
  return out;
}

void AppendHeader(const v1::ClusterState& s, std::string* out) {
  if (s.job_state() == v1::JOB_STATE_FAILED) {
    // Terminal: first, so that nobody reads past it.
    absl::StrAppend(out, "job          FAILED: ", s.job_failure(), "\n");
  } else {
    absl::StrAppend(out, "job          RUNNING\n");
  }
  absl::StrAppendFormat(
      out,
      "epoch        %d (%s)\nworld        W = %d, F = %d (%d shard "
      "group(s); each shard held by %d rank(s))\ncommitted    step %d\n"
      "lease        %d ms\ncoordinator  up since %s\n",
      s.epoch(), s.ready() ? "ready" : "not ready", s.world_size(),
      s.sharding_factor(),
      s.sharding_factor() > 0 ? s.world_size() / s.sharding_factor() : 0,
      s.sharding_factor() > 0 ? s.world_size() / s.sharding_factor() : 0,
      s.committed_step(), s.lease_ms(), Utc(s.coordinator_started_unix_ms()));
  if (s.has_plan()) {
    absl::StrAppend(out, "plan         ", PlanLine(s.plan()), "\n");
  }
}

void AppendMembers(const v1::ClusterState& s, absl::Time now,
                   std::string* out) {
  absl::StrAppendFormat(out, "\nmembers (epoch %d)\n", s.epoch());
  absl::StrAppendFormat(out, "%-5s %-11s %-22s %-16s %8s %-6s %-14s %s\n",
                        "rank", "state", "address", "identity", "step",
                        "device", "trainer called", "lease left");
  for (const v1::SlotState& slot : s.slots()) {
    const std::string state =
        EnumName(v1::MemberState_Name(slot.state()), "MEMBER_STATE_");
    if (!slot.has_member()) {
      absl::StrAppendFormat(out, "%-5d %-11s %-22s\n", slot.rank(), state, "-");
      continue;
    }
    const v1::MemberInfo& m = slot.member();
    const absl::Duration left =
        absl::FromUnixMillis(m.lease_expiry_unix_ms()) - now;
    // As of the member's last heartbeat: a trainer whose time keeps growing
    // is the one its peers wait for.
    const std::string trainer =
        m.trainer_last_call_unix_ms() == 0
            ? "none"
            : absl::StrCat(
                  absl::FormatDuration(absl::Trunc(
                      std::max(absl::ZeroDuration(),
                               now - absl::FromUnixMillis(
                                         m.trainer_last_call_unix_ms())),
                      absl::Milliseconds(100))),
                  " ago");
    absl::StrAppendFormat(
        out, "%-5d %-11s %-22s %-16s %8d %-6s %-14s %s\n", slot.rank(), state,
        m.peer_address(), m.identity(), m.committed_step(),
        m.device() == v1::DEVICE_KIND_UNSPECIFIED
            ? "-"
            : EnumName(v1::DeviceKind_Name(m.device()), "DEVICE_KIND_"),
        trainer,
        m.lease_expiry_unix_ms() == 0 ? "-"
        : left < absl::ZeroDuration()
            ? absl::StrCat("expired ",
                           absl::FormatDuration(
                               absl::Trunc(-left, absl::Milliseconds(1))),
                           " ago")
            : absl::FormatDuration(absl::Trunc(left, absl::Milliseconds(1))));
  }
}

void AppendLinks(const v1::ClusterState& s, std::string* out) {
  std::map<int, std::string> address;
  for (const v1::SlotState& slot : s.slots()) {
    if (slot.has_member()) address[slot.rank()] = slot.member().peer_address();
  }
  auto rank = [&](int r) {
    auto it = address.find(r);
    return it == address.end()
               ? absl::StrCat("rank ", r)
               : absl::StrCat("rank ", r, " (", it->second, ")");
  };
  if (s.broken_links().empty()) {
    absl::StrAppend(out, "\nbroken links: none\n");
    return;
  }
  absl::StrAppendFormat(out,
                        "\nbroken links: %d (both ends report the other "
                        "unreachable)\n",
                        s.broken_links_size());
  for (const v1::PeerLink& link : s.broken_links()) {
    absl::StrAppend(out, "  ", rank(link.rank_a()), " <-x-> ",
                    rank(link.rank_b()), "\n");
  }
}

void AppendQuarantines(const v1::ClusterState& s, absl::Time now,
                       std::string* out) {
  if (s.quarantines().empty()) return;
  absl::StrAppend(out, "\nquarantined addresses (joins refused until)\n");
  for (const v1::QuarantinedAddress& q : s.quarantines()) {
    absl::StrAppendFormat(
        out, "  %-22s until %s%s, %d removal(s): %s\n", q.peer_address(),
        Utc(q.until_unix_ms()),
        absl::FromUnixMillis(q.until_unix_ms()) <= now ? " (past)" : "",
        q.removals(), q.reason());
  }
}

void AppendPlans(const v1::ClusterState& s, std::string* out) {
  if (s.recovery_plans().empty()) return;
  absl::StrAppend(out, "\nrecovery plans (most recent first)\n");
  for (const v1::RecoveryPlan& p : s.recovery_plans()) {
    absl::StrAppendFormat(
        out, "  epoch %d  %s  %s  failed %s  created %s  completed %s\n",
        p.epoch(),
        EnumName(v1::RecoveryPhase_Name(p.phase()), "RECOVERY_PHASE_"),
        PlanLine(p), Ranks(p.failed_ranks()), Utc(p.created_unix_ms()),
        Utc(p.completed_unix_ms()));
    for (const v1::ShardTransfer& t : p.transfers()) {
      absl::StrAppendFormat(
          out, "    rank %d copies shard %d at step %d from %s: %s\n",
          t.target_rank(), t.shard_index(), t.step(), Ranks(t.source_ranks()),
          EnumName(v1::RecoveryPhase_Name(t.phase()), "RECOVERY_PHASE_"));
    }
    if (!p.reason().empty()) absl::StrAppend(out, "    ", p.reason(), "\n");
  }
}

void AppendDecisions(const v1::ClusterState& s, std::string* out) {
  // The message lists the most recent first; a timeline reads forwards.
  std::vector<const v1::Decision*> decisions;
  for (const v1::Decision& d : s.decisions()) decisions.push_back(&d);
  std::reverse(decisions.begin(), decisions.end());
  std::stable_sort(decisions.begin(), decisions.end(),
                   [](const v1::Decision* a, const v1::Decision* b) {
                     return a->time_unix_ms() < b->time_unix_ms();
                   });
  absl::StrAppendFormat(out, "\ndecisions (%d, oldest first)\n",
                        s.decisions_size());
  for (const v1::Decision* d : decisions) {
    absl::StrAppendFormat(
        out, "  %s  epoch %-4d %-24s ranks %-10s %s\n", Utc(d->time_unix_ms()),
        d->epoch(),
        EnumName(v1::DecisionKind_Name(d->kind()), "DECISION_KIND_"),
        Ranks(d->ranks()), d->reason());
  }
}

}  // namespace

std::string ClusterReport(const v1::ClusterState& state, absl::Time now) {
  std::string out;
  AppendHeader(state, &out);
  AppendMembers(state, now, &out);
  AppendLinks(state, &out);
  AppendQuarantines(state, now, &out);
  AppendPlans(state, &out);
  AppendDecisions(state, &out);
  return out;
}

}  // namespace shardd::client
