// main() of the process-level coordinator tests: gtest flags first, then
// the paths of the coordinator and member binaries.
#include "tests/coordinator/test_main.h"

#include <cstdio>

#include "gtest/gtest.h"

namespace shardd::tests {
Binaries binaries;
const Binaries& TestBinaries() { return binaries; }
}  // namespace shardd::tests

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s COORDINATOR_BINARY MEMBER_BINARY\n",
                 argv[0]);
    return 2;
  }
  shardd::tests::binaries = {argv[1], argv[2]};
  return RUN_ALL_TESTS();
}
