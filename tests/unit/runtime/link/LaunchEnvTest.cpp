//===- tests/unit/runtime/link/LaunchEnvTest.cpp --------------------------===//
//
// The torchrun environment.
// The torchrun environment
#include "runtime/link/LaunchEnv.h"

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
            "RANK is not set; start each rank under ppc launch or torchrun");
  vars = good();
  vars["WORLD_SIZE"] = "x";
  EXPECT_EQ(errorOf(parse(vars)),
            "WORLD_SIZE='x' is not an integer in 1..2147483647");
  vars = good();
  vars["RANK"] = "4";
  EXPECT_EQ(errorOf(parse(vars)), "RANK=4 is not below WORLD_SIZE=4");
  vars = good();
  vars["MASTER_PORT"] = "70000";
  EXPECT_EQ(errorOf(parse(vars)),
            "MASTER_PORT=70000 is not an integer in 1..65535");
  vars = good();
  vars.erase("MASTER_ADDR");
  EXPECT_EQ(
      errorOf(parse(vars)),
      "MASTER_ADDR is not set; start each rank under ppc launch or torchrun");
}

TEST(LaunchEnvTest, NumbersAreCheckedNotWrapped) {
  // The environment is untrusted: a value beyond an int is refused as it
  // is, never wrapped into a small or negative rank.
  auto vars = good();
  vars["WORLD_SIZE"] = "4294967300";
  EXPECT_EQ(errorOf(parse(vars)),
            "WORLD_SIZE=4294967300 is not an integer in 1..2147483647");
  vars = good();
  vars["RANK"] = "-2147483649";
  EXPECT_EQ(errorOf(parse(vars)),
            "RANK=-2147483649 is not an integer in 0..2147483647");
  vars = good();
  vars["LOCAL_WORLD_SIZE"] = "0";
  EXPECT_EQ(errorOf(parse(vars)),
            "LOCAL_WORLD_SIZE=0 is not an integer in 1..2147483647");
  vars = good();
  vars["LOCAL_RANK"] = "2";
  EXPECT_EQ(errorOf(parse(vars)),
            "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
  vars = good();
  vars["LOCAL_RANK"] = "1\033[1m";
  EXPECT_EQ(errorOf(parse(vars)),
            "LOCAL_RANK='1\\x1b[1m' is not an integer in 0..2147483647");
  vars = good();
  vars["MASTER_ADDR"] = "host\nname";
  EXPECT_EQ(errorOf(parse(vars)),
            "MASTER_ADDR 'host\\x0aname' is not a host name or address (at "
            "most 255 printable characters)");
  // Surrounding white space is no part of the number.
  vars = good();
  vars["WORLD_SIZE"] = " 8\n";
  auto env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env)) << errorOf(std::move(env));
  EXPECT_EQ(env->worldSize, 8);
}

TEST(LaunchEnvTest, StoreHostAndJobToken) {
  auto env = parse(good());
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_FALSE(env->launcherHostsStore);
  EXPECT_EQ(env->jobToken, "default");

  // torchrun: its agent store and run id.
  auto vars = good();
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  vars["TORCHELASTIC_RUN_ID"] = "run-7";
  env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_TRUE(env->launcherHostsStore);
  EXPECT_EQ(env->jobToken, "run-7");

  // ppc launch's token wins; only "True" means a launcher's store.
  vars["PPC_JOB_TOKEN"] = "0123456789abcdef";
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_FALSE(env->launcherHostsStore);
  EXPECT_EQ(env->jobToken, "0123456789abcdef");

  vars["PPC_JOB_TOKEN"] = "bad\ttoken";
  EXPECT_EQ(errorOf(parse(vars)),
            "PPC_JOB_TOKEN must be at most 256 printable characters");
  vars["PPC_JOB_TOKEN"] = std::string(257, 'a');
  EXPECT_EQ(errorOf(parse(vars)),
            "PPC_JOB_TOKEN must be at most 256 printable characters");
}

// ppc's own knobs are read here, once, so that nothing below a rank's
// creation reads the environment.
TEST(LaunchEnvTest, HostIdAndCoalesce) {
  auto env = parse(good());
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_EQ(env->hostId, "");
  EXPECT_TRUE(env->coalesce);

  auto vars = good();
  vars["PPC_HOST_ID"] = "host-a";
  vars["PPC_COALESCE"] = "0";
  env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_EQ(env->hostId, "host-a");
  EXPECT_FALSE(env->coalesce);

  // Only "0" turns coalescing off; an empty host id is none.
  vars["PPC_HOST_ID"] = "";
  vars["PPC_COALESCE"] = "1";
  env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_EQ(env->hostId, "");
  EXPECT_TRUE(env->coalesce);

  // A host id travels in store values and messages: one printable line.
  vars["PPC_HOST_ID"] = "rack1\nhost2";
  EXPECT_EQ(errorOf(parse(vars)), "PPC_HOST_ID 'rack1\\x0ahost2' must be at "
                                  "most 256 printable characters");
  vars["PPC_HOST_ID"] = std::string(257, 'h');
  EXPECT_NE(errorOf(parse(vars)), "");
}

TEST(LaunchEnvTest, OverlapAllReduce) {
  auto env = parse(good());
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_TRUE(env->overlapAllReduce);
  auto vars = good();
  vars["PPC_OVERLAP_ALLREDUCE"] = "0";
  env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_FALSE(env->overlapAllReduce);
  // Only "0" turns it off.
  vars["PPC_OVERLAP_ALLREDUCE"] = "1";
  env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_TRUE(env->overlapAllReduce);
}

TEST(LaunchEnvTest, ReadsTheRuntimesOtherVariables) {
  // Every variable the runtime reads is read here (scripts/check_layers.py
  // holds the rest of runtime/ to that).
  auto env = parse(good());
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_EQ(env->statusDir, "");
  EXPECT_EQ(env->glooSocketIfname, "");
  EXPECT_FALSE(env->cudaVisibleDevices.has_value());
  auto vars = good();
  vars["PPC_STATUS_DIR"] = "/tmp/status";
  vars["GLOO_SOCKET_IFNAME"] = "eth1,eth2";
  vars["CUDA_VISIBLE_DEVICES"] = "";
  env = parse(vars);
  ASSERT_TRUE(static_cast<bool>(env));
  EXPECT_EQ(env->statusDir, "/tmp/status");
  EXPECT_EQ(env->glooSocketIfname, "eth1,eth2");
  EXPECT_EQ(env->cudaVisibleDevices, std::optional<std::string>(""));
}
