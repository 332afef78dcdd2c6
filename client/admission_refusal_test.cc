#include "client/admission_refusal.h"

#include "gtest/gtest.h"

namespace shardd::client {
namespace {

TEST(AdmissionRefusalTest, LaysOutScopesPlanAndLimitsOnePerLine) {
  const std::string message =
      "RegisterModel for rank 0 of W = 1, F = 1: the plan does not fit in "
      "memory: it needs 272.03 GiB (292091330560 B) of host memory, which "
      "may use 20.83 GiB (22370438759 B): /proc/meminfo MemAvailable leaves "
      "21.93 GiB, less a safety margin of 1.10 GiB; it needs 80.00 GiB "
      "(85899345920 B) of shm space, which may use 72.04 GiB (77347950592 "
      "B): free space of /dev/shm (a 251.97 GiB file system) leaves 75.83 "
      "GiB, less a safety margin of 3.79 GiB. Plan: parameter shards 64.00 "
      "GiB (shm), gradient shards 64.00 GiB, staging 32.00 MiB; host 272.03 "
      "GiB (of it shm 80.00 GiB), device 0 B. Limits: host memory 20.83 GiB "
      "from "
      "/proc/meminfo MemAvailable leaves 21.93 GiB, less a safety margin of "
      "1.10 GiB; shm space 72.04 GiB from free space of /dev/shm.";
  EXPECT_EQ(FormatAdmissionRefusal(message),
            "RegisterModel for rank 0 of W = 1, F = 1: the plan does not fit "
            "in memory:\n"
            "    it needs 272.03 GiB (292091330560 B) of host memory, which "
            "may use 20.83 GiB (22370438759 B): /proc/meminfo MemAvailable "
            "leaves 21.93 GiB, less a safety margin of 1.10 GiB\n"
            "    it needs 80.00 GiB (85899345920 B) of shm space, which may "
            "use 72.04 GiB (77347950592 B): free space of /dev/shm (a 251.97 "
            "GiB file system) leaves 75.83 GiB, less a safety margin of 3.79 "
            "GiB\n"
            "  plan (host 272.03 GiB (of it shm 80.00 GiB), device 0 B):\n"
            "    parameter shards 64.00 GiB (shm)\n"
            "    gradient shards 64.00 GiB\n"
            "    staging 32.00 MiB\n"
            "  limits:\n"
            "    host memory 20.83 GiB from /proc/meminfo MemAvailable leaves "
            "21.93 GiB, less a safety margin of 1.10 GiB\n"
            "    shm space 72.04 GiB from free space of /dev/shm");
}

TEST(AdmissionRefusalTest, OtherMessagesComeBackUnchanged) {
  EXPECT_EQ(FormatAdmissionRefusal("request over the receive limit"),
            "request over the receive limit");
  EXPECT_EQ(FormatAdmissionRefusal("x: the plan does not fit in memory: y"),
            "x: the plan does not fit in memory: y");
}

}  // namespace
}  // namespace shardd::client
