// Linked into every gtest binary: LeakSanitizer's check runs when the tests
// end, not during torch's exit-time shutdown (Note [Leaks are checked while
// torch's engine threads still run], leak_check.h).

#include "leak_check.h"

#include <gtest/gtest.h>

namespace {

class LeakCheckWhenTestsEnd : public ::testing::Environment {
 public:
  void TearDown() override {
    torch::autograd::device_logging::testing::check_leaks_now();
  }
};

[[maybe_unused]] ::testing::Environment* const leak_check_when_tests_end =
    ::testing::AddGlobalTestEnvironment(new LeakCheckWhenTestsEnd());

} // namespace
