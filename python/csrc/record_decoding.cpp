// The fleet report's decoding of a record in compiled code: the values of its
// measured pairs (Note [The pairs' values in compiled code]) and, for a
// record of the plain shape the library writes, every field the report reads
// (Note [A record's fields in compiled code]), both in record_decoder.py. A
// CPython extension of its own: the report loads neither torch nor the
// library, so this links neither.

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "part_checksum.h"
#include "python_reference.h"
#include "record_file_reading.h"

#include <marshal.h>
#include <simdjson.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Each of a pair's durations, and their difference, is an integer a double
// holds exactly up to here; then a ratio and a median below are the very
// doubles cost_statistics.process_value's int arithmetic gives.
constexpr uint64_t kExactInDouble = uint64_t{1} << 53;

struct Scratch {
  simdjson::dom::parser parser;
  std::string padded;
  std::vector<double> ratios;
  std::vector<int64_t> differences;
  // The classes met, with their interned str (class_name).
  std::vector<std::pair<std::string, PyObject*>> class_names;
  // Whether the shared strs are interned (Note [A part's strings are not
  // interned]).
  bool interning = true;
};

// At most this many class names are kept: a fleet has a few.
constexpr size_t kClassNamesKept = 16;

using autograd_device_logging_report::Crc32Function;
using autograd_device_logging_report::files_read_later;
using autograd_device_logging_report::libdeflate_crc32;
using autograd_device_logging_report::mtime_ns_of;
using autograd_device_logging_report::read_record_files;
using autograd_device_logging_report::RecordFile;
using autograd_device_logging_report::Ref;

// The CRC-32 of a part: libdeflate's where the machine has it, else zlib's,
// the same value (Note [The cache's CRC-32 from libdeflate],
// part_checksum.h).
uLong crc32_of(const char* data, size_t length) {
  if (const Crc32Function fast = libdeflate_crc32()) {
    return fast(0, data, length);
  }
  return crc32(
      crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), uInt(length));
}

Scratch& scratch() {
  // Used only with the GIL held (nothing here releases it).
  static Scratch s;
  return s;
}

// Note [The middle of a few values, without branches]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A record's value is two medians of its pairs (cost_statistics.
// process_value). std::nth_element's comparisons branch on the data, and
// about half of them were mispredicted: at 64 pairs the two took about
// 1.3 us of a record's 4.8 us of decoding. A Lomuto partition that swaps
// every element and moves its boundary by the comparison (0 or 1) runs
// without a branch on the data: 0.55 us for both, and decoding a record
// took 3.75 us (the benchmark's profile()). Between partitions, everything
// before the range is at most everything in it, and everything after at
// least, so it ends as nth_element does (the k-th smallest at k, nothing
// larger before it) and the medians are the same values, to the bit. Many
// equal values make each partition split off one (quadratic), so it takes
// at most kFewValues values, and nth_element the rest (a class may hold
// 10000 pairs).
constexpr size_t kFewValues = 128;

template <typename T>
void put_kth_smallest(std::vector<T>& values, size_t k) {
  if (values.size() > kFewValues) {
    std::nth_element(values.begin(), values.begin() + k, values.end());
    return;
  }
  T* a = values.data();
  size_t low = 0, high = values.size();
  while (high - low > 1) {
    // The middle element as the pivot, moved last.
    std::swap(a[low + (high - low) / 2], a[high - 1]);
    const T pivot = a[high - 1];
    size_t below = low;
    for (size_t i = low; i + 1 < high; ++i) {
      const T x = a[i];
      a[i] = a[below];
      a[below] = x;
      below += static_cast<size_t>(x < pivot);
    }
    std::swap(a[below], a[high - 1]);
    if (k == below) {
      return;
    }
    if (k < below) {
      high = below;
    } else {
      low = below + 1;
    }
  }
}

// cost_statistics.process_value of the pairs in `ratios`/`differences`: the
// same middle elements, found by selection rather than a full sort.
void median_values(Scratch& s, double* percent, double* difference) {
  auto& r = s.ratios;
  auto& d = s.differences;
  const size_t n = r.size();
  const size_t m = n / 2;
  put_kth_smallest(r, m);
  put_kth_smallest(d, m);
  if (n % 2) {
    *percent = 100.0 * r[m];
    *difference = static_cast<double>(d[m]);
  } else {
    // The largest of those below the middle is the (m - 1)-th smallest.
    const double r_low = *std::max_element(r.begin(), r.begin() + m);
    const int64_t d_low = *std::max_element(d.begin(), d.begin() + m);
    *percent = 50.0 * (r_low + r[m]);
    *difference = static_cast<double>(d_low + d[m]) / 2.0;
  }
}

// The interned str of the class `name` (a new reference; nullptr with an
// exception set): made once for each of the first kClassNamesKept names,
// which every record repeats.
PyObject* class_name(Scratch& s, std::string_view name) {
  for (const auto& [text, object] : s.class_names) {
    if (text == name) {
      Py_INCREF(object);
      return object;
    }
  }
  PyObject* key = PyUnicode_DecodeUTF8(name.data(), name.size(), nullptr);
  if (key == nullptr) {
    return nullptr;
  }
  // Shared, as the names in record_fields below.
  PyUnicode_InternInPlace(&key);
  if (s.class_names.size() < kClassNamesKept) {
    Py_INCREF(key); // kept for the process's life, as the interned str is
    s.class_names.emplace_back(std::string(name), key);
  }
  return key;
}

// Fills `out` with {class: (percent, difference in ns, pairs)} for each
// class with pairs, as record_decoder's Python path does; false to leave the
// record to that path: anything but classes of [off, on] pairs of integers
// from 1 to 2^53, at most `max_pairs` of them, each class named once.
bool values_of(
    Scratch& s,
    simdjson::dom::element root,
    size_t max_pairs,
    PyObject* out) {
  simdjson::dom::object classes;
  if (root.get_object().get(classes)) {
    return false;
  }
  // The names met: a record has a few classes.
  std::vector<std::string_view> seen;
  for (auto [name, value] : classes) {
    simdjson::dom::array pairs;
    if (value.get_array().get(pairs) || pairs.size() > max_pairs) {
      return false;
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      // A class named twice: which pairs count is the Python path's call.
      return false;
    }
    seen.push_back(name);
    s.ratios.clear();
    s.differences.clear();
    for (simdjson::dom::element item : pairs) {
      simdjson::dom::array pair;
      if (item.get_array().get(pair)) {
        return false;
      }
      // Exactly two elements, walked once.
      auto at = pair.begin();
      const auto end = pair.end();
      uint64_t off = 0, on = 0;
      if (at == end || (*at).get_uint64().get(off) || ++at == end ||
          (*at).get_uint64().get(on) || ++at != end || off < 1 || on < 1 ||
          off > kExactInDouble || on > kExactInDouble) {
        return false;
      }
      const int64_t d = static_cast<int64_t>(off) - static_cast<int64_t>(on);
      s.differences.push_back(d);
      s.ratios.push_back(static_cast<double>(d) / static_cast<double>(on));
    }
    const Ref key(class_name(s, name));
    if (key.p == nullptr) {
      return false;
    }
    if (!s.ratios.empty()) {
      double percent = 0, difference = 0;
      median_values(s, &percent, &difference);
      const Ref v(PyTuple_New(3));
      if (v.p == nullptr) {
        return false;
      }
      PyObject* items[] = {
          PyFloat_FromDouble(percent),
          PyFloat_FromDouble(difference),
          PyLong_FromSsize_t(Py_ssize_t(s.ratios.size()))};
      for (int i = 0; i < 3; ++i) {
        if (items[i] == nullptr) {
          for (PyObject* item : items) {
            Py_XDECREF(item);
          }
          return false;
        }
      }
      for (int i = 0; i < 3; ++i) {
        PyTuple_SET_ITEM(v.p, i, items[i]);
      }
      if (PyDict_SetItem(out, key.p, v.p) != 0) {
        return false;
      }
    }
  }
  return true;
}

// Parses `text` into the scratch parser; false for what is not JSON.
bool parse(Scratch& s, std::string_view text, simdjson::dom::element* root) {
  s.padded.assign(text.data(), text.size());
  s.padded.append(simdjson::SIMDJSON_PADDING, ' ');
  return !s.parser.parse(s.padded.data(), text.size(), false).get(*root);
}

// --- A record's fields (Note [A record's fields in compiled code]) ----------

// What record_decoder tells it once, from record_fields: the known events
// (event i is bit 1 << i), the known classes in their order, and the most
// pairs a class may hold.
struct Vocabulary {
  std::vector<std::string> events;
  std::vector<std::string> classes;
  size_t max_pairs = 0;
  bool set = false;
};

Vocabulary& vocabulary() {
  static Vocabulary v;
  return v;
}

constexpr int64_t kMaxCount = INT64_MAX;

// Thrown by the checks below for anything but the plain shape; caught in
// record_fields, which then leaves the record to the Python path.
struct NotPlain {};

void require(bool ok) {
  if (!ok) {
    throw NotPlain{};
  }
}

std::string_view string_of(simdjson::dom::element e) {
  std::string_view v;
  require(!e.get_string().get(v));
  return v;
}

int64_t count_of(simdjson::dom::element e) {
  // A JSON integer from 0 to 2^63 - 1: what msgspec's typed decoding takes
  // as a count (a float, even a whole one, is the Python path's call).
  int64_t v = 0;
  require(e.is_int64() && !e.get_int64().get(v) && v >= 0 && v <= kMaxCount);
  return v;
}

bool bool_of(simdjson::dom::element e) {
  bool v = false;
  require(!e.get_bool().get(v));
  return v;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// record_fields.READABLE_SCHEMA, without the trailing newline that Python's
// `$` lets through (left to the Python path).
bool readable_schema(std::string_view v) {
  if (v.size() < 3 || v[0] != '2' || v[1] != '.') {
    return false;
  }
  const std::string_view minor = v.substr(2);
  if (minor == "0") {
    return true;
  }
  if (minor.size() > 9 || minor[0] < '1' || minor[0] > '9') {
    return false;
  }
  return std::all_of(minor.begin(), minor.end(), is_digit);
}

// record_fields.START_TIME: YYYY-MM-DDTHH:MM:SSZ, digits where the pattern
// has them.
bool start_time(std::string_view v) {
  static constexpr char kShape[] = "0000-00-00T00:00:00Z";
  if (v.size() != sizeof(kShape) - 1) {
    return false;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (kShape[i] == '0' ? !is_digit(v[i]) : v[i] != kShape[i]) {
      return false;
    }
  }
  return true;
}

// record_fields.CPU_LIST: empty, or ranges "a" or "a-b" joined by commas.
bool cpu_list(std::string_view v) {
  size_t i = 0;
  const size_t n = v.size();
  if (n == 0) {
    return true;
  }
  while (true) {
    const size_t start = i;
    while (i < n && is_digit(v[i])) {
      ++i;
    }
    if (i == start) {
      return false;
    }
    if (i < n && v[i] == '-') {
      const size_t after = ++i;
      while (i < n && is_digit(v[i])) {
        ++i;
      }
      if (i == after) {
        return false;
      }
    }
    if (i == n) {
      return true;
    }
    if (v[i] != ',') {
      return false;
    }
    ++i;
  }
}

PyObject* new_str(std::string_view v) {
  PyObject* s = PyUnicode_DecodeUTF8(v.data(), Py_ssize_t(v.size()), nullptr);
  if (s == nullptr) {
    PyErr_Clear();
    throw NotPlain{};
  }
  return s;
}

// A string many records share (a job, a host, a role, a release, a class):
// one object for all of them, so that the counts, the cache's parts and
// marshal's copy of them (which writes a shared object once) hold it once.
//
// Note [The strings met last are kept]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Making the str and finding it among the interned ones (a dict of every job
// and host met) cost about a tenth of a record's decoding, and most records
// name a role and a release that the record before named too. So the
// interned str of each value is kept in one of kSharedKept slots (by its
// hash) until another value takes the slot: a value met again is one
// comparison of its bytes. The kept strs stay alive while kept (a few).
constexpr size_t kSharedKept = 64;

struct SharedStr {
  std::string text;
  PyObject* str = nullptr;
};

//
// Note [A part's strings are not interned]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A record kept as its part (keep_records) is written in marshal and let
// go at once, so interning its strings only costs: finding each among the
// interned ones (a dict of every job and host met, a twentieth of reading a
// record at 10^6 records), and marshal marks an interned str so that
// loading the part interns it again (0.66 against 0.45 us a part). So
// keep_records makes them plain strs (kept in slots of their own), and
// what counts them compares jobs by value (record_counting.cpp).
PyObject* shared_str(std::string_view v) {
  // Used only with the GIL held (nothing here releases it).
  static SharedStr kept[2][kSharedKept];
  const bool interning = scratch().interning;
  SharedStr& slot =
      kept[interning][std::hash<std::string_view>{}(v) % kSharedKept];
  if (slot.str != nullptr && slot.text == v) {
    Py_INCREF(slot.str);
    return slot.str;
  }
  PyObject* s = new_str(v);
  if (interning) {
    PyUnicode_InternInPlace(&s);
  }
  Py_CLEAR(slot.str);
  try {
    slot.text.assign(v.data(), v.size());
  } catch (const std::bad_alloc&) {
    Py_DECREF(s);
    throw;
  }
  Py_INCREF(s);
  slot.str = s;
  return s;
}

// One field of an object, each name at most once: a name given twice is
// the Python path's call (which of the two counts).
struct Fields {
  uint64_t seen = 0;
  bool first(int field) {
    const uint64_t bit = uint64_t{1} << field;
    require(!(seen & bit));
    seen |= bit;
    return true;
  }
};

// Which of `names` `name` is; -1 for none. The names are string_views, whose
// lengths are known: comparing a length first rules most out.
template <size_t N>
int field_of(std::string_view name, const std::string_view (&names)[N]) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) {
      return int(i);
    }
  }
  return -1;
}

enum RecordField {
  kSchema,
  kHost,
  kPid,
  kStartTime,
  kProgram,
  kJob,
  kJobSource,
  kRole,
  kRank,
  kTorch,
  kEvents,
  kEventsLoggedBy,
  kRanBackward,
  kPassesClassified,
  kDisabledReason,
  kPassClasses,
  kRequired, // the fields above must be there
  kThreadingCost = kRequired,
  kTime,
  kLibraryVersion,
  kActivatedBy,
  kWrittenAt,
  kAccelerators,
  kParent,
  kCallingThread,
  kRecordFields,
};

constexpr std::string_view kRecordNames[kRecordFields] = {
    "schema",
    "host",
    "pid",
    "start_time",
    "program",
    "job",
    "job_source",
    "role",
    "rank",
    "torch",
    "events",
    "events_logged_by",
    "ran_backward",
    "passes_classified",
    "disabled_reason",
    "pass_classes",
    "threading_cost",
    "time",
    "library_version",
    "activated_by",
    "written_at",
    "accelerators",
    "parent",
    "calling_thread",
};

// The Record's fields (record_fields.Record.__slots__), owned.
struct Decoded {
  Ref threading_cost{nullptr}, job{nullptr}, host{nullptr}, pid{nullptr},
      parent{nullptr}, rank{nullptr}, role{nullptr}, start_time{nullptr},
      events{nullptr}, other_events{nullptr}, ran_backward{nullptr},
      pass_classes{nullptr}, other_classes{nullptr}, torch{nullptr},
      disabled_reason{nullptr}, placement{nullptr};
};

// Where the job is in the fields tuple (file_index.JOB), and how many
// fields it has (record_fields.Record.__slots__).
constexpr Py_ssize_t kJobSlot = 1;
constexpr size_t kRecordSlots = 16;

PyObject* owned(PyObject* o) {
  if (o == nullptr) {
    throw std::bad_alloc();
  }
  return o;
}

PyObject* none() {
  Py_INCREF(Py_None);
  return Py_None;
}

void set(Ref& field, PyObject* value) {
  Py_XDECREF(field.p);
  field.p = owned(value);
}

void torch_of(simdjson::dom::element e, Decoded& d) {
  simdjson::dom::object torch;
  require(!e.get_object().get(torch));
  Fields fields;
  static constexpr std::string_view kNames[] = {"running", "built_for"};
  for (auto [name, value] : torch) {
    const int field = field_of(name, kNames);
    if (field < 0) {
      continue;
    }
    fields.first(field);
    const std::string_view v = string_of(value);
    if (field == 0) {
      set(d.torch, shared_str(v));
    }
  }
  require(fields.seen & 1);
}

void events_of(simdjson::dom::element e, Decoded& d) {
  simdjson::dom::array events;
  require(!e.get_array().get(events));
  const auto& known = vocabulary().events;
  long bits = 0;
  for (simdjson::dom::element event : events) {
    const std::string_view name = string_of(event);
    size_t i = 0;
    while (i < known.size() && known[i] != name) {
      ++i;
    }
    // An event by name only (a newer minor version's), or one given twice:
    // the Python path's.
    require(i < known.size() && !(bits & (1L << i)));
    bits |= 1L << i;
  }
  set(d.events, PyLong_FromLong(bits));
  set(d.other_events, PyTuple_New(0));
}

void pass_classes_of(simdjson::dom::element e, Decoded& d) {
  set(d.other_classes, none());
  if (e.is_null()) {
    set(d.pass_classes, none());
    return;
  }
  simdjson::dom::object classes;
  require(!e.get_object().get(classes));
  const auto& known = vocabulary().classes;
  std::vector<int64_t> counts(known.size(), -1);
  for (auto [name, value] : classes) {
    size_t i = 0;
    while (i < known.size() && known[i] != name) {
      ++i;
    }
    // A class by name only, or one given twice: the Python path's.
    require(i < known.size() && counts[i] < 0);
    counts[i] = count_of(value);
  }
  Ref tuple(owned(PyTuple_New(Py_ssize_t(known.size()))));
  for (size_t i = 0; i < known.size(); ++i) {
    require(counts[i] >= 0);
    PyTuple_SET_ITEM(
        tuple.p, Py_ssize_t(i), owned(PyLong_FromLongLong(counts[i])));
  }
  set(d.pass_classes, tuple.release());
}

void counts_of(simdjson::dom::element e) {
  simdjson::dom::object counts;
  require(!e.get_object().get(counts));
  for (auto [name, value] : counts) {
    (void)name;
    count_of(value);
  }
}

double number_of(simdjson::dom::element e) {
  double v = 0;
  // (is_double() holds for any number: simdjson converts integers.)
  if (e.type() == simdjson::dom::element_type::DOUBLE) {
    require(!e.get_double().get(v));
  } else {
    // An integer: exactly a double below 2^53, as msgspec's float has it.
    int64_t i = 0;
    require(
        e.is_int64() && !e.get_int64().get(i) && i >= -(int64_t{1} << 53) &&
        i <= (int64_t{1} << 53));
    v = static_cast<double>(i);
  }
  return v;
}

void placement_of(simdjson::dom::element e, Decoded& d) {
  simdjson::dom::object placement;
  require(!e.get_object().get(placement));
  Fields fields;
  static constexpr std::string_view kNames[] = {
      "threads", "cpu_quota", "intra_op_threads"};
  Ref affinities(nullptr);
  Ref quota(nullptr);
  for (auto [name, value] : placement) {
    const int field = field_of(name, kNames);
    if (field < 0) {
      continue;
    }
    fields.first(field);
    if (field == 0) {
      simdjson::dom::object threads;
      require(!value.get_object().get(threads));
      std::vector<std::string_view> names;
      set(affinities, PyTuple_New(Py_ssize_t(threads.size())));
      Py_ssize_t i = 0;
      for (auto [thread_name, thread] : threads) {
        // A thread named twice: the Python path's (which entry counts).
        require(
            std::find(names.begin(), names.end(), thread_name) == names.end());
        names.push_back(thread_name);
        simdjson::dom::object t;
        require(!thread.get_object().get(t));
        Fields thread_fields;
        static constexpr std::string_view kThreadNames[] = {
            "affinity", "ran_on"};
        std::string_view affinity;
        for (auto [key, v] : t) {
          const int f = field_of(key, kThreadNames);
          if (f < 0) {
            continue;
          }
          thread_fields.first(f);
          const std::string_view list = string_of(v);
          require(cpu_list(list));
          if (f == 0) {
            affinity = list;
          }
        }
        require(thread_fields.seen == 3);
        PyTuple_SET_ITEM(affinities.p, i++, new_str(affinity));
      }
    } else if (field == 1) {
      if (value.is_null()) {
        set(quota, none());
      } else {
        const double q = number_of(value);
        require(q > 0);
        set(quota, PyFloat_FromDouble(q));
      }
    } else {
      int64_t threads = 0;
      require(
          value.is_int64() && !value.get_int64().get(threads) && threads >= -1);
    }
  }
  require(fields.seen == 7);
  set(d.placement, Py_BuildValue("(OO)", affinities.p, quota.p));
}

void threading_cost_of(Scratch& s, simdjson::dom::element e, Decoded& d) {
  set(d.placement, none());
  if (e.is_null()) {
    set(d.threading_cost, none());
    return;
  }
  simdjson::dom::object cost;
  require(!e.get_object().get(cost));
  Fields fields;
  static constexpr std::string_view kNames[] = {
      "pairs",
      "not_sampled",
      "discarded",
      "rate",
      "warmup",
      "max_pairs",
      "washout",
      "placement"};
  for (auto [name, value] : cost) {
    const int field = field_of(name, kNames);
    if (field < 0) {
      continue;
    }
    fields.first(field);
    switch (field) {
      case 0: {
        Ref values(owned(PyDict_New()));
        require(values_of(s, value, vocabulary().max_pairs, values.p));
        set(d.threading_cost, values.release());
        break;
      }
      case 1:
      case 2:
        counts_of(value);
        break;
      case 3: {
        const double rate = number_of(value);
        require(rate >= 0 && rate <= 1);
        break;
      }
      case 7:
        placement_of(value, d);
        break;
      default:
        count_of(value);
    }
  }
  require((fields.seen & 7) == 7);
}

PyObject* parent_of(simdjson::dom::element e) {
  simdjson::dom::object parent;
  require(!e.get_object().get(parent));
  Fields fields;
  static constexpr std::string_view kNames[] = {"pid", "start_time"};
  Ref pid(nullptr), started(nullptr);
  for (auto [name, value] : parent) {
    const int field = field_of(name, kNames);
    if (field < 0) {
      continue;
    }
    fields.first(field);
    if (field == 0) {
      set(pid, PyLong_FromLongLong(count_of(value)));
    } else if (value.is_null()) {
      set(started, none());
    } else {
      const std::string_view v = string_of(value);
      require(start_time(v));
      set(started, new_str(v.substr(0, 19)));
    }
  }
  require(fields.seen == 3);
  return Py_BuildValue("(OO)", pid.p, started.p);
}

// The Record's fields as a tuple in Record.__slots__ order; nullptr, with
// no exception set, for anything but the plain shape.
PyObject* fields_of(Scratch& s, std::string_view text) {
  simdjson::dom::element root;
  simdjson::dom::object record;
  if (!parse(s, text, &root) || root.get_object().get(record)) {
    return nullptr;
  }
  Decoded d;
  try {
    Fields fields;
    for (auto [name, value] : record) {
      const int field = field_of(name, kRecordNames);
      if (field < 0) {
        continue; // a field the report does not read
      }
      fields.first(field);
      switch (field) {
        case kSchema:
          require(readable_schema(string_of(value)));
          break;
        case kHost:
          set(d.host, shared_str(string_of(value)));
          break;
        case kPid:
          set(d.pid, PyLong_FromLongLong(count_of(value)));
          break;
        case kStartTime: {
          const std::string_view v = string_of(value);
          require(start_time(v));
          set(d.start_time, new_str(v.substr(0, 19)));
          break;
        }
        case kJob: {
          const std::string_view v = string_of(value);
          require(!v.empty());
          set(d.job, shared_str(v));
          break;
        }
        case kRole:
          set(d.role, shared_str(string_of(value)));
          break;
        case kRank:
          set(d.rank,
              value.is_null() ? none() : PyLong_FromLongLong(count_of(value)));
          break;
        case kTorch:
          torch_of(value, d);
          break;
        case kEvents:
          events_of(value, d);
          break;
        case kRanBackward:
          set(d.ran_backward, PyBool_FromLong(bool_of(value)));
          break;
        case kPassesClassified:
          count_of(value);
          break;
        case kDisabledReason:
          set(d.disabled_reason,
              value.is_null() ? none() : new_str(string_of(value)));
          break;
        case kPassClasses:
          pass_classes_of(value, d);
          break;
        case kThreadingCost:
          threading_cost_of(s, value, d);
          break;
        case kAccelerators: {
          simdjson::dom::object any;
          require(!value.get_object().get(any));
          break;
        }
        case kParent:
          set(d.parent, parent_of(value));
          break;
        case kCallingThread:
          bool_of(value);
          break;
        default: // program, job_source, events_logged_by, time, ...
          string_of(value);
      }
    }
    require(
        (fields.seen & ((uint64_t{1} << kRequired) - 1)) ==
        (uint64_t{1} << kRequired) - 1);
  } catch (const NotPlain&) {
    // What a check met (a name that is not UTF-8) is the Python path's too.
    PyErr_Clear();
    return nullptr;
  }
  if (d.threading_cost.p == nullptr) {
    set(d.threading_cost, none());
    set(d.placement, none());
  }
  if (d.parent.p == nullptr) {
    set(d.parent, none());
  }
  return PyTuple_Pack(
      16,
      d.threading_cost.p,
      d.job.p,
      d.host.p,
      d.pid.p,
      d.parent.p,
      d.rank.p,
      d.role.p,
      d.start_time.p,
      d.events.p,
      d.other_events.p,
      d.ran_backward.p,
      d.pass_classes.p,
      d.other_classes.p,
      d.torch.p,
      d.disabled_reason.p,
      d.placement.p);
}

PyObject* record_fields(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "record_fields(data)");
    return nullptr;
  }
  if (!vocabulary().set) {
    PyErr_SetString(PyExc_RuntimeError, "set_vocabulary() first");
    return nullptr;
  }
  Py_buffer buffer;
  if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) != 0) {
    return nullptr;
  }
  PyObject* out = nullptr;
  try {
    out = fields_of(
        scratch(), {static_cast<const char*>(buffer.buf), size_t(buffer.len)});
  } catch (const std::bad_alloc&) {
    // No C++ exception crosses into the interpreter.
    PyBuffer_Release(&buffer);
    return PyErr_Occurred() ? nullptr : PyErr_NoMemory();
  }
  PyBuffer_Release(&buffer);
  if (out == nullptr) {
    if (PyErr_Occurred()) {
      return nullptr;
    }
    Py_RETURN_NONE;
  }
  return out;
}

// Note [Keeping a chunk's records in compiled code]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Where the report keeps the records' parts (Note [A record's part, kept],
// report_cache.py), reading a record is: read its file, decode its fields
// (fields_of), write the fields tuple in marshal to the log, take its CRC-32
// and pack its index entry (Note [The files' index], file_index.py). In
// Python, around the compiled reading and decoding, that cost about 3 us a
// record (a loop, a tuple per outcome, marshal and zlib called per part): a
// fifth of a cold report's reading. keep_records does all of it for a chunk
// of names in one call and gives back what the log and the index take as
// buffers. What it does not keep (a file skipped, or a record fields_of
// leaves to the Python path) it gives back as read_files' outcome, and
// record_reader.keep_named handles those as before; so every file ends as it
// would in Python. A part is marshal's bytes of the same tuple, which
// marshal.loads reads back as record_decoder.decode_fields gives it.
constexpr int kSpanLengthBits = 24;

PyObject* keep_records(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_SetString(
        PyExc_TypeError,
        "keep_records(directory_fd, names, max_bytes, log, offset)");
    return nullptr;
  }
  if (!vocabulary().set) {
    PyErr_SetString(PyExc_RuntimeError, "set_vocabulary() first");
    return nullptr;
  }
  const int directory_fd = PyObject_AsFileDescriptor(args[0]);
  if (directory_fd < 0) {
    return nullptr;
  }
  PyObject* names = args[1];
  if (!PyList_Check(names)) {
    PyErr_SetString(PyExc_TypeError, "names must be a list of bytes");
    return nullptr;
  }
  const Py_ssize_t max_bytes = PyLong_AsSsize_t(args[2]);
  const long long log = PyLong_AsLongLong(args[3]);
  const long long offset = PyLong_AsLongLong(args[4]);
  if (PyErr_Occurred()) {
    return nullptr;
  }
  if (max_bytes < 0 || log < 0 || log >= (1LL << 31) || offset < 0) {
    PyErr_SetString(PyExc_ValueError, "max_bytes, log or offset out of range");
    return nullptr;
  }
  Ref jobs(PyList_New(0)), others(PyList_New(0));
  if (jobs.p == nullptr || others.p == nullptr) {
    return nullptr;
  }
  try {
    std::vector<char> buffer(size_t(max_bytes) + 1);
    std::string parts, kept_names;
    std::vector<int64_t> keys;
    Scratch& s = scratch();
    // Note [A part's strings are not interned]
    struct Plain {
      Scratch& s;
      explicit Plain(Scratch& scratch) : s(scratch) {
        s.interning = false;
      }
      ~Plain() {
        s.interning = true;
      }
    } plain(s);
    const Py_ssize_t count = PyList_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < count; ++i) {
      PyObject* name = PyList_GET_ITEM(names, i);
      if (!PyBytes_Check(name) ||
          strlen(PyBytes_AS_STRING(name)) != size_t(PyBytes_GET_SIZE(name))) {
        PyErr_SetString(PyExc_ValueError, "each name must be bytes, no null");
        return nullptr;
      }
    }
    // In an order of their own (Note [A file not in memory is read later],
    // record_file_reading.h): the parts, names, keys and jobs each in it.
    const auto keep = [&](size_t i, const RecordFile& f) -> bool {
      PyObject* name = PyList_GET_ITEM(names, Py_ssize_t(i));
      Ref key(
          f.keyed ? Py_BuildValue(
                        "(LLK)",
                        static_cast<long long>(f.st.st_size),
                        mtime_ns_of(f.st),
                        static_cast<unsigned long long>(f.st.st_ino))
                  : none());
      if (key.p == nullptr) {
        return false;
      }
      Ref fields(nullptr);
      if (f.reason == nullptr) {
        fields.p = fields_of(s, {buffer.data(), f.filled});
        if (fields.p == nullptr && PyErr_Occurred()) {
          return false;
        }
      }
      Ref part(
          fields.p == nullptr
              ? nullptr
              : PyMarshal_WriteObjectToString(fields.p, Py_MARSHAL_VERSION));
      if (fields.p != nullptr && part.p == nullptr) {
        return false;
      }
      if (part.p == nullptr ||
          PyBytes_GET_SIZE(part.p) >= (Py_ssize_t{1} << kSpanLengthBits)) {
        // Not kept here: read_files' outcome, for the Python path.
        Ref what(
            f.reason != nullptr
                ? PyUnicode_FromString(f.reason)
                : PyBytes_FromStringAndSize(buffer.data(), f.filled));
        if (what.p == nullptr) {
          return false;
        }
        Ref outcome(PyTuple_Pack(3, name, key.p, what.p));
        if (outcome.p == nullptr || PyList_Append(others.p, outcome.p) != 0) {
          return false;
        }
        return true;
      }
      const char* bytes = PyBytes_AS_STRING(part.p);
      const size_t length = size_t(PyBytes_GET_SIZE(part.p));
      int64_t place = 0, span = 0;
      if (log != 0) {
        const uLong crc = crc32_of(bytes, length);
        place = int64_t(log) << 32 | int64_t(crc & 0xFFFFFFFFu);
        span = int64_t(offset + int64_t(parts.size())) << kSpanLengthBits |
            int64_t(length);
      }
      parts.append(bytes, length);
      kept_names.append(
          PyBytes_AS_STRING(name), size_t(PyBytes_GET_SIZE(name)));
      kept_names.push_back('/');
      // An inode number keeps its bits as a signed value (file_index.signed).
      keys.insert(
          keys.end(),
          {int64_t(f.st.st_size),
           int64_t(mtime_ns_of(f.st)),
           static_cast<int64_t>(uint64_t(f.st.st_ino)),
           0,
           place,
           span});
      if (PyList_Append(jobs.p, PyTuple_GET_ITEM(fields.p, kJobSlot)) != 0) {
        return false;
      }
      return true;
    };
    const bool whole = read_record_files(
        directory_fd,
        size_t(count),
        [names](size_t i) {
          return PyBytes_AS_STRING(PyList_GET_ITEM(names, Py_ssize_t(i)));
        },
        buffer,
        keep);
    if (!whole) {
      return nullptr;
    }
    return Py_BuildValue(
        "(y#y#y#OO)",
        parts.data(),
        Py_ssize_t(parts.size()),
        kept_names.data(),
        Py_ssize_t(kept_names.size()),
        reinterpret_cast<const char*>(keys.data()),
        Py_ssize_t(keys.size() * sizeof(int64_t)),
        jobs.p,
        others.p);
  } catch (const std::bad_alloc&) {
    // No C++ exception crosses into the interpreter.
    return PyErr_Occurred() ? nullptr : PyErr_NoMemory();
  }
}

// Parts this process asked the disk for ahead (Note [A run's parts not in
// memory are asked for at once]), for its tests.
size_t& parts_asked_for() {
  static size_t count = 0;
  return count;
}

// Note [Loading a run of parts in compiled code]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Counting from the parts (Note [Counting from the parts, job by job],
// fleet_report.py) reads each part back (os.pread), checks its CRC-32 and
// loads it with marshal: in Python, a call each and the loop around them
// cost about a microsecond a record, a fifth of counting. load_parts does
// that for a run of (group, place, span) triples in one call, each part as a
// RecordFields made as tuple.__new__ makes it, and gives None at the first
// part that is missing, in a log that cannot be opened, short, not as its
// CRC says, or not a record's fields: the caller then reads every file again.

// Note [A run's parts not in memory are asked for at once]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A re-run counts the changed jobs' records from parts a run before wrote:
// by the next day the page cache may no longer hold those logs, and a
// run's parts are scattered over them (a job's records came in the order
// the directory listed them), so each pread waited for the disk in turn.
// So a part's first read asks for what is in memory only (preadv2 with
// RWF_NOWAIT, as Note [A file not in memory is read later],
// record_file_reading.h); where its log's page is not there, the disk is
// asked at once for every part still to load from that log, this call's
// run and the runs after it (whose parts lie between this run's), in
// ranges (ask_for_parts; POSIX_FADV_WILLNEED, which does not wait), once
// per log and call, and the reads that follow wait for reads already under
// way. At 10^6 records with 1% replaced, 2 cores and the logs out of
// memory, counting took 1.0-1.2 s, 0.8-0.9 asking for each call's run
// alone, and 0.5-0.75 s so (0.4-0.5 s with the logs in memory). In memory,
// it costs nothing more: preadv2 reads the part as pread did.
// Asks the disk for the parts of `log` (open as `fd`) among the triples
// [from, end), in ranges of the log of at most kMostBytesAskedAtOnce (the
// kernel reads no more ahead per call: 128 KB by default), each read whole
// where less than kMostBytesBetweenParts lies between two of its parts.
constexpr off_t kMostBytesAskedAtOnce = off_t(128) << 10;
constexpr off_t kMostBytesBetweenParts = off_t(16) << 10;

void ask_for_parts(
    int fd,
    int64_t log,
    const int64_t* triples,
    size_t from,
    size_t end) {
  std::vector<std::pair<off_t, off_t>> spans;
  for (size_t j = from; j < end; ++j) {
    if (triples[3 * j + 1] >> 32 == log) {
      const int64_t span = triples[3 * j + 2];
      const off_t offset = off_t(span >> kSpanLengthBits);
      spans.emplace_back(
          offset, offset + off_t(span & ((int64_t{1} << kSpanLengthBits) - 1)));
    }
  }
  parts_asked_for() += spans.size();
  std::sort(spans.begin(), spans.end());
  for (size_t j = 0; j < spans.size();) {
    const off_t start = spans[j].first;
    off_t stop = spans[j].second;
    for (++j;
         j < spans.size() && spans[j].first <= stop + kMostBytesBetweenParts &&
         spans[j].second - start <= kMostBytesAskedAtOnce;
         ++j) {
      stop = std::max(stop, spans[j].second);
    }
    posix_fadvise(fd, start, stop - start, POSIX_FADV_WILLNEED);
  }
}

PyObject* load_parts(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(
        PyExc_TypeError,
        "load_parts(spans, begin, end, fds, open_log, fields_type)");
    return nullptr;
  }
  PyObject* fds = args[3];
  PyObject* open_log = args[4];
  PyObject* fields_type = args[5];
  if (!PyDict_Check(fds) || !PyType_Check(fields_type) ||
      !PyType_IsSubtype(
          reinterpret_cast<PyTypeObject*>(fields_type), &PyTuple_Type)) {
    PyErr_SetString(
        PyExc_TypeError, "fds must be a dict, fields_type a tuple type");
    return nullptr;
  }
  const Py_ssize_t begin = PyLong_AsSsize_t(args[1]);
  const Py_ssize_t end = PyLong_AsSsize_t(args[2]);
  if (PyErr_Occurred()) {
    return nullptr;
  }
  Py_buffer view;
  if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0) {
    return nullptr;
  }
  const int64_t* triples = static_cast<const int64_t*>(view.buf);
  const Py_ssize_t count = view.len / Py_ssize_t(3 * sizeof(int64_t));
  if (begin < 0 || end < begin || end > count) {
    PyBuffer_Release(&view);
    PyErr_SetString(PyExc_ValueError, "begin and end must be within spans");
    return nullptr;
  }
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(fields_type);
  const Py_ssize_t slots = Py_ssize_t(kRecordSlots);
  Ref out(PyList_New(end - begin));
  std::vector<char> part;
  int64_t log = -1;
  int fd = -1;
  // The logs whose parts were asked for (Note [A run's parts not in memory
  // are asked for at once]).
  std::vector<int64_t> asked;
  bool whole = out.p != nullptr;
  for (Py_ssize_t i = begin; whole && i < end; ++i) {
    const int64_t place = triples[3 * i + 1];
    const int64_t span = triples[3 * i + 2];
    if (place == 0) {
      whole = false; // no part was kept
      break;
    }
    if (place >> 32 != log) {
      log = place >> 32;
      const Ref number(PyLong_FromLongLong(log));
      PyObject* known = number.p == nullptr
          ? nullptr
          : PyDict_GetItemWithError(fds, number.p); // borrowed
      Ref opened(nullptr);
      if (known == nullptr && !PyErr_Occurred() && number.p != nullptr) {
        opened.p = PyObject_CallOneArg(open_log, number.p);
        if (opened.p != nullptr &&
            PyDict_SetItem(fds, number.p, opened.p) != 0) {
          Py_CLEAR(opened.p);
        }
        known = opened.p;
      }
      if (known == nullptr) {
        whole = false;
        Py_CLEAR(out.p); // the error stays set
        break;
      }
      if (known == Py_None) {
        whole = false; // the log cannot be opened
        break;
      }
      fd = PyObject_AsFileDescriptor(known);
      if (fd < 0) {
        Py_CLEAR(out.p);
        break;
      }
    }
    const size_t length = size_t(span & ((int64_t{1} << kSpanLengthBits) - 1));
    const off_t offset = off_t(span >> kSpanLengthBits);
    try {
      part.resize(length);
    } catch (const std::bad_alloc&) {
      Py_CLEAR(out.p);
      PyErr_NoMemory();
      break;
    }
    size_t filled = 0;
#ifdef RWF_NOWAIT
    if (length > 0 &&
        std::find(asked.begin(), asked.end(), log) == asked.end()) {
      struct iovec into = {part.data(), length};
      const ssize_t n = preadv2(fd, &into, 1, offset, RWF_NOWAIT);
      if (n > 0) {
        filled = size_t(n);
      } else if (n < 0 && errno == EAGAIN) {
        try {
          asked.push_back(log);
          // Every part still to load from the log, beyond this call's run
          // too: the next runs' parts lie between this run's.
          ask_for_parts(fd, log, triples, size_t(i), size_t(count));
        } catch (const std::bad_alloc&) {
          Py_CLEAR(out.p);
          PyErr_NoMemory();
          break;
        }
      }
    }
#endif
    while (filled < length) {
      const ssize_t n =
          pread(fd, part.data() + filled, length - filled, offset + filled);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        break;
      }
      filled += size_t(n);
    }
    if (filled != length ||
        (crc32_of(part.data(), length) & 0xFFFFFFFFu) !=
            uLong(place & 0xFFFFFFFF)) {
      whole = false;
      break;
    }
    const Ref fields(
        PyMarshal_ReadObjectFromString(part.data(), Py_ssize_t(length)));
    if (fields.p == nullptr || !PyTuple_CheckExact(fields.p) ||
        PyTuple_GET_SIZE(fields.p) != slots) {
      // Marshal that the CRC passed but is no record's fields.
      PyErr_Clear();
      whole = false;
      break;
    }
    PyObject* record = type->tp_alloc(type, slots);
    if (record == nullptr) {
      Py_CLEAR(out.p);
      break;
    }
    for (Py_ssize_t k = 0; k < slots; ++k) {
      PyObject* item = PyTuple_GET_ITEM(fields.p, k);
      Py_INCREF(item);
      PyTuple_SET_ITEM(record, k, item);
    }
    PyList_SET_ITEM(out.p, i - begin, record);
  }
  PyBuffer_Release(&view);
  if (out.p == nullptr) {
    return nullptr;
  }
  if (!whole) {
    Py_RETURN_NONE;
  }
  return out.release();
}

PyObject* set_vocabulary(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])) {
    PyErr_SetString(
        PyExc_TypeError,
        "set_vocabulary(events, classes, max_pairs): tuples of str");
    return nullptr;
  }
  Vocabulary v;
  for (int which = 0; which < 2; ++which) {
    PyObject* names = args[which];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); ++i) {
      Py_ssize_t size = 0;
      const char* name =
          PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(names, i), &size);
      if (name == nullptr) {
        return nullptr;
      }
      (which == 0 ? v.events : v.classes).emplace_back(name, size_t(size));
    }
  }
  if (v.events.size() > 30) {
    PyErr_SetString(PyExc_ValueError, "at most 30 events");
    return nullptr;
  }
  const Py_ssize_t max_pairs = PyLong_AsSsize_t(args[2]);
  if (max_pairs < 0) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "max_pairs must not be negative");
    }
    return nullptr;
  }
  v.max_pairs = size_t(max_pairs);
  v.set = true;
  vocabulary() = std::move(v);
  Py_RETURN_NONE;
}

PyObject* pairs_values(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "pairs_values(text, max_pairs)");
    return nullptr;
  }
  Py_buffer buffer;
  if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) != 0) {
    return nullptr;
  }
  const Py_ssize_t max_pairs = PyLong_AsSsize_t(args[1]);
  if (max_pairs < 0) {
    PyBuffer_Release(&buffer);
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "max_pairs must not be negative");
    }
    return nullptr;
  }
  PyObject* out = PyDict_New();
  bool valued = false;
  try {
    Scratch& s = scratch();
    simdjson::dom::element root;
    valued = out != nullptr &&
        parse(s,
              {static_cast<const char*>(buffer.buf), size_t(buffer.len)},
              &root) &&
        values_of(s, root, size_t(max_pairs), out);
  } catch (const std::bad_alloc&) {
    // No C++ exception crosses into the interpreter.
    Py_XDECREF(out);
    PyBuffer_Release(&buffer);
    return PyErr_NoMemory();
  }
  PyBuffer_Release(&buffer);
  if (out != nullptr && !valued) {
    Py_CLEAR(out);
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return out;
}

// Note [A run's parts not in memory are asked for at once].
PyObject* asked_for(PyObject*, PyObject*) {
  return PyLong_FromSize_t(parts_asked_for());
}

// Note [A file not in memory is read later], record_file_reading.h.
PyObject* read_later(PyObject*, PyObject*) {
  return PyLong_FromSize_t(files_read_later());
}

PyMethodDef kMethods[] = {
    {"parts_asked_for",
     asked_for,
     METH_NOARGS,
     "parts_asked_for() -> int\n"
     "\n"
     "How many parts load_parts has asked the disk for ahead, their log's\n"
     "page not in memory, in this process."},
    {"files_read_later",
     read_later,
     METH_NOARGS,
     "files_read_later() -> int\n"
     "\n"
     "How many files keep_records has read after those listed after them,\n"
     "the page cache not holding them, in this process."},
    {"pairs_values",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(pairs_values)),
     METH_FASTCALL,
     "pairs_values(text, max_pairs) -> {class: (percent, difference, pairs)} "
     "or None"},
    {"record_fields",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(record_fields)),
     METH_FASTCALL,
     "record_fields(data) -> the Record's fields in Record.__slots__ order, "
     "or None"},
    {"keep_records",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(keep_records)),
     METH_FASTCALL,
     "keep_records(directory_fd, names, max_bytes, log, offset)\n"
     "-> (parts, kept names, kept keys, kept jobs, others)\n"
     "\n"
     "Reads and decodes the named files: each record of the plain shape as\n"
     "its part (marshal of its fields), appended at `offset` of part log\n"
     "`log` (0: none), its name (\"/\"-ended), its index entry (six int64,\n"
     "the group 0) and its job; every other file as (name, key or None,\n"
     "its bytes or why it was not read)."},
    {"load_parts",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(load_parts)),
     METH_FASTCALL,
     "load_parts(spans, begin, end, fds, open_log, fields_type) -> list or "
     "None\n"
     "\n"
     "The parts at the (group, place, span) triples begin to end of spans,\n"
     "each as a fields_type; fds maps a log to its descriptor, open_log(log)\n"
     "gives one (None: cannot be read) for a log not in it. None at the\n"
     "first part that cannot be read back whole."},
    {"set_vocabulary",
     reinterpret_cast<PyCFunction>(
         reinterpret_cast<void (*)()>(set_vocabulary)),
     METH_FASTCALL,
     "set_vocabulary(events, classes, max_pairs): what record_fields knows"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT,
    "_record_decoding",
    "A record's fields and its measured pairs' values, for the fleet report.",
    -1,
    kMethods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

} // namespace

PyMODINIT_FUNC PyInit__record_decoding() {
  PyObject* module = PyModule_Create(&kModule);
  // The simdjson it was built with, for whoever reports a timing.
  if (module != nullptr &&
      PyModule_AddObject(
          module,
          "simdjson_version",
          PyUnicode_FromFormat(
              "%d.%d.%d",
              int(simdjson::SIMDJSON_VERSION_MAJOR),
              int(simdjson::SIMDJSON_VERSION_MINOR),
              int(simdjson::SIMDJSON_VERSION_REVISION))) != 0) {
    Py_CLEAR(module);
  }
  return module;
}
