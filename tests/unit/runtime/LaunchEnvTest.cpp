//===- tests/unit/runtime/LaunchEnvTest.cpp - The torchrun environment ----===//
#include "runtime/LaunchEnv.h"

#include <gtest/gtest.h>

#include <map>

using namespace ppc;

namespace {
llvm::Expected<LaunchEnv> parse(std::map<std::string, std::string> vars) {
  return LaunchEnv::fromEnvironment(
      [vars = std::move(vars)](const char *name) -> const char * {
        static std::string value;
        auto it = vars.find(name);
        if (it == vars.end())
          return nullptr;
        value = it->second;
        return value.c_str();
      });
}

std::map<std::string, std::string> good() {
  return {{"RANK", "1"},
          {"WORLD_SIZE", "4"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29501"}};
}

std::string errorOf(llvm::Expected<LaunchEnv> env) {
  return env ? std::string() : llvm::toString(env.takeError());
}
} // namespace

TEST(LaunchEnvTest, ReadsEveryVariable) {
  auto env = parse(good());
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->worldSize, 4);
  EXPECT_EQ(env->localRank, 1);
  EXPECT_EQ(env->localWorldSize, 2);
  EXPECT_EQ(env->masterAddr, "10.0.0.1");
  EXPECT_EQ(env->masterPort, 29501);
}

TEST(LaunchEnvTest, LocalVariablesDefault) {
  auto vars = good();
  vars.erase("LOCAL_RANK");
  vars.erase("LOCAL_WORLD_SIZE");
  auto env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_EQ(env->localRank, 1);
  EXPECT_EQ(env->localWorldSize, 4);
}

TEST(LaunchEnvTest, Errors) {
  auto vars = good();
  vars.erase("RANK");
  EXPECT_EQ(errorOf(parse(vars)),
            "RANK is not set; start ppc run under ppc launch or torchrun");
  vars = good();
  vars["WORLD_SIZE"] = "x";
  EXPECT_EQ(errorOf(parse(vars)), "WORLD_SIZE='x' is not an integer");
  vars = good();
  vars["RANK"] = "4";
  EXPECT_EQ(errorOf(parse(vars)), "RANK=4 is not below WORLD_SIZE=4");
  vars = good();
  vars["MASTER_PORT"] = "70000";
  EXPECT_EQ(errorOf(parse(vars)), "MASTER_PORT=70000 is not a port number");
  vars = good();
  vars.erase("MASTER_ADDR");
  EXPECT_EQ(
      errorOf(parse(vars)),
      "MASTER_ADDR is not set; start ppc run under ppc launch or torchrun");
}
