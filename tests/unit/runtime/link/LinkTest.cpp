//===- tests/unit/runtime/link/LinkTest.cpp -------------------------------===//
//
// What every link shares.
//
// Tests that the link policies (--link, RunOptions::link) come from
// Links.def with auto first, that each name and its policy map to each
// other, and that the lists for errors and help read as they always have.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Link.h"

#include <gtest/gtest.h>

using namespace ppc;

TEST(LinkTest, PolicyNamesComeFromLinksDef) {
  EXPECT_EQ(linkPolicyNames(),
            (std::vector<std::string>{"auto", "gloo", "shm"}));
  for (const std::string &name : linkPolicyNames()) {
    std::optional<LinkPolicy> policy = linkPolicyNamed(name);
    ASSERT_TRUE(policy.has_value()) << name;
    EXPECT_EQ(linkPolicyName(*policy), name);
  }
  EXPECT_EQ(linkPolicyNamed("gloo"), LinkPolicy::Gloo);
  EXPECT_EQ(linkPolicyNamed("shm"), LinkPolicy::Shm);
  EXPECT_EQ(linkPolicyNamed("auto"), LinkPolicy::Auto);
  // Links no policy names.
  EXPECT_FALSE(linkPolicyNamed("nccl").has_value());
  EXPECT_FALSE(linkPolicyNamed("loopback").has_value());
  EXPECT_FALSE(linkPolicyNamed("").has_value());
}

TEST(LinkTest, PolicyListsForErrorsAndHelp) {
  EXPECT_EQ(linkPolicyList(), "auto, gloo or shm");
  EXPECT_EQ(linkPolicyHelp(),
            "auto (shared memory between ranks on one host, Gloo across "
            "hosts), gloo (Gloo only) or shm (shared memory; every rank must "
            "be on one host)");
}
