// The encodings of one snapshot (Note [One snapshot, several encodings]):
// the Prometheus text and its file name (Note [The Prometheus textfile]) and
// the record's JSON, as pure functions of a ProcessSnapshot.

#include <torch/csrc/autograd/process_snapshot.h>
#include <torch/csrc/autograd/prometheus_text.h>
#include <torch/csrc/autograd/record_json.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace torch::autograd::device_logging::detail {
namespace {

ProcessSnapshot snapshot() {
  ProcessSnapshot s;
  s.time_ns = 1700000000LL * 1000000000LL;
  s.start_ns = s.time_ns - 1000000000LL;
  s.occasion = "exit";
  s.host = "h";
  s.pid = 42;
  s.program = "train.py";
  s.job = "job-1";
  s.job_source = "AUTOGRAD_DEVICE_LOGGING_JOB";
  s.role = "rank";
  s.rank = "3";
  s.torch_built_for = "2.13.0";
  s.torch_running = "2.13.0";
  s.library_version = "0.1.0";
  s.activation = "by import";
  s.events = kGpuCpuBackward;
  s.ran_backward = true;
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

size_t count(const std::vector<std::string>& lines, const std::string& start) {
  size_t n = 0;
  for (const auto& line : lines) {
    n += line.rfind(start, 0) == 0;
  }
  return n;
}

TEST(PrometheusText, OneHelpAndTypePerFamilyAndATrailingNewline) {
  ProcessSnapshot s = snapshot();
  s.pass_classes = std::array<uint64_t, kNumBackwardDeviceClasses>{5, 4, 3, 2};
  s.threading_cost.emplace();
  s.threading_cost->pairs[1] = {
      {1500000000, 1000000000}, {500000000, 250000000}};
  const std::string text = encode_prometheus_text(s);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const auto lines = lines_of(text);
  for (const char* family :
       {"autograd_device_logging_info",
        "autograd_device_logging_backward_passes_total",
        "autograd_device_logging_events_total",
        "autograd_device_logging_threading_cost_pairs_total",
        "autograd_device_logging_threading_cost_multithreaded_seconds_total",
        "autograd_device_logging_threading_cost_single_threaded_seconds_"
        "total"}) {
    EXPECT_EQ(count(lines, std::string("# HELP ") + family + " "), 1) << family;
    EXPECT_EQ(count(lines, std::string("# TYPE ") + family + " "), 1) << family;
  }
  EXPECT_EQ(
      count(
          lines,
          "autograd_device_logging_backward_passes_total{training_job=\"job-"
          "1\","
          "rank=\"3\",class=\"accelerator_cpu\"} 3"),
      1);
  EXPECT_EQ(
      count(
          lines,
          "autograd_device_logging_events_total{training_job=\"job-1\",rank="
          "\"3\","
          "event=\"torch.autograd.gpu_cpu_backward\"} 1"),
      1);
  EXPECT_EQ(
      count(
          lines,
          "autograd_device_logging_events_total{training_job=\"job-1\",rank="
          "\"3\","
          "event=\"torch.autograd.multidevice_backward\"} 0"),
      1);
  // Base units: seconds, summed over the class's pairs.
  EXPECT_EQ(
      count(
          lines,
          "autograd_device_logging_threading_cost_single_threaded_seconds_total"
          "{training_job=\"job-1\",rank=\"3\",class=\"single_accelerator\"} "
          "2.000000000"),
      1);
  EXPECT_EQ(
      count(
          lines,
          "autograd_device_logging_threading_cost_multithreaded_seconds_total"
          "{training_job=\"job-1\",rank=\"3\",class=\"single_accelerator\"} "
          "1.250000000"),
      1);
  EXPECT_EQ(
      count(
          lines,
          "autograd_device_logging_threading_cost_pairs_total{training_job="
          "\"job-1\","
          "rank=\"3\",class=\"single_accelerator\"} 2"),
      1);
}

TEST(PrometheusText, FamiliesWithoutDataAreLeftOut) {
  const auto lines = lines_of(encode_prometheus_text(snapshot()));
  EXPECT_EQ(count(lines, "# TYPE autograd_device_logging_backward_passes"), 0);
  EXPECT_EQ(count(lines, "# TYPE autograd_device_logging_threading_cost"), 0);
  EXPECT_EQ(count(lines, "# TYPE autograd_device_logging_events_total"), 1);
}

TEST(PrometheusText, AnUnsetRankIsNoLabel) {
  ProcessSnapshot s = snapshot();
  s.rank = "";
  const std::string text = encode_prometheus_text(s);
  EXPECT_EQ(text.find("rank="), std::string::npos);
  EXPECT_NE(text.find("{training_job=\"job-1\",event="), std::string::npos);
}

TEST(PrometheusText, LabelValuesAreEscapedUtf8) {
  ProcessSnapshot s = snapshot();
  s.job = std::string("a\"b\\c\nd\xff") + "e";
  const std::string text = encode_prometheus_text(s);
  EXPECT_NE(
      text.find("training_job=\"a\\\"b\\\\c\\nd\xef\xbf\xbd"
                "e\""),
      std::string::npos)
      << text;
  // No raw newline inside a sample: every line is a comment or a sample.
  for (const auto& line : lines_of(text)) {
    EXPECT_TRUE(line.rfind("# ", 0) == 0 || line.rfind("autograd_", 0) == 0)
        << line;
  }
}

TEST(PrometheusText, TheInfoSaysTheState) {
  ProcessSnapshot s = snapshot();
  s.calling_thread = true;
  s.occasion = "interval";
  EXPECT_NE(
      encode_prometheus_text(s).find(
          "state=\"active\",statistics=\"off\",threading_cost=\"off\","
          "calling_thread=\"on\"} 1"),
      std::string::npos);
  // The exit write says the process is gone, and when it wrote last.
  s.occasion = "exit";
  s.time_ns = 1700000000999999999;
  const std::string exited = encode_prometheus_text(s);
  EXPECT_NE(exited.find("state=\"exited\""), std::string::npos);
  EXPECT_NE(
      exited.find("\nautograd_device_logging_last_update_timestamp_seconds{"
                  "training_job=\"job-1\",rank=\"3\"} 1700000000\n"),
      std::string::npos)
      << exited;
  s.disabled_reason = "a reason with a path /x/y";
  const std::string text = encode_prometheus_text(s);
  EXPECT_NE(text.find("state=\"disabled\""), std::string::npos);
  EXPECT_EQ(text.find("/x/y"), std::string::npos); // unbounded: not a label
}

TEST(PrometheusFileName, IsAFunctionOfJobAndRankAlone) {
  ProcessSnapshot a = snapshot();
  ProcessSnapshot b = snapshot();
  b.pid = 7;
  b.host = "other";
  b.start_ns = 1;
  b.program = "other.py";
  EXPECT_EQ(prometheus_file_name(a), prometheus_file_name(b));
  const std::string name = prometheus_file_name(a);
  EXPECT_EQ(name.rfind("autograd_device_logging-job-1-rank3-", 0), 0u) << name;
  EXPECT_EQ(name.substr(name.size() - 5), ".prom");
  b.rank = "4";
  EXPECT_NE(prometheus_file_name(a), prometheus_file_name(b));
  // Jobs that reduce to the same characters still differ by the hash.
  a.job = "x/y";
  b.job = "x_y";
  b.rank = a.rank;
  EXPECT_NE(prometheus_file_name(a), prometheus_file_name(b));
  a.job = "../../etc";
  EXPECT_EQ(prometheus_file_name(a).find('/'), std::string::npos);
}

TEST(RecordJson, IsOneLineOfTheSnapshot) {
  ProcessSnapshot s = snapshot();
  s.events = kMultiDeviceBackward | kGpuCpuBackward;
  s.pass_classes = std::array<uint64_t, kNumBackwardDeviceClasses>{1, 2, 3, 4};
  const std::string text = encode_record_json(s);
  EXPECT_EQ(text.find('\n'), text.size() - 1);
  const auto r = nlohmann::json::parse(text);
  EXPECT_EQ(r["schema"], kRecordSchema);
  EXPECT_EQ(r["rank"], 3);
  EXPECT_EQ(r["local_rank"], nullptr);
  EXPECT_EQ(
      r["events"],
      nlohmann::json::array(
          {"torch.autograd.multidevice_backward",
           "torch.autograd.gpu_cpu_backward"}));
  EXPECT_EQ(r["pass_classes"]["multi_accelerator"], 4);
  EXPECT_EQ(r["threading_cost"], nullptr);
  EXPECT_EQ(r["time"], "2023-11-14T22:13:20Z");
  s.threading_cost.emplace();
  EXPECT_FALSE(
      nlohmann::json::parse(encode_record_json(s))["threading_cost"].contains(
          "placement"));
}

} // namespace
} // namespace torch::autograd::device_logging::detail
