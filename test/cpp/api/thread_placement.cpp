// Where the measured threads ran (Note [Where the measured threads ran]): the
// parsers of /proc and cgroup text, and the samples of this process's own
// threads.

#include <torch/csrc/autograd/thread_placement.h>

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace torch::autograd::device_logging::detail {
namespace {

TEST(CpuListText, RunsOfTwoOrMoreAreRanges) {
  EXPECT_EQ(cpu_list_text({}), "");
  EXPECT_EQ(cpu_list_text({5}), "5");
  EXPECT_EQ(cpu_list_text({0, 1}), "0-1");
  EXPECT_EQ(cpu_list_text({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
}

// "PID (COMM) STATE", fields 4 to 38, then 39 (the CPU) and 40.
std::string stat_with(const std::string& comm, const std::string& cpu) {
  std::string stat = "12 (" + comm + ") S";
  for (int field = 4; field <= 38; ++field) {
    stat += " 0";
  }
  return stat + " " + cpu + " 0\n";
}

TEST(LastCpuFromStat, IsField39CountedAfterTheComm) {
  EXPECT_EQ(last_cpu_from_stat(stat_with("pt_autograd_0", "7")), 7);
  // The comm may hold ") " itself: the fields count from the last ')'.
  EXPECT_EQ(last_cpu_from_stat(stat_with("a) b", "13")), 13);
  EXPECT_EQ(last_cpu_from_stat(stat_with("x", "-1")), std::nullopt);
  EXPECT_EQ(last_cpu_from_stat(stat_with("x", "7x")), std::nullopt);
  EXPECT_EQ(last_cpu_from_stat("12 (x) S 1 2"), std::nullopt);
  EXPECT_EQ(last_cpu_from_stat("no parenthesis"), std::nullopt);
}

TEST(CpuQuotaFromText, V2AndV1) {
  EXPECT_EQ(cpu_quota_from_text("max 100000\n"), std::nullopt);
  EXPECT_EQ(cpu_quota_from_text("200000 100000\n"), 2.0);
  EXPECT_EQ(cpu_quota_from_text("50000 100000"), 0.5);
  EXPECT_EQ(cpu_quota_from_text("-1 100000"), std::nullopt); // v1: none
  EXPECT_EQ(
      cpu_quota_from_text(" 100000"), std::nullopt); // v1 quota unreadable
  EXPECT_EQ(cpu_quota_from_text("100000 0"), std::nullopt);
  EXPECT_EQ(cpu_quota_from_text(""), std::nullopt);
  EXPECT_EQ(cpu_quota_from_text("2x 1"), std::nullopt);
}

TEST(CgroupCpuQuota, IsNoneOrPositive) {
  const auto quota = cgroup_cpu_quota();
  if (quota) {
    EXPECT_GT(*quota, 0.0);
  }
}

pid_t this_thread_id() {
  return static_cast<pid_t>(syscall(SYS_gettid));
}

TEST(PlacementSamples, SeeTheCallingThreadAndTheDeviceThreads) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  std::set<int> allowed;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mine)) {
      allowed.insert(cpu);
    }
  }
  const int pinned_cpu = *allowed.rbegin();
  // A thread named as the engine names its device threads, on one CPU.
  std::atomic<bool> named{false};
  std::atomic<bool> done{false};
  std::thread device([&] {
    pthread_setname_np(pthread_self(), "pt_autograd_7");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(pinned_cpu, &one);
    sched_setaffinity(0, sizeof(one), &one);
    sched_yield(); // now on it
    named = true;
    while (!done) {
      std::this_thread::yield();
    }
  });
  while (!named) {
    std::this_thread::yield();
  }
  PlacementSamples samples;
  samples.restart_if_new(1, this_thread_id());
  samples.sample();
  nlohmann::json placement = samples.to_json(3);
  done = true;
  device.join();

  EXPECT_EQ(placement["intra_op_threads"], 3);
  const nlohmann::json& threads = placement["threads"];
  ASSERT_TRUE(threads.contains("calling")) << placement.dump();
  EXPECT_EQ(threads["calling"]["affinity"], cpu_list_text(allowed));
  ASSERT_TRUE(threads.contains("pt_autograd_7")) << placement.dump();
  EXPECT_EQ(threads["pt_autograd_7"]["affinity"], std::to_string(pinned_cpu));
  EXPECT_EQ(threads["pt_autograd_7"]["ran_on"], std::to_string(pinned_cpu));
  EXPECT_EQ(threads.size(), 2u) << placement.dump();

  // The same start keeps what was seen; a new one forgets it.
  samples.restart_if_new(1, this_thread_id());
  EXPECT_TRUE(samples.to_json(3)["threads"].contains("pt_autograd_7"));
  samples.restart_if_new(2, 0);
  samples.sample(); // the device thread is gone, and no calling thread
  EXPECT_TRUE(samples.to_json(-1)["threads"].empty());
  EXPECT_EQ(samples.to_json(-1)["intra_op_threads"], -1);
}

} // namespace
} // namespace torch::autograd::device_logging::detail
