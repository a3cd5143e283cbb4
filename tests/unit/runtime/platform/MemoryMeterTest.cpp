//===- tests/unit/runtime/platform/MemoryMeterTest.cpp --------------------===//
//
// Counting allocator, autocast.
#include "runtime/platform/MemoryMeter.h"
#include "runtime/exec/Precision.h"
#include "runtime/platform/TorchCompat.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <thread>

using namespace ppc;

TEST(MemoryMeterTest, CountsLiveAndPeakBytes) {
  ASSERT_TRUE(MemoryMeter::install());
  ASSERT_TRUE(MemoryMeter::install()); // a second call changes nothing
  EXPECT_TRUE(MemoryMeter::installed());
  const int64_t base = MemoryMeter::current();
  MemoryMeter::resetPeak();
  EXPECT_EQ(MemoryMeter::peak(), base);
  {
    at::Tensor a = at::empty({1 << 18}, at::kFloat); // 1 MiB
    EXPECT_EQ(MemoryMeter::current() - base, int64_t(1) << 20);
    // The data keeps the default allocator's 64-byte alignment.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data_ptr()) % 64, 0u);
    a.fill_(1.5);
    EXPECT_EQ(a.sum().item<double>(), 1.5 * (1 << 18));
    {
      at::Tensor b = at::empty({1 << 16}, at::kDouble); // 512 KiB
      EXPECT_EQ(MemoryMeter::current() - base, (int64_t(3) << 19));
    }
    EXPECT_EQ(MemoryMeter::current() - base, int64_t(1) << 20);
  }
  EXPECT_EQ(MemoryMeter::current(), base);
  EXPECT_GE(MemoryMeter::peak() - base, int64_t(3) << 19);
  MemoryMeter::resetPeak();
  EXPECT_EQ(MemoryMeter::peak(), base);
}

TEST(MemoryMeterTest, RawAllocationsAndOtherThreadsCount) {
  ASSERT_TRUE(MemoryMeter::install());
  const int64_t base = MemoryMeter::current();
  c10::Allocator *alloc = c10::GetCPUAllocator();
  void *p = alloc->raw_allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(MemoryMeter::current() - base, 1000);
  alloc->raw_deallocate(p);
  EXPECT_EQ(MemoryMeter::current(), base);
  MemoryMeter::resetPeak();
  std::thread worker([] { at::Tensor t = at::zeros({4096}, at::kFloat); });
  worker.join();
  EXPECT_EQ(MemoryMeter::current(), base);
  EXPECT_GE(MemoryMeter::peak() - base, 4096 * 4);
}

TEST(PrecisionTest, Names) {
  EXPECT_EQ(precisionName(Precision::BF16), "bf16");
  EXPECT_EQ(precisionName(Precision::FP32), "fp32");
  EXPECT_EQ(parsePrecision("bf16"), Precision::BF16);
  EXPECT_EQ(parsePrecision("fp32"), Precision::FP32);
  EXPECT_FALSE(parsePrecision("fp16"));
}

TEST(PrecisionTest, GuardTurnsCpuAutocastOnAndRestores) {
  at::Tensor x = at::randn({3, 4});
  at::Tensor w = at::randn({5, 4});
  ASSERT_FALSE(compat::autocastEnabled(c10::DeviceType::CPU));
  {
    AutocastGuard fp32(Precision::FP32, c10::Device(c10::kCPU));
    EXPECT_FALSE(compat::autocastEnabled(c10::DeviceType::CPU));
    EXPECT_EQ(at::linear(x, w).scalar_type(), at::kFloat);
  }
  {
    AutocastGuard bf16(Precision::BF16, c10::Device(c10::kCPU));
    EXPECT_TRUE(compat::autocastEnabled(c10::DeviceType::CPU));
    EXPECT_EQ(compat::autocastDtype(c10::DeviceType::CPU), at::kBFloat16);
    at::Tensor y = at::linear(x, w);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::allclose(
        y.to(at::kFloat),
        at::linear(x.to(at::kBFloat16), w.to(at::kBFloat16)).to(at::kFloat)));
    // Autocast is thread-local: another thread computes in fp32.
    at::ScalarType other = at::kBFloat16;
    std::thread t([&] { other = at::linear(x, w).scalar_type(); });
    t.join();
    EXPECT_EQ(other, at::kFloat);
  }
  EXPECT_FALSE(compat::autocastEnabled(c10::DeviceType::CPU));
  EXPECT_EQ(at::linear(x, w).scalar_type(), at::kFloat);
}
