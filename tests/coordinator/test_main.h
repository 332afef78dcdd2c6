#ifndef SHARDD_TESTS_COORDINATOR_TEST_MAIN_H_
#define SHARDD_TESTS_COORDINATOR_TEST_MAIN_H_

#include <string>

namespace shardd::tests {

// The binaries under test, from the test's arguments
// ($(location //daemon/coordinator:coordinator) $(location :member)).
struct Binaries {
  std::string coordinator;
  std::string member;
};
const Binaries& TestBinaries();

}  // namespace shardd::tests

#endif  // SHARDD_TESTS_COORDINATOR_TEST_MAIN_H_
