#pragma once

// The process's outputs as sinks of one writer: the record, the Prometheus
// textfile and the followers (the Python package's OTLP export).

#include <chrono>
#include <cstdint>
#include <string>

namespace torch::autograd::device_logging::detail {

// Note [Every output is a sink of one writer]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A write takes one snapshot of the process (process_snapshot.h) and hands
// it to every armed sink, each of which is a row of kSinks (output_sinks.cpp):
// its file's name, encode(snapshot), and where its temporaries go. The
// record is JSON (record_json.h), the textfile Prometheus text
// (prometheus_text.h), and the followers get the same JSON in memory
// (followers_json()), so that the OTLP export encodes the snapshot the files
// were written from and takes none of its own. A new output is one encoder
// and one row. Which sinks a write serves: a refresh the textfile alone
// (Note [The textfile is refreshed on an interval], record_writer.h), a
// followers' write the followers alone, any other occasion every armed one.
enum class Sink : uint8_t { kRecord, kPrometheusTextfile, kFollowers };

// Why a write is made: the record's written_at. One write that serves
// several names the first of exit, explicit, event, measurement, first_pass.
enum RecordOccasion : uint8_t {
  kRecordAtFirstPass = 1u << 0,
  kRecordAtMeasurement = 1u << 1,
  kRecordAtEvent = 1u << 2,
  kRecordExplicit = 1u << 3,
  kRecordAtExit = 1u << 4,
  // The writer thread's own, every refresh interval: the textfile alone.
  kRecordTextfileRefresh = 1u << 5,
  // A follower's own write (follow_record_writes): the followers alone.
  kRecordForFollowers = 1u << 6,
};

// The record's written_at for a set of RecordOccasion bits.
const char* record_occasion_name(uint32_t occasions) noexcept;

// Arms `sink` into `dir` ("" disarms it; the followers take any non-empty
// text). Returns whether any sink is armed now.
bool set_sink_destination(Sink sink, const std::string& dir);

// Whether the record sink is armed (for the exit warning's wording).
bool record_sink_armed();

// One snapshot, encoded into every sink that `occasions` serves; false when
// one of them failed (after one warning per sink and process). The writer
// thread's, never a thread that runs backward.
bool write_sinks(uint32_t occasions) noexcept;

// The JSON of the last write that served the followers; "" before one.
std::string followers_json();

// Keeps the sinks' lock usable in a child after fork() (pthread_atfork).
void lock_sinks_for_fork();
void unlock_sinks_after_fork();

} // namespace torch::autograd::device_logging::detail
