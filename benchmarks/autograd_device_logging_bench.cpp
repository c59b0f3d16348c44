// Overhead benchmark of the autograd device-logging patch.
//
// Built twice from this file: autograd_device_logging_bench (stock torch) and
// autograd_device_logging_bench_patched (the library linked ahead of torch).
// LD_PRELOAD cannot select the library here: under valgrind the preload would
// reach valgrind's launcher, which the library removes it from, and never the
// program. Flags pick the rest of the state:
//   --accelerator=PATH  dlopen the two-device test accelerator first, so the
//                       process has accelerator devices and passes are
//                       classified (without it a CPU-only process skips them);
//   --fire              run one pass across testaccel:0, testaccel:1 and the
//                       CPU first, so both events have fired (wall times);
//                       under --callgrind with an accelerator, every case is
//                       measured before and after firing in one process.
//   --max-nodes=N       leave out graphs larger than N nodes.
// Modes:
//   (default)           Google Benchmark wall times, BM_* below;
//   --callgrind=ITERS   run every case ITERS times with callgrind collection
//                       on only around the measured call, dumping one stats
//                       file per case (CALLGRIND_DUMP_STATS_AT), for
//                       deterministic instruction counts.

#include "autograd_test_graphs.h"

#include <torch/csrc/autograd/graph_task.h>
#include <torch/torch.h>

#include <benchmark/benchmark.h>
#include <valgrind/callgrind.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace dl = torch::autograd::device_logging::testing;

// A graph of about `nodes` autograd nodes with its scalar loss.
struct Graph {
  std::vector<torch::Tensor> leaves;
  torch::Tensor loss;
};

// chain: leaf -> mul -> mul -> ... (one long path).
Graph make_chain(int64_t nodes, c10::Device device) {
  Graph g;
  g.leaves.push_back(torch::ones({1}).requires_grad_());
  torch::Tensor y = g.leaves.back().to(device);
  for (int64_t i = 0; i < nodes - 2; ++i) {
    y = y * 1.0001;
  }
  g.loss = y.sum();
  return g;
}

// wide: the loss stacks (nodes / 2) parallel branches, each a leaf -> mul
// (every leaf its own one-element tensor, so backward stays linear in size).
Graph make_wide(int64_t nodes, c10::Device device) {
  Graph g;
  const int64_t branches = std::max<int64_t>(1, nodes / 2);
  std::vector<torch::Tensor> parts;
  parts.reserve(branches);
  for (int64_t i = 0; i < branches; ++i) {
    g.leaves.push_back(torch::ones({}).requires_grad_());
    parts.push_back(g.leaves.back().to(device) * 2.0);
  }
  g.loss = torch::stack(parts).sum();
  return g;
}

Graph make_graph(const std::string& shape, int64_t nodes, c10::Device device) {
  return shape == "wide" ? make_wide(nodes, device) : make_chain(nodes, device);
}

// Note [The partial pass measured]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// "chain_partial" is the chain walked as torch.autograd.grad(loss, [h]) walks
// it, with h the first node above the leaf: min_topo_nr == 1. Every node but
// the leaf's AccumulateGrad (topological_nr 0, reached and not expanded) is
// expanded and classified, so its per-node figure is that of a partial pass's
// classification (which checks each node's topological_nr) over as many
// nodes as the full chain.
uint64_t min_topo_nr_of(const std::string& shape) {
  return shape == "chain_partial" ? 1 : 0;
}

torch::autograd::Node* root_of(const Graph& g) {
  return g.loss.grad_fn().get();
}

std::string accelerator_path;
bool fire_first = false;
int64_t max_nodes = 100000;

c10::Device graph_device(const std::string& placement) {
  // "cpu" graphs run on the CPU; "testaccel" graphs on testaccel:0.
  return placement == "cpu" ? c10::Device(c10::kCPU)
                            : c10::Device(c10::DeviceType::PrivateUse1, 0);
}

void BM_compute_dependencies(
    benchmark::State& state,
    std::string shape,
    std::string placement) {
  const Graph g = make_graph(shape, state.range(0), graph_device(placement));
  for (auto _ : state) {
    state.PauseTiming();
    auto task = dl::make_graph_task(root_of(g));
    state.ResumeTiming();
    dl::run_bound_compute_dependencies(root_of(g), *task);
    state.PauseTiming();
    task.reset();
    state.ResumeTiming();
  }
  state.counters["nodes"] = static_cast<double>(state.range(0));
}

void BM_backward(
    benchmark::State& state,
    std::string shape,
    std::string placement) {
  const Graph g = make_graph(shape, state.range(0), graph_device(placement));
  for (auto _ : state) {
    g.loss.backward({}, /*retain_graph=*/true);
  }
  state.counters["nodes"] = static_cast<double>(state.range(0));
}

std::vector<int64_t> sizes() {
  std::vector<int64_t> out;
  for (const int64_t nodes : {10, 1000, 100000}) {
    if (nodes <= max_nodes) {
      out.push_back(nodes);
    }
  }
  return out;
}

void register_benchmarks() {
  std::vector<std::string> placements = {"cpu"};
  if (!accelerator_path.empty()) {
    placements.push_back("testaccel");
  }
  using BenchmarkFn = void (*)(benchmark::State&, std::string, std::string);
  const std::pair<const char*, BenchmarkFn> measured[] = {
      {"compute_dependencies/", BM_compute_dependencies},
      {"backward/", BM_backward}};
  for (const std::string shape : {"chain", "wide"}) {
    for (const std::string& placement : placements) {
      for (const auto& [what, fn] : measured) {
        benchmark::RegisterBenchmark(
            (what + shape + "/" + placement).c_str(), fn, shape, placement)
            ->ArgsProduct({sizes()})
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

// Note [Measuring under callgrind]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Engine::compute_dependencies fills hash containers keyed by Node*, so its
// instruction count depends on where the nodes happen to live: two processes
// (stock and patched) differ by several percent for that reason alone, more
// than the overhead being measured. So every figure is taken inside one
// process: the patched binary's own compute_dependencies includes the call of
// libtorch's, and callgrind's inclusive costs of the two give the added
// instructions exactly; "before" and "after" the events fired are measured on
// the same graphs in the same process. One stats dump per case and phase:
// "<what>/<shape>/<placement>/<nodes>/<phase>/x<calls>/n<graph nodes>".
struct Case {
  std::string shape;
  std::string placement;
  int64_t nodes;
  Graph graph;
  uint64_t min_topo_nr = 0;
  // Nodes the walk actually visits, root included: a testaccel graph has a
  // ToCopyBackward per CPU leaf on top of its nominal size.
  size_t graph_nodes = 0;
};

// Note [Each case starts with an uncollected call].
void sort_free_chunks() {
  constexpr size_t kLargerThanAnyFreeChunk = size_t{64} << 20;
  for (int i = 0; i < 64; ++i) {
    void* p = std::malloc(kLargerThanAnyFreeChunk);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}

void measure_cases(
    std::vector<Case>& cases,
    int iterations,
    const std::string& phase) {
  for (Case& c : cases) {
    const int reps = c.nodes >= 100000 ? 1 : iterations;
    const std::string suffix = c.shape + "/" + c.placement + "/" +
        std::to_string(c.nodes) + "/" + phase + "/x" + std::to_string(reps) +
        "/n" + std::to_string(c.graph_nodes);
    // Note [Each case starts with an uncollected call]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // glibc's malloc frees small chunks into fast bins and merges them only
    // when a later large request arrives (malloc_consolidate), which puts the
    // merged chunks on the unsorted list. Any later request that the tcache,
    // fast and small bins cannot serve then sorts up to 10,000 of them into
    // their bins before it returns (MAX_ITERS in malloc.c). The cases before
    // this one may have freed the GraphTask of a 100,000-node graph, leaving
    // some 10^5 chunks to merge and sort, so without work in between the
    // measured calls here would pay for it: in a run with 100,000-node
    // graphs, a 10-node walk read tens of times its own cost per call, almost
    // all of it in _int_malloc, and by amounts that differed between the
    // stock and patched processes. So, outside collection, one call of the
    // case (its own first-call work), then requests too large for any free
    // chunk, each of which sorts its share of the list before mmap serves it:
    // 64 of them sort up to 640,000 chunks, more than any case here leaves.
    {
      auto task = dl::make_graph_task(root_of(c.graph));
      dl::run_bound_compute_dependencies(
          root_of(c.graph), *task, c.min_topo_nr);
    }
    sort_free_chunks();
    CALLGRIND_ZERO_STATS;
    for (int i = 0; i < reps; ++i) {
      auto task = dl::make_graph_task(root_of(c.graph));
      CALLGRIND_TOGGLE_COLLECT;
      dl::run_bound_compute_dependencies(
          root_of(c.graph), *task, c.min_topo_nr);
      CALLGRIND_TOGGLE_COLLECT;
    }
    const std::string deps_case = "compute_dependencies/" + suffix;
    CALLGRIND_DUMP_STATS_AT(deps_case.c_str());
    if (c.placement == "cpu" && c.min_topo_nr == 0) {
      // Backward on the CPU runs on this thread only, so collection around
      // the call covers all of it. It too starts with an uncollected call
      // (Note [Each case starts with an uncollected call]).
      c.graph.loss.backward({}, /*retain_graph=*/true);
      for (int i = 0; i < reps; ++i) {
        CALLGRIND_TOGGLE_COLLECT;
        c.graph.loss.backward({}, /*retain_graph=*/true);
        CALLGRIND_TOGGLE_COLLECT;
      }
      const std::string backward_case = "backward/" + suffix;
      CALLGRIND_DUMP_STATS_AT(backward_case.c_str());
    }
  }
}

void fire_both_events();

void run_under_callgrind(int iterations) {
  std::vector<std::string> placements = {"cpu"};
  if (!accelerator_path.empty()) {
    placements.push_back("testaccel");
  }
  std::vector<Case> cases;
  for (const std::string shape : {"chain", "wide", "chain_partial"}) {
    for (const std::string& placement : placements) {
      for (const int64_t nodes : sizes()) {
        cases.push_back(
            {shape,
             placement,
             nodes,
             make_graph(shape, nodes, graph_device(placement)),
             min_topo_nr_of(shape)});
        // Warm up (first-call binding, thread start, allocator pools).
        auto task = dl::make_graph_task(root_of(cases.back().graph));
        dl::run_bound_compute_dependencies(root_of(cases.back().graph), *task);
        cases.back().graph_nodes = task->nodes_in_graph_.size() + 1;
        cases.back().graph.loss.backward({}, /*retain_graph=*/true);
      }
    }
  }
  measure_cases(cases, iterations, fire_first ? "after" : "before");
  if (!fire_first && !accelerator_path.empty()) {
    fire_both_events();
    measure_cases(cases, iterations, "after");
  }
}

void fire_both_events() {
  const c10::Device d0(c10::DeviceType::PrivateUse1, 0);
  const c10::Device d1(c10::DeviceType::PrivateUse1, 1);
  auto a = torch::ones({2}, torch::requires_grad());
  ((a.to(d0) * 2).sum() + (a.to(d1) * 3).sum().to(d0)).backward();
}

} // namespace

int main(int argc, char** argv) {
  int callgrind_iterations = 0;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--accelerator=", 0) == 0) {
      accelerator_path = arg.substr(std::strlen("--accelerator="));
    } else if (arg.rfind("--max-nodes=", 0) == 0) {
      max_nodes = std::atoll(arg.c_str() + std::strlen("--max-nodes="));
    } else if (arg == "--fire") {
      fire_first = true;
    } else if (arg.rfind("--callgrind=", 0) == 0) {
      callgrind_iterations =
          std::atoi(arg.c_str() + std::strlen("--callgrind="));
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (!accelerator_path.empty() &&
      dlopen(accelerator_path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(
        stderr, "cannot load %s: %s\n", accelerator_path.c_str(), dlerror());
    return 2;
  }
  if (fire_first && accelerator_path.empty()) {
    std::fprintf(stderr, "--fire needs --accelerator\n");
    return 2;
  }
  if (callgrind_iterations > 0) {
    run_under_callgrind(callgrind_iterations);
    return 0;
  }
  if (fire_first) {
    fire_both_events();
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  register_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
