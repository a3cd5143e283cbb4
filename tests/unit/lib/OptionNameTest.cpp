//===- tests/unit/lib/OptionNameTest.cpp - How messages name options -----===//
//
// Tests that the runtime's messages name an option by its field for a
// library user and by its flag once the CLI asks for flags (lib/OptionName.h),
// that a runtime error built with optionName() follows the naming, and that
// the CLI's flag of an OptionError's field comes from the same table.
//
//===----------------------------------------------------------------------===//

#include "lib/OptionName.h"
#include "runtime/schedule/Plan.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

using namespace ppc;

namespace {

/// Flags for the test's length; the library's default again after it.
struct FlagNaming {
  FlagNaming() { nameOptions(OptionNaming::Flag); }
  ~FlagNaming() { nameOptions(OptionNaming::Field); }
};

TEST(OptionNameTest, FieldsByDefaultFlagsWhenAsked) {
  EXPECT_EQ(optionName(Option::DataParallel), "dataParallel");
  EXPECT_EQ(optionName(Option::StreamWindow), "streamMicrobatches");
  EXPECT_EQ(optionName(Option::Groups), "groups");
  FlagNaming flags;
  EXPECT_EQ(optionName(Option::DataParallel), "--data-parallel");
  EXPECT_EQ(optionName(Option::StreamWindow), "--stream-window");
  EXPECT_EQ(optionName(Option::Groups), "--microbatches");
  EXPECT_EQ(optionName(Option::Lr), "--lr");
}

TEST(OptionNameTest, AFieldsFlagIsItsLineOrItsKebabCase) {
  EXPECT_EQ(flagOfField("streamMicrobatches"), "--stream-window");
  EXPECT_EQ(flagOfField("dataParallel"), "--data-parallel");
  EXPECT_EQ(flagOfField("maxNewTokens"), "--max-new-tokens");
  EXPECT_EQ(flagOfField("timeoutSeconds"), "--timeout");
}

TEST(OptionNameTest, RuntimeErrorsFollowTheNaming) {
  ScheduleRequest request;
  request.autoSchedule = true;
  request.csv = "";
  EXPECT_EQ(llvm::toString(request.check()),
            "schedule auto picks a schedule; scheduleCSVPath gives one: use "
            "one of them");
  FlagNaming flags;
  EXPECT_EQ(llvm::toString(request.check()),
            "--schedule auto picks a schedule; --schedule-csv gives one: use "
            "one of them");
}

} // namespace
