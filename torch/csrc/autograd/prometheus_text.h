#pragma once

// The process's counts in Prometheus's text exposition format, for
// node_exporter's textfile collector (Note [The Prometheus textfile]), from a
// snapshot (Note [One snapshot, several encodings], process_snapshot.h).

#include <torch/csrc/autograd/process_snapshot.h>

#include <string>

namespace torch::autograd::device_logging::detail {

// Note [The Prometheus textfile]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With AUTOGRAD_DEVICE_LOGGING_PROMETHEUS_DIR=D, each process that runs a
// backward pass keeps one file in D that node_exporter serves with
// --collector.textfile.directory=D. Its families (metric_families.py spells
// them for Python; a fleet report's --prometheus writes them as _fleet_):
//   autograd_device_logging_info{training_job,rank,torch,...} 1
//   autograd_device_logging_backward_passes_total{training_job,rank,class}
//       (where the statistics are on)
//   autograd_device_logging_events_total{training_job,rank,event}  (0 or 1)
//   autograd_device_logging_threading_cost_pairs_total{training_job,...}
//   autograd_device_logging_threading_cost_multithreaded_seconds_total{...}
//   autograd_device_logging_threading_cost_single_threaded_seconds_total{...}
//       (where the threading-cost measurement is on)
// Labels are bounded: training_job, rank (left out where RANK is unset),
// class, event, and in _info the releases and on/off words; never a pid, a
// path or a time. The job is not `job`: Prometheus gives every scraped
// series the scrape's own job and instance, and under its default
// honor_labels: false renames a target's `job` to `exported_job`, so that
// `sum by (job)` would group by the exporter instead. The file's name is a
// function of (job, rank) alone, so a restarted rank replaces its file instead
// of adding one, and no two files can hold the same series (which would fail
// node_exporter's whole scrape). That is also why a process that never ran a
// backward pass (a DataLoader worker, a compile worker, torchrun's agent: they
// inherit their rank's RANK) writes none: it would replace its rank's counts
// with zeros. Two processes of one job on one host that both run backward under
// the same rank (or both without RANK) share one file, and the last write wins;
// the JSON record keeps both. Files stay after their process exits (a finished
// job's last counts); docs/usage.md says how to clean them up. The file is
// written like the record (Note [The record is written off the backward path],
// record_writer.h), by the writer thread, through a temporary created
// exclusively in D itself (`.autograd_device_logging-HOST-PID.*.tmp`, which
// the collector ignores), so that D holds nothing else.

// The file's text: HELP and TYPE once per family, a trailing newline.
// Throws std::bad_alloc only.
std::string encode_prometheus_text(const ProcessSnapshot& snapshot);

// The file's name in D: "autograd_device_logging-JOB[-rankRANK]-HASH.prom",
// JOB and RANK reduced to [A-Za-z0-9_.-], HASH from the exact job and rank.
std::string prometheus_file_name(const ProcessSnapshot& snapshot);

} // namespace torch::autograd::device_logging::detail
