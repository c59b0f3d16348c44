#include "autograd_test_graphs.h"

#include <torch/csrc/autograd/backward_device_classifier.h>

#include <torch/version.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Logging.h>

#include <dlfcn.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace torch::autograd {

namespace utils {
// libtorch does not export DelayWarningHandler's key function, so its vtable
// (needed by every GraphTask, whose warning_handler_ it is) is emitted here.
// GraphTasks made by the tests are never executed and record no warnings.
void DelayWarningHandler::process(const c10::Warning& warning) {
  std::lock_guard<std::mutex> lock(mutex_);
  warnings_.push_back(warning);
}
} // namespace utils

// libtorch defines GraphTask's constructor in engine.cpp without exporting
// it (from 2.3 on; before, graph_task.h defines it inline); this definition,
// local to the test library, initializes the members compute_dependencies
// and the classifier use the way the engine does.
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
GraphTask::GraphTask(
    bool keep_graph,
    bool /*grad_mode*/,
    int reentrant_depth,
    std::shared_ptr<ReadyQueue> cpu_ready_queue,
    c10::SmallVector<Node*, 4> graph_roots,
    bool exit_on_error)
    : keep_graph_(keep_graph),
      graph_roots_(std::move(graph_roots)),
      owner_(NO_DEVICE),
      reentrant_depth_(reentrant_depth),
      exit_on_error_(exit_on_error),
      cpu_ready_queue_(std::move(cpu_ready_queue)),
      id_(0) {}
#endif

namespace device_logging::testing {

namespace {
// A device guard that serves metadata, not devices: it hands out default
// streams (InputMetadata asks for one) and reports `count` devices. No guard
// is ever taken on a test node.
struct FakeDeviceGuardImpl final : c10::impl::DeviceGuardImplInterface {
  FakeDeviceGuardImpl(c10::DeviceType type, c10::DeviceIndex count)
      : type_(type), count_(count) {}
  c10::DeviceType type() const override {
    return type_;
  }
  c10::Device exchangeDevice(c10::Device device) const override {
    return device;
  }
  c10::Device getDevice() const override {
    return c10::Device(type_, 0);
  }
  void setDevice(c10::Device /*device*/) const override {}
  void uncheckedSetDevice(c10::Device /*device*/) const noexcept override {}
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    return stream;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return count_;
  }

 private:
  c10::DeviceType type_;
  c10::DeviceIndex count_;
};

// Registers (or replaces) the device guard of `type`. Through the registrar,
// which every 2.x release has (c10::impl::registerDeviceGuard came later).
void register_device_guard(
    c10::DeviceType type,
    const c10::impl::DeviceGuardImplInterface* impl) {
  c10::impl::DeviceGuardImplRegistrar registrar(type, impl);
  (void)registrar;
}

// add_input_metadata's arguments grew over the releases (2.0 lacks
// `is_nested`, newer ones add `grad_dtype`): a call with what this one takes.
template <typename N, typename Args, typename = void>
struct TakesMetadataArgs : std::false_type {};
template <typename N, typename... Args>
struct TakesMetadataArgs<
    N,
    std::tuple<Args...>,
    std::void_t<decltype(std::declval<N&>().add_input_metadata(
        std::declval<Args>()...))>> : std::true_type {};

// (options, sizes, is_tensor_subclass, is_nested[, grad_dtype])
template <typename... More>
using MetadataArgs = std::
    tuple<const at::TensorOptions&, c10::SymIntArrayRef, bool, bool, More...>;

template <typename N>
void add_sized_input(N& node, const at::TensorOptions& options) {
  const c10::SymInt one(1);
  if constexpr (TakesMetadataArgs<N, MetadataArgs<std::nullopt_t>>::value) {
    node.add_input_metadata(
        options,
        c10::SymIntArrayRef(&one, 1),
        /*is_tensor_subclass=*/false,
        /*is_nested=*/false,
        /*grad_dtype=*/std::nullopt);
  } else if constexpr (TakesMetadataArgs<N, MetadataArgs<>>::value) {
    node.add_input_metadata(
        options,
        c10::SymIntArrayRef(&one, 1),
        /*is_tensor_subclass=*/false,
        /*is_nested=*/false);
  } else {
    node.add_input_metadata(
        options, c10::SymIntArrayRef(&one, 1), /*is_tensor_subclass=*/false);
  }
}

// Metadata naming CUDA or XPU devices needs a guard for the type, which a
// CPU-only process lacks (and a real one would reject devices it does not
// have). These report no devices, so by themselves they leave the process
// without accelerators.
void register_metadata_only_devices() {
  static const bool registered = [] {
    for (const auto type : {c10::DeviceType::CUDA, c10::DeviceType::XPU}) {
      register_device_guard(type, new FakeDeviceGuardImpl(type, 0));
    }
    return true;
  }();
  (void)registered;
}
} // namespace

DeviceTestNode::DeviceTestNode(std::initializer_list<c10::Device> devices) {
  for (const c10::Device& device : devices) {
    add_device_input(*this, device);
  }
}

void add_device_input(Node& node, c10::Device device) {
  register_metadata_only_devices();
  add_sized_input(node, at::TensorOptions().device(device).dtype(at::kFloat));
}

variable_list DeviceTestNode::apply(variable_list&& /*grads*/) {
  throw std::logic_error("DeviceTestNode is never executed");
}

namespace {
template <typename Ptr>
Ptr make_device_test_node(std::initializer_list<c10::Device> input_devices) {
  if constexpr (std::is_same_v<Ptr, std::shared_ptr<Node>>) {
    return std::make_shared<DeviceTestNode>(input_devices);
  } else {
    return c10::make_intrusive<DeviceTestNode>(input_devices);
  }
}
} // namespace

NodePtr make_node(std::initializer_list<c10::Device> input_devices) {
  register_metadata_only_devices();
  return make_device_test_node<NodePtr>(input_devices);
}

void connect(const NodePtr& parent, const NodePtr& child) {
  parent->add_next_edge(Edge(child, 0));
}

std::unique_ptr<GraphTask> make_graph_task(Node* root) {
  return std::make_unique<GraphTask>(
      /*keep_graph=*/true,
      /*grad_mode=*/false,
      /*reentrant_depth=*/0,
      /*cpu_ready_queue=*/nullptr,
      c10::SmallVector<Node*, 4>{root});
}

namespace {
// clang-format off
constexpr const char* kSymbol =
    "_ZN5torch8autograd6Engine20compute_dependenciesEPNS0_4NodeERNS0_9GraphTaskEm";
// clang-format on

// Resolved once: the binding does not change within a process.
void* bound_compute_dependencies() {
  static void* const fn = dlsym(RTLD_DEFAULT, kSymbol);
  if (fn == nullptr) {
    throw std::runtime_error("Engine::compute_dependencies not found");
  }
  return fn;
}
} // namespace

void run_bound_compute_dependencies(
    Node* root,
    GraphTask& task,
    uint64_t min_topo_nr) {
  const auto fn =
      reinterpret_cast<ComputeDependenciesFn>(bound_compute_dependencies());
  fn(&Engine::get_default_engine(), root, task, min_topo_nr);
}

std::string bound_compute_dependencies_path() {
  Dl_info info{};
  if (dladdr(bound_compute_dependencies(), &info) == 0 ||
      info.dli_fname == nullptr) {
    return {};
  }
  return info.dli_fname;
}

void register_two_test_devices() {
  static FakeDeviceGuardImpl impl(c10::DeviceType::PrivateUse1, 2);
  register_device_guard(c10::DeviceType::PrivateUse1, &impl);
}

namespace {
// Leaked: the engine logs events while the process exits (after static
// destructors have run), and the logger must still find its storage.
std::mutex& recorder_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}
std::vector<std::string>& recorded_events() {
  static auto* events = new std::vector<std::string>();
  return *events;
}
} // namespace

ApiUsageRecorder::ApiUsageRecorder() {
  c10::SetAPIUsageLogger([](const std::string& event) {
    if (event == kMultiDeviceBackwardEventName ||
        event == kGpuCpuBackwardEventName) {
      std::lock_guard<std::mutex> lock(recorder_mutex());
      recorded_events().push_back(event);
    }
  });
}

std::vector<std::string> ApiUsageRecorder::events() const {
  std::lock_guard<std::mutex> lock(recorder_mutex());
  return recorded_events();
}

size_t ApiUsageRecorder::count(const std::string& event) const {
  const auto all = events();
  return static_cast<size_t>(std::count(all.begin(), all.end(), event));
}

size_t count_inputs_whose_stream_device_differs(
    const at::Tensor& output,
    size_t* inputs_read) {
  size_t differing = 0;
  *inputs_read = 0;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  if (output.grad_fn()) {
    stack.push_back(output.grad_fn().get());
    seen.insert(stack.back());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (uint32_t i = 0; i < node->num_inputs(); ++i) {
      const InputMetadata& metadata = node->input_metadata(i);
      ++*inputs_read;
      if (metadata.stream().device() != metadata.device()) {
        ++differing;
      }
    }
    for (const Edge& edge : node->next_edges()) {
      Node* next = edge.function.get();
      if (next != nullptr && seen.insert(next).second) {
        stack.push_back(next);
      }
    }
  }
  return differing;
}

c10::Device cpu() {
  return c10::Device(c10::DeviceType::CPU);
}
c10::Device cuda(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::CUDA, index);
}
c10::Device xpu(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::XPU, index);
}
c10::Device meta() {
  return c10::Device(c10::DeviceType::Meta);
}
c10::Device lazy() {
  return c10::Device(c10::DeviceType::Lazy);
}

} // namespace device_logging::testing
} // namespace torch::autograd
