// The fleet report's index of record files in compiled code (Note [The
// files' index] and Note [Reading the files in compiled code],
// file_index.py): listing the directory and checking each file's key
// against the index, and the index's bulk operations, over the two buffers
// the index is (names, each followed by "/"; four int64 per name).

#include "file_index.h"

#include <dirent.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__SSE2__) && defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace autograd_device_logging_report {
namespace {

// Note [The files' index]: st_size, st_mtime_ns, st_ino, group, the part's
// log and CRC, the part's offset and length.
constexpr size_t kFields = 6;
constexpr size_t kGroup = 3;
constexpr size_t kPartLog = 4;
constexpr size_t kPartSpan = 5;
constexpr int kSpanLengthBits = 24;

// A record's part as the counting takes it (Note [Counting from the parts,
// job by job], fleet_report.py): its group, then where it is; ordered by
// group, then by place, so that a job's parts come together and each log
// is read forwards.
struct Span {
  int64_t group;
  int64_t log;
  int64_t span;
  bool operator<(const Span& other) const {
    return std::tie(group, log, span) <
        std::tie(other.group, other.log, other.span);
  }
};
static_assert(sizeof(Span) == 3 * sizeof(int64_t));

// The Python buffers of one call, released however it ends.
struct Buffers {
  // Reserved: get() hands out pointers into it.
  Buffers() {
    views.reserve(kMostBuffers);
  }
  static constexpr size_t kMostBuffers = 4;
  std::vector<Py_buffer> views;
  ~Buffers() {
    for (Py_buffer& view : views) {
      PyBuffer_Release(&view);
    }
  }
  // The buffer of `object` (writable where asked); nullptr with an
  // exception set where it has none.
  Py_buffer* get(PyObject* object, bool writable) {
    if (views.size() == kMostBuffers) {
      PyErr_SetString(PyExc_SystemError, "too many buffers");
      return nullptr;
    }
    views.emplace_back();
    if (PyObject_GetBuffer(
            object,
            &views.back(),
            writable ? PyBUF_WRITABLE | PyBUF_SIMPLE : PyBUF_SIMPLE) != 0) {
      views.pop_back();
      return nullptr;
    }
    return &views.back();
  }
};

// Note [The names are counted sixteen bytes at a time]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The operations that read no name still count the names (Note [The names
// are split only where they are read]), and a re-run at 10^6 records counts
// them four times, two of them while the other core waits: std::count, which
// the compiler does not widen here, took 15 ms over 24 MB of names on this
// project's 2-core machine, 2.6 ms sixteen bytes at a time (SSE2, which every
// x86-64 processor has): each byte's matches in a byte of its own for up to
// 255 blocks, then summed.
size_t count_names(const char* at, size_t length) {
  size_t count = 0;
  size_t i = 0;
#if defined(__SSE2__) && defined(__x86_64__)
  const __m128i slash = _mm_set1_epi8('/');
  while (i + 16 <= length) {
    const size_t blocks = std::min<size_t>((length - i) / 16, 255);
    __m128i counts = _mm_setzero_si128();
    for (size_t b = 0; b < blocks; ++b, i += 16) {
      const __m128i bytes =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + i));
      // A match is -1: subtracting it adds one.
      counts = _mm_sub_epi8(counts, _mm_cmpeq_epi8(bytes, slash));
    }
    const __m128i sums = _mm_sad_epu8(counts, _mm_setzero_si128());
    count += size_t(_mm_cvtsi128_si64(sums)) +
        size_t(_mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums)));
  }
#endif
  return count + size_t(std::count(at + i, at + length, '/'));
}

// The index's names, each a view into the names buffer.
std::vector<std::string_view> split_names(const Py_buffer& names) {
  std::vector<std::string_view> out;
  const char* p = static_cast<const char*>(names.buf);
  const char* end = p + names.len;
  while (p < end) {
    const char* slash = static_cast<const char*>(memchr(p, '/', end - p));
    if (slash == nullptr) {
      break;
    }
    out.emplace_back(p, slash - p);
    p = slash + 1;
  }
  return out;
}

// The index's three buffers, checked against each other.
struct Index {
  // Empty where the operation reads no name (Note [The names are split
  // only where they are read]).
  std::vector<std::string_view> names;
  const int64_t* keys = nullptr;
  unsigned char* unchanged = nullptr;
  size_t size = 0;
};

// Note [The names are split only where they are read]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A view per name is 16 MB at 10^6 entries, made and touched afresh by each
// operation that gets it; a re-run's changed_groups, spans_in and the two
// part_logs read only keys and flags. Those count the names ("/"-ended, as
// split_names takes them) to check the three buffers against each other,
// and split none.
bool index_of(
    Buffers& buffers,
    PyObject* names_object,
    PyObject* keys_object,
    PyObject* unchanged_object,
    Index* index,
    bool with_names = true) {
  Py_buffer* names = buffers.get(names_object, false);
  Py_buffer* keys = buffers.get(keys_object, false);
  Py_buffer* unchanged = buffers.get(unchanged_object, true);
  if (names == nullptr || keys == nullptr || unchanged == nullptr) {
    return false;
  }
  if (with_names) {
    index->names = split_names(*names);
    index->size = index->names.size();
  } else {
    index->size =
        count_names(static_cast<const char*>(names->buf), size_t(names->len));
  }
  if (size_t(keys->len) != index->size * kFields * sizeof(int64_t) ||
      size_t(unchanged->len) != index->size) {
    PyErr_SetString(
        PyExc_ValueError,
        "the index's names, keys and unchanged flags differ in length");
    return false;
  }
  index->keys = static_cast<const int64_t*>(keys->buf);
  index->unchanged = static_cast<unsigned char*>(unchanged->buf);
  return true;
}

bool is_record_name(const char* name, size_t length) {
  return length >= 5 && name[0] != '.' &&
      memcmp(name + length - 5, ".json", 5) == 0;
}

// Where each of the index's names is: open addressing over a power of two
// of slots, each the entry's position + 1 (0: empty). A million names take
// 16 MB, and no allocation per name. Filled by several threads at once
// (Note [The keys are checked while listing]): each entry claims an empty slot
// with one compare-and-swap, so the table holds the same entries whichever
// thread added which.
class NameTable {
 public:
  explicit NameTable(const std::vector<std::string_view>& names)
      : names_(names) {
    while (capacity_ < 2 * names.size()) {
      capacity_ *= 2;
    }
    // Value-initialized: every slot empty.
    slots_.reset(new std::atomic<int64_t>[capacity_]());
  }

  // Where entry `i` goes in the table: its name's first slot.
  size_t slot_of(size_t i) const {
    return hash(names_[i]);
  }

  // Brings the slot into the processor's cache (Note [The keys are checked
  // while listing]).
  void prefetch(size_t slot) const {
    __builtin_prefetch(&slots_[slot], 1);
  }

  // Adds entry `i`, whose first slot is `slot`.
  void add(size_t i, size_t slot) {
    int64_t empty = 0;
    while (!slots_[slot].compare_exchange_strong(
        empty, int64_t(i) + 1, std::memory_order_relaxed)) {
      empty = 0;
      slot = (slot + 1) & (capacity_ - 1);
    }
  }

  // The entry of `name`, or -1; once every entry is added (the threads
  // that added them joined).
  int64_t find(std::string_view name) const {
    size_t slot = hash(name);
    while (true) {
      const int64_t at = slots_[slot].load(std::memory_order_relaxed);
      if (at == 0) {
        return -1;
      }
      if (names_[size_t(at - 1)] == name) {
        return at - 1;
      }
      slot = (slot + 1) & (capacity_ - 1);
    }
  }

 private:
  size_t hash(std::string_view name) const {
    return std::hash<std::string_view>()(name) & (capacity_ - 1);
  }

  const std::vector<std::string_view>& names_;
  size_t capacity_ = 16;
  std::unique_ptr<std::atomic<int64_t>[]> slots_;
};

// Note [The listing's memory goes back]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A million listed names take tens of MB. Freed from glibc's heap, a block
// that large raises glibc's threshold for mapping blocks of their own, so
// that the report's next large buffers (its names, in Python) stay in the
// heap once freed, and the reading processes forked next start with them:
// the report's peak memory (its target) grew by about 40 MB at 10^6
// records. So the listing's buffers are mappings of their own, unmapped
// when done, and glibc's heap never sees them.
template <typename T>
class MappedArray {
 public:
  MappedArray() = default;
  MappedArray(const MappedArray&) = delete;
  MappedArray& operator=(const MappedArray&) = delete;
  ~MappedArray() {
    if (data_ != nullptr) {
      munmap(data_, capacity_ * sizeof(T));
    }
  }
  void push_back(const T& value) {
    if (size_ == capacity_) {
      grow(size_ + 1);
    }
    data_[size_++] = value;
  }
  void append(const T* values, size_t count) {
    if (size_ + count > capacity_) {
      grow(size_ + count);
    }
    memcpy(data_ + size_, values, count * sizeof(T));
    size_ += count;
  }
  T& operator[](size_t i) {
    return data_[i];
  }
  const T& operator[](size_t i) const {
    return data_[i];
  }
  size_t size() const {
    return size_;
  }
  // `count` zeros, in an array that holds none yet.
  void assign_zeros(size_t count) {
    if (count > 0) {
      grow(count); // anonymous pages: zeros
    }
    size_ = count;
  }

 private:
  void grow(size_t needed) {
    size_t capacity = capacity_ == 0 ? (size_t(1) << 16) : capacity_;
    while (capacity < needed) {
      capacity *= 2;
    }
    void* mapped = mmap(
        nullptr,
        capacity * sizeof(T),
        PROT_READ | PROT_WRITE,
        MAP_PRIVATE | MAP_ANONYMOUS,
        -1,
        0);
    if (mapped == MAP_FAILED) {
      throw std::bad_alloc();
    }
    if (data_ != nullptr) {
      memcpy(mapped, data_, size_ * sizeof(T));
      munmap(data_, capacity_ * sizeof(T));
    }
    data_ = static_cast<T*>(mapped);
    capacity_ = capacity;
  }

  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// The listed names, each ended by a NUL (for fstatat), one after another.
struct ListedNames {
  MappedArray<char> arena;
  // Per name: where it starts in the arena, its entry in the index (-1
  // until match_listed finds it, and where the index has none), and whether
  // its key is unchanged.
  MappedArray<size_t> starts;
  MappedArray<int64_t> entries;
  MappedArray<unsigned char> unchanged;

  // `name` is NUL-ended (a directory entry's).
  void add(const char* name, size_t length) {
    starts.push_back(arena.size());
    arena.append(name, length + 1);
    entries.push_back(-1);
    unchanged.push_back(0);
  }
  void add(std::string_view name) {
    starts.push_back(arena.size());
    arena.append(name.data(), name.size());
    arena.push_back('\0');
    entries.push_back(-1);
    unchanged.push_back(0);
  }
  size_t size() const {
    return starts.size();
  }
  const char* name(size_t i) const {
    return &arena[starts[i]];
  }
};

// What a stat of a listed name gave: its key's first three fields (Note
// [The files' index]), where it is a regular file.
struct Stated {
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ino = 0;
};

// The stats of listed names, taken a chunk at a time by each thread that
// stats (Note [The keys are checked while listing]).
struct ListedStats {
  MappedArray<Stated> stated;
  // 1 where the name's stat found a regular file.
  MappedArray<unsigned char> regular;
  std::atomic<size_t> next{0};
  // Set where no stat is wanted any more (the index cannot be had).
  std::atomic<bool> cancelled{false};
};

// Listed names stat'ed at a time by a thread.
constexpr size_t kStatChunk = 512;

// Listed names stat'ed, in this process (for the tests: Note [The keys are
// checked while listing]).
std::atomic<size_t> names_stated{0};

// Stats listed names, a chunk at a time, until none is left or `stats` is
// cancelled (no interpreter call: runs without the GIL).
void stat_listed(
    int directory_fd,
    const ListedNames& listed,
    ListedStats& stats) {
  while (!stats.cancelled.load(std::memory_order_relaxed)) {
    const size_t begin =
        stats.next.fetch_add(kStatChunk, std::memory_order_relaxed);
    if (begin >= listed.size()) {
      return;
    }
    const size_t end = std::min(listed.size(), begin + kStatChunk);
    names_stated.fetch_add(end - begin, std::memory_order_relaxed);
    for (size_t i = begin; i < end; ++i) {
      struct stat st;
      if (fstatat(directory_fd, listed.name(i), &st, AT_SYMLINK_NOFOLLOW) !=
              0 ||
          !S_ISREG(st.st_mode)) {
        continue;
      }
      stats.stated[i] = {
          int64_t(st.st_size),
          int64_t(st.st_mtim.tv_sec) * 1000000000LL +
              int64_t(st.st_mtim.tv_nsec),
          static_cast<int64_t>(uint64_t(st.st_ino))};
      stats.regular[i] = 1;
    }
  }
}

// Adds the index's entries to `position`, each slot fetched while the one
// before is added.
void add_names(const Index& index, NameTable& position) {
  size_t slot = index.size > 0 ? position.slot_of(0) : 0;
  for (size_t entry = 0; entry < index.size; ++entry) {
    const size_t at = slot;
    if (entry + 1 < index.size) {
      slot = position.slot_of(entry + 1);
      position.prefetch(slot);
    }
    position.add(entry, at);
  }
}

// Listed names looked for in the table of names, in this process (for the
// tests: Note [The keys are checked while listing]).
std::atomic<size_t> names_looked_up{0};

// Finds listed names [begin, end) in the index, each first at the entry
// after the one before it (Note [The keys are checked while listing]), and
// marks those whose stat found the entry's key (no interpreter call: runs
// without the GIL).

void match_listed(
    const Index& index,
    const NameTable& position,
    ListedNames& listed,
    const ListedStats& stats,
    size_t begin,
    size_t end) {
  size_t next = index.size;
  size_t looked_up = 0;
  for (size_t i = begin; i < end; ++i) {
    const std::string_view name(listed.name(i));
    int64_t entry = int64_t(next);
    if (next >= index.size || index.names[next] != name) {
      entry = position.find(name);
      ++looked_up;
    }
    listed.entries[i] = entry;
    if (entry >= 0) {
      const int64_t* key = index.keys + size_t(entry) * kFields;
      const Stated& st = stats.stated[i];
      listed.unchanged[i] = stats.regular[i] && key[0] == st.size &&
          key[1] == st.mtime_ns && key[2] == st.ino;
      next = size_t(entry) + 1;
    }
  }
  names_looked_up.fetch_add(looked_up, std::memory_order_relaxed);
}

// Files each thread checks at least: fewer are not worth a thread.
constexpr size_t kFilesPerThread = 20000;
constexpr size_t kMaxThreads = 16;

enum class Outcome { kDone, kOsError, kNoMemory, kNoThread };

// Lists the directory's record names into `listed`, counting links and
// other entries that are no regular file; false (errno set) where it cannot
// be listed. No interpreter call: runs without the GIL.
bool list_directory(
    int directory_fd,
    ListedNames& listed,
    Py_ssize_t& links,
    Py_ssize_t& not_regular) {
  // Its own descriptor: closedir() closes it, never the caller's.
  const int fd = fcntl(directory_fd, F_DUPFD_CLOEXEC, 0);
  DIR* dir = fd < 0 ? nullptr : fdopendir(fd);
  if (dir == nullptr) {
    if (fd >= 0) {
      const int error = errno;
      close(fd);
      errno = error;
    }
    return false;
  }
  // From the start, whoever read this descriptor before.
  rewinddir(dir);
  while (const struct dirent* entry = readdir(dir)) {
    const size_t length = strlen(entry->d_name);
    if (!is_record_name(entry->d_name, length)) {
      continue;
    }
    unsigned char type = entry->d_type;
    if (type == DT_UNKNOWN) {
      // What os.scandir's DirEntry does: lstat, and a name that went is no
      // regular file.
      struct stat st;
      if (fstatat(directory_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        type = S_ISLNK(st.st_mode) ? DT_LNK
            : S_ISREG(st.st_mode)  ? DT_REG
                                   : DT_UNKNOWN;
      }
    }
    if (type == DT_LNK) {
      ++links;
    } else if (type != DT_REG) {
      ++not_regular;
    } else {
      listed.add(entry->d_name, length);
    }
  }
  closedir(dir);
  return true;
}

// list_directory's outcome: kDone, kOsError (errno in `error`) or
// kNoMemory. No interpreter call: runs without the GIL.
Outcome listed_into(
    int directory_fd,
    ListedNames& listed,
    Py_ssize_t& links,
    Py_ssize_t& not_regular,
    int& error) {
  try {
    if (!list_directory(directory_fd, listed, links, not_regular)) {
      error = errno;
      return Outcome::kOsError;
    }
    return Outcome::kDone;
  } catch (const std::bad_alloc&) {
    return Outcome::kNoMemory;
  }
}

// Runs work(begin, end) over [0, count) in even shares, on up to a thread
// per core (this one among them), each with `least` at least; throws
// std::system_error where a thread cannot start, once those started are
// joined.
template <typename Work>
void in_shares(size_t count, size_t least, const Work& work) {
  const size_t threads = std::max<size_t>(
      1,
      std::min<size_t>(
          {size_t(std::thread::hardware_concurrency()),
           kMaxThreads,
           count / std::max<size_t>(1, least)}));
  const size_t share = (count + threads - 1) / threads;
  std::vector<std::thread> workers;
  try {
    for (size_t t = 1; t < threads; ++t) {
      const size_t begin = std::min(count, t * share);
      workers.emplace_back(work, begin, std::min(count, begin + share));
    }
  } catch (...) {
    for (std::thread& worker : workers) {
      worker.join();
    }
    throw;
  }
  work(0, std::min(count, share));
  for (std::thread& worker : workers) {
    worker.join();
  }
}

// The directory listed by a thread of its own (list_directory), which
// then stats the names it listed (stat_listed), with a thread per core but
// one (the one that loads the index), while the thread that made it does
// something else; joined when it goes (Note [The keys are checked while
// listing]).
class Listing {
 public:
  // Throws std::system_error where the thread cannot start.
  Listing(int directory_fd, size_t files_per_thread)
      : directory_fd_(directory_fd),
        files_per_thread_(files_per_thread),
        thread_([this] { run(); }) {}
  Listing(const Listing&) = delete;
  Listing& operator=(const Listing&) = delete;
  ~Listing() {
    cancel();
    join();
  }
  void join() {
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  // No more stats: the names are not checked.
  void cancel() {
    stats.cancelled.store(true, std::memory_order_relaxed);
  }
  // Waits until the names are listed; whether the thread that loads stats
  // some of them too (they are listed, with room for their stats, and
  // enough for two threads).
  bool wait_until_listed() {
    std::unique_lock<std::mutex> lock(mutex_);
    listed_.wait(lock, [this] { return listing_done_; });
    return stats_ready_ && loader_stats_;
  }

  ListedNames listed;
  ListedStats stats;
  Py_ssize_t links = 0;
  Py_ssize_t not_regular = 0;
  // Once joined: kDone, kOsError (with `error`) or kNoMemory.
  Outcome outcome = Outcome::kDone;
  int error = 0;

 private:
  void run() {
    outcome = listed_into(directory_fd_, listed, links, not_regular, error);
    bool ready = false;
    if (outcome == Outcome::kDone &&
        !stats.cancelled.load(std::memory_order_relaxed)) {
      try {
        stats.stated.assign_zeros(listed.size());
        stats.regular.assign_zeros(listed.size());
        ready = true;
      } catch (const std::bad_alloc&) {
        outcome = Outcome::kNoMemory;
      }
    }
    // A thread per core, each with files_per_thread names at least: this
    // one and the one that loads among them, once it has loaded.
    const size_t threads = std::max<size_t>(
        1,
        std::min<size_t>(
            {size_t(std::thread::hardware_concurrency()),
             kMaxThreads,
             listed.size() / std::max<size_t>(1, files_per_thread_)}));
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      listing_done_ = true;
      stats_ready_ = ready;
      loader_stats_ = threads > 1;
    }
    listed_.notify_all();
    if (!ready) {
      return;
    }
    std::vector<std::thread> helpers;
    for (size_t t = 2; t < threads; ++t) {
      try {
        helpers.emplace_back(
            [this] { stat_listed(directory_fd_, listed, stats); });
      } catch (const std::system_error&) {
        break; // fewer threads: the same stats
      }
    }
    stat_listed(directory_fd_, listed, stats);
    for (std::thread& helper : helpers) {
      helper.join();
    }
  }

  const int directory_fd_;
  const size_t files_per_thread_;
  std::mutex mutex_;
  std::condition_variable listed_;
  bool listing_done_ = false;
  bool stats_ready_ = false;
  bool loader_stats_ = false;
  // Last: started once the fields it fills are made.
  std::thread thread_;
};

// Note [The keys are checked while listing]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A stat per file is most of a re-run's time (Note [The files' index],
// file_index.py), and listing the directory and loading the cache the most
// of the rest: about 1.5 s of CPU, 0.2 s and 0.25 s at 10^6 files, all
// three but the load in the kernel. None needs another to be done, except
// that a name must be listed before it is stat'ed. So a thread lists the
// directory while this one loads the index (in Python: the cache's file),
// then stats the names it listed, with a thread per core but this one;
// this one builds the table of the index's names once it has them and
// then stats too, until every listed name is stat'ed (a thread per core in
// all, each with files_per_thread names at least). The cores are busy
// from the start: on this project's 2-core machine at 10^6 files, the
// check took 1.00-1.09 s of a re-run, against 1.13-1.15 s when the threads
// statted the index's entries once it was loaded (the longer of the
// listing and the load, then the stats). Only then is each listed name found in
// the index, and its stat compared with the entry's key, to read those the
// index has not or whose key changed. The listing is in the order the
// directory keeps, and so was the index (each reading process's chunk of
// names in listing order), so a listed name is first looked for at the
// entry after the one before it, and in the table only where that is
// another name: a name compared in memory read in order instead of two or
// three cache misses, and nothing else. An entry is unchanged only where
// its name is listed and its file has its key (Note [The files' index]);
// what changes while the report runs may be seen either way, as before.
// Where there is no index to check, the stats stop where they are.
void check_while_listing(
    int directory_fd,
    const Index& index,
    Listing& listing,
    size_t files_per_thread) {
  NameTable position(index.names);
  add_names(index, position);
  if (listing.wait_until_listed()) {
    stat_listed(directory_fd, listing.listed, listing.stats);
  }
  listing.join();
  if (listing.outcome != Outcome::kDone) {
    return;
  }
  ListedNames& listed = listing.listed;
  const ListedStats& stats = listing.stats;
  in_shares(
      listed.size(),
      files_per_thread,
      [&index, &position, &listed, &stats](size_t begin, size_t end) {
        match_listed(index, position, listed, stats, begin, end);
      });
}

// The listed names whose key changed or that the index has not, "/"-ended,
// made in place in the bytes object returned (Note [The listing's memory
// goes back]); the index's entries of the others become unchanged.
PyObject* names_to_read(const ListedNames& listed, const Index& index) {
  size_t total = 0;
  for (size_t i = 0; i < listed.size(); ++i) {
    if (listed.unchanged[i]) {
      index.unchanged[listed.entries[i]] = 1;
    } else {
      total += strlen(listed.name(i)) + 1;
    }
  }
  PyObject* out = PyBytes_FromStringAndSize(nullptr, Py_ssize_t(total));
  if (out == nullptr) {
    return nullptr;
  }
  char* at = PyBytes_AS_STRING(out);
  for (size_t i = 0; i < listed.size(); ++i) {
    if (!listed.unchanged[i]) {
      const size_t length = strlen(listed.name(i));
      memcpy(at, listed.name(i), length);
      at[length] = '/';
      at += length + 1;
    }
  }
  return out;
}

// A set of groups (Note [The files' index]: 64-bit hashes of the jobs'
// names): open addressing over a power of two of slots, at most half full,
// so that looking up each of a million entries' groups is a slot or two
// where std::unordered_set's is a division and a node (spans_in: 0.05 s at
// 10^6 entries, about a third of that so).
class GroupSet {
 public:
  void insert(int64_t group) {
    if (group == kEmpty) {
      has_empty_ = true;
      return;
    }
    if (2 * (size_ + 1) > slots_.size()) {
      grow();
    }
    size_t slot = slot_of(group);
    while (slots_[slot] != kEmpty) {
      if (slots_[slot] == group) {
        return;
      }
      slot = (slot + 1) & (slots_.size() - 1);
    }
    slots_[slot] = group;
    ++size_;
  }

  bool contains(int64_t group) const {
    if (group == kEmpty) {
      return has_empty_;
    }
    if (slots_.empty()) {
      return false;
    }
    for (size_t slot = slot_of(group);;
         slot = (slot + 1) & (slots_.size() - 1)) {
      if (slots_[slot] == group) {
        return true;
      }
      if (slots_[slot] == kEmpty) {
        return false;
      }
    }
  }

 private:
  // A slot no group is in: the one group of that value is kept aside.
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();

  // Fibonacci hashing: the top bits of the product, so that groups that
  // differ only in their low bits (the parity is a job's or a reason's)
  // spread.
  size_t slot_of(int64_t group) const {
    return size_t((uint64_t(group) * 0x9E3779B97F4A7C15ull) >> (64 - bits_));
  }

  void grow() {
    std::vector<int64_t> old(std::max<size_t>(16, 2 * slots_.size()), kEmpty);
    old.swap(slots_);
    bits_ = 0;
    while ((size_t(1) << bits_) < slots_.size()) {
      ++bits_;
    }
    size_ = 0;
    for (const int64_t group : old) {
      if (group != kEmpty) {
        insert(group);
      }
    }
  }

  std::vector<int64_t> slots_;
  int bits_ = 0;
  size_t size_ = 0;
  bool has_empty_ = false;
};

// The ints of a Python set; false with an exception set.
bool groups_of(PyObject* set, GroupSet& groups) {
  const Ref items(PyObject_GetIter(set));
  if (items.p == nullptr) {
    return false;
  }
  while (true) {
    const Ref item(PyIter_Next(items.p));
    if (item.p == nullptr) {
      return !PyErr_Occurred();
    }
    const long long group = PyLong_AsLongLong(item.p);
    if (group == -1 && PyErr_Occurred()) {
      return false;
    }
    groups.insert(group);
  }
}

// The arguments of the index's bulk operations: (names, keys, unchanged),
// then a set of groups where `groups` is given; the names split where
// `with_names`; false with an exception set.
bool index_arguments(
    PyObject* const* args,
    Py_ssize_t nargs,
    const char* usage,
    Buffers& buffers,
    Index* index,
    GroupSet* groups,
    bool with_names = true) {
  if (nargs != (groups == nullptr ? 3 : 4) ||
      (groups != nullptr && !PyAnySet_Check(args[3]))) {
    PyErr_SetString(PyExc_TypeError, usage);
    return false;
  }
  if (!index_of(buffers, args[0], args[1], args[2], index, with_names)) {
    return false;
  }
  try {
    return groups == nullptr || groups_of(args[3], *groups);
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
    return false;
  }
}

// The int64 of `value` (an int of at most 64 bits; one of 2^63 or more as
// the signed int of the same bits, as file_index.signed); false with an
// exception set.
bool int64_of(PyObject* value, int64_t* out) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(value);
    if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      return false;
    }
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (overflow < 0 || (v == -1 && PyErr_Occurred())) {
    if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_OverflowError, "an index value out of 64 bits");
    }
    return false;
  }
  *out = v;
  return true;
}

} // namespace

PyObject* pack_entries(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const char* const kUsage =
      "pack_entries(records: [(name, (size, mtime_ns, inode), record)], "
      "groups: [int], places: [(log, span)] or None)";
  if (nargs != 3 || !PyList_Check(args[0]) || !PyList_Check(args[1]) ||
      (args[2] != Py_None && !PyList_Check(args[2]))) {
    PyErr_SetString(PyExc_TypeError, kUsage);
    return nullptr;
  }
  PyObject* records = args[0];
  PyObject* groups = args[1];
  PyObject* places = args[2] == Py_None ? nullptr : args[2];
  const Py_ssize_t n = PyList_GET_SIZE(records);
  if (PyList_GET_SIZE(groups) != n ||
      (places != nullptr && PyList_GET_SIZE(places) != n)) {
    PyErr_SetString(PyExc_ValueError, kUsage);
    return nullptr;
  }
  Ref out(PyBytes_FromStringAndSize(
      nullptr, n * Py_ssize_t(kFields * sizeof(int64_t))));
  if (out.p == nullptr) {
    return nullptr;
  }
  int64_t* at = reinterpret_cast<int64_t*>(PyBytes_AS_STRING(out.p));
  for (Py_ssize_t i = 0; i < n; ++i, at += kFields) {
    PyObject* record = PyList_GET_ITEM(records, i);
    PyObject* key = PyTuple_Check(record) && PyTuple_GET_SIZE(record) == 3
        ? PyTuple_GET_ITEM(record, 1)
        : nullptr;
    PyObject* place = places == nullptr ? nullptr : PyList_GET_ITEM(places, i);
    if (key == nullptr || !PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 3 ||
        (place != nullptr &&
         (!PyTuple_Check(place) || PyTuple_GET_SIZE(place) != 2))) {
      PyErr_SetString(PyExc_TypeError, kUsage);
      return nullptr;
    }
    for (int k = 0; k < 3; ++k) {
      if (!int64_of(PyTuple_GET_ITEM(key, k), &at[k])) {
        return nullptr;
      }
    }
    if (!int64_of(PyList_GET_ITEM(groups, i), &at[kGroup])) {
      return nullptr;
    }
    at[kPartLog] = at[kPartSpan] = 0;
    if (place != nullptr &&
        (!int64_of(PyTuple_GET_ITEM(place, 0), &at[kPartLog]) ||
         !int64_of(PyTuple_GET_ITEM(place, 1), &at[kPartSpan]))) {
      return nullptr;
    }
  }
  return out.release();
}

PyObject* scan_directory(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "scan_directory(directory_fd)");
    return nullptr;
  }
  const int directory_fd = PyObject_AsFileDescriptor(args[0]);
  if (directory_fd < 0) {
    return nullptr;
  }
  try {
    ListedNames listed;
    Py_ssize_t links = 0, not_regular = 0;
    Outcome outcome = Outcome::kDone;
    int error = 0;
    Py_BEGIN_ALLOW_THREADS;
    outcome = listed_into(directory_fd, listed, links, not_regular, error);
    Py_END_ALLOW_THREADS;
    if (outcome == Outcome::kNoMemory) {
      return PyErr_NoMemory();
    }
    if (outcome == Outcome::kOsError) {
      errno = error;
      return PyErr_SetFromErrno(PyExc_OSError);
    }
    const Ref out(names_to_read(listed, Index()));
    return out.p == nullptr ? nullptr
                            : Py_BuildValue("(Onn)", out.p, links, not_regular);
  } catch (const std::bad_alloc&) {
    // No C++ exception crosses into the interpreter.
    return PyErr_NoMemory();
  }
}

PyObject* list_and_check(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const char* const kUsage =
      "list_and_check(directory_fd, load[, files_per_thread]): load() gives "
      "(names, keys) or None";
  if (nargs != 2 && nargs != 3) {
    PyErr_SetString(PyExc_TypeError, kUsage);
    return nullptr;
  }
  const int directory_fd = PyObject_AsFileDescriptor(args[0]);
  if (directory_fd < 0) {
    return nullptr;
  }
  // Fewer than kFilesPerThread in tests, so that a small directory checks
  // its keys in threads too (Note [The keys are checked while listing]).
  size_t files_per_thread = kFilesPerThread;
  if (nargs == 3) {
    const Py_ssize_t given = PyLong_AsSsize_t(args[2]);
    if (given == -1 && PyErr_Occurred()) {
      return nullptr;
    }
    if (given < 1) {
      PyErr_SetString(PyExc_ValueError, "files_per_thread must be at least 1");
      return nullptr;
    }
    files_per_thread = size_t(given);
  }
  try {
    std::unique_ptr<Listing> listing;
    try {
      listing = std::make_unique<Listing>(directory_fd, files_per_thread);
    } catch (const std::system_error&) {
      PyErr_SetString(PyExc_RuntimeError, "could not start a thread");
      return nullptr;
    }
    // Where this returns early, the listing is joined as it goes: it calls
    // nothing of the interpreter's.
    const Ref loaded(PyObject_CallNoArgs(args[1]));
    if (loaded.p == nullptr || loaded.p == Py_None) {
      // Nothing to check: the names are only listed.
      listing->cancel();
    }
    if (loaded.p == nullptr) {
      return nullptr;
    }
    // Before the buffers: released after their views.
    Ref unchanged(nullptr);
    Buffers buffers;
    Index index;
    const bool checking = loaded.p != Py_None;
    if (checking) {
      if (!PyTuple_Check(loaded.p) || PyTuple_GET_SIZE(loaded.p) != 2) {
        PyErr_SetString(PyExc_TypeError, kUsage);
        return nullptr;
      }
      const Py_buffer* names =
          buffers.get(PyTuple_GET_ITEM(loaded.p, 0), false);
      if (names == nullptr) {
        return nullptr;
      }
      unchanged.p = PyByteArray_FromStringAndSize(
          nullptr,
          Py_ssize_t(count_names(
              static_cast<const char*>(names->buf), size_t(names->len))));
      if (unchanged.p == nullptr) {
        return nullptr;
      }
      memset(
          PyByteArray_AS_STRING(unchanged.p),
          0,
          PyByteArray_GET_SIZE(unchanged.p));
      if (!index_of(
              buffers,
              PyTuple_GET_ITEM(loaded.p, 0),
              PyTuple_GET_ITEM(loaded.p, 1),
              unchanged.p,
              &index)) {
        return nullptr;
      }
    }
    Outcome outcome = Outcome::kDone;
    Py_BEGIN_ALLOW_THREADS;
    try {
      if (checking) {
        check_while_listing(directory_fd, index, *listing, files_per_thread);
      }
    } catch (const std::bad_alloc&) {
      outcome = Outcome::kNoMemory;
    } catch (const std::system_error&) {
      outcome = Outcome::kNoThread;
    }
    if (outcome != Outcome::kDone) {
      listing->cancel();
    }
    listing->join();
    Py_END_ALLOW_THREADS;
    if (outcome == Outcome::kDone) {
      outcome = listing->outcome;
    }
    switch (outcome) {
      case Outcome::kDone:
        break;
      case Outcome::kNoMemory:
        return PyErr_NoMemory();
      case Outcome::kNoThread:
        PyErr_SetString(PyExc_RuntimeError, "could not start a thread");
        return nullptr;
      case Outcome::kOsError:
        errno = listing->error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    const Ref out(names_to_read(listing->listed, index));
    return out.p == nullptr ? nullptr
                            : Py_BuildValue(
                                  "(OnnO)",
                                  out.p,
                                  listing->links,
                                  listing->not_regular,
                                  checking ? unchanged.p : Py_None);
  } catch (const std::bad_alloc&) {
    // No C++ exception crosses into the interpreter.
    return PyErr_NoMemory();
  }
}

PyObject* table_lookups(PyObject*, PyObject*) {
  return PyLong_FromSize_t(names_looked_up.load(std::memory_order_relaxed));
}

PyObject* listed_stats(PyObject*, PyObject*) {
  return PyLong_FromSize_t(names_stated.load(std::memory_order_relaxed));
}

PyObject* changed_groups(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Buffers buffers;
  Index index;
  if (!index_arguments(
          args,
          nargs,
          "changed_groups(names, keys, unchanged)",
          buffers,
          &index,
          nullptr,
          /*with_names=*/false)) {
    return nullptr;
  }
  try {
    std::unordered_set<int64_t> changed;
    std::unordered_map<int64_t, Py_ssize_t> skipped;
    for (size_t i = 0; i < index.size; ++i) {
      const int64_t group = index.keys[i * kFields + kGroup];
      if (group & 1) {
        if (index.unchanged[i]) {
          ++skipped[group];
        }
      } else if (!index.unchanged[i]) {
        changed.insert(group);
      }
    }
    Ref groups(PySet_New(nullptr));
    Ref counts(PyDict_New());
    if (groups.p == nullptr || counts.p == nullptr) {
      return nullptr;
    }
    for (const int64_t group : changed) {
      const Ref value(PyLong_FromLongLong(group));
      if (value.p == nullptr || PySet_Add(groups.p, value.p) != 0) {
        return nullptr;
      }
    }
    for (const auto& [group, count] : skipped) {
      const Ref key(PyLong_FromLongLong(group));
      const Ref value(PyLong_FromSsize_t(count));
      if (key.p == nullptr || value.p == nullptr ||
          PyDict_SetItem(counts.p, key.p, value.p) != 0) {
        return nullptr;
      }
    }
    return PyTuple_Pack(2, groups.p, counts.p);
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  }
}

PyObject* names_in(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Buffers buffers;
  Index index;
  GroupSet groups;
  if (!index_arguments(
          args,
          nargs,
          "names_in(names, keys, unchanged, groups: set)",
          buffers,
          &index,
          &groups)) {
    return nullptr;
  }
  try {
    std::string out;
    for (size_t i = 0; i < index.size; ++i) {
      if (index.unchanged[i] &&
          groups.contains(index.keys[i * kFields + kGroup])) {
        index.unchanged[i] = 0;
        out.append(index.names[i]);
        out += '/';
      }
    }
    return PyBytes_FromStringAndSize(out.data(), Py_ssize_t(out.size()));
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  }
}

PyObject*
unchanged_entries(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Buffers buffers;
  Index index;
  if (!index_arguments(
          args,
          nargs,
          "unchanged_entries(names, keys, unchanged)",
          buffers,
          &index,
          nullptr)) {
    return nullptr;
  }
  // Note [The index's unchanged entries are copied once]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A re-run writes the unchanged entries back (most of 76 MB at 10^6
  // files). Appended entry by entry to growing buffers, then copied into
  // bytes objects, they were copied three times over into fresh memory:
  // 0.1 to 0.27 s of a re-run. So the sizes are counted first, the two
  // bytes objects made at their size, and each run of unchanged entries
  // copied into them once, as the entries lie in the index's buffers.
  size_t name_bytes = 0, entries = 0;
  for (size_t i = 0; i < index.size; ++i) {
    if (index.unchanged[i]) {
      name_bytes += index.names[i].size() + 1;
      ++entries;
    }
  }
  const Ref names(PyBytes_FromStringAndSize(nullptr, Py_ssize_t(name_bytes)));
  const Ref keys(PyBytes_FromStringAndSize(
      nullptr, Py_ssize_t(entries * kFields * sizeof(int64_t))));
  if (names.p == nullptr || keys.p == nullptr) {
    return nullptr;
  }
  char* name_at = PyBytes_AS_STRING(names.p);
  char* key_at = PyBytes_AS_STRING(keys.p);
  for (size_t i = 0; i < index.size;) {
    if (!index.unchanged[i]) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    while (end < index.size && index.unchanged[end]) {
      ++end;
    }
    // Entries [i, end): their names lie one after the other, each
    // "/"-ended, and their keys likewise.
    const char* first = index.names[i].data();
    const char* last =
        index.names[end - 1].data() + index.names[end - 1].size();
    const size_t length = size_t(last - first) + 1;
    memcpy(name_at, first, length);
    name_at += length;
    const size_t key_length = (end - i) * kFields * sizeof(int64_t);
    memcpy(key_at, index.keys + i * kFields, key_length);
    key_at += key_length;
    i = end;
  }
  return PyTuple_Pack(2, names.p, keys.p);
}

// Note [The entries gone are left out in place]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A load that applies the cache's changes (Note [The cache's changes],
// report_cache.py) joins the file's entries and the changes' into one
// index, then leaves out the entries gone: a few thousand of a million.
// unchanged_entries made the index again in new bytes objects, and the
// keys then into an array: fresh memory, which a virtual machine pays for
// by the page. Loading the next day's cache at 10^6 records (1% replaced
// each day) faulted in 95,000 pages and took 0.41-0.44 s. So the joined
// index, a bytearray and an array of the load's own, is compacted where it
// lies: each run of entries kept moves forward over the entries gone
// before it, and the caller cuts the buffers to the lengths this gives.
// The same load: 57,000 pages, 0.32-0.37 s (5 runs each, alternated).
PyObject*
keep_unchanged_in_place(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  static const char* const kUsage =
      "keep_unchanged_in_place(names: bytearray, keys: array, unchanged)";
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, kUsage);
    return nullptr;
  }
  Buffers buffers;
  Py_buffer* names = buffers.get(args[0], true);
  Py_buffer* keys = buffers.get(args[1], true);
  Py_buffer* unchanged = buffers.get(args[2], false);
  if (names == nullptr || keys == nullptr || unchanged == nullptr) {
    return nullptr;
  }
  char* const first = static_cast<char*>(names->buf);
  const char* const end = first + names->len;
  const size_t size = count_names(first, size_t(names->len));
  if (size_t(keys->len) != size * kFields * sizeof(int64_t) ||
      size_t(unchanged->len) != size || (names->len > 0 && end[-1] != '/')) {
    PyErr_SetString(
        PyExc_ValueError,
        "the index's names, keys and unchanged flags differ in length");
    return nullptr;
  }
  const auto* flags = static_cast<const unsigned char*>(unchanged->buf);
  auto* key_at = static_cast<int64_t*>(keys->buf);
  char* name_out = first;
  size_t kept = 0;
  const char* p = first;
  for (size_t i = 0; i < size;) {
    // The run [i, run_end) of entries all kept or all gone, its names
    // from p to q.
    const bool keep = flags[i] != 0;
    size_t run_end = i;
    const char* q = p;
    while (run_end < size && (flags[run_end] != 0) == keep) {
      q = static_cast<const char*>(memchr(q, '/', size_t(end - q))) + 1;
      ++run_end;
    }
    if (keep) {
      const size_t length = size_t(q - p);
      if (name_out != p) {
        memmove(name_out, p, length);
        memmove(
            key_at + kept * kFields,
            key_at + i * kFields,
            (run_end - i) * kFields * sizeof(int64_t));
      }
      name_out += length;
      kept += run_end - i;
    }
    p = q;
    i = run_end;
  }
  return Py_BuildValue("(nn)", Py_ssize_t(name_out - first), Py_ssize_t(kept));
}

PyObject* spans_in(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Buffers buffers;
  Index index;
  GroupSet groups;
  // None: the groups of every job (Note [The files' index]: even ones).
  const bool every_job = nargs == 4 && args[3] == Py_None;
  if (!index_arguments(
          args,
          every_job ? 3 : nargs,
          "spans_in(names, keys, unchanged, groups: set or None)",
          buffers,
          &index,
          every_job ? nullptr : &groups,
          /*with_names=*/false)) {
    return nullptr;
  }
  try {
    std::vector<Span> out;
    for (size_t i = 0; i < index.size; ++i) {
      const int64_t* entry = index.keys + i * kFields;
      const int64_t group = entry[kGroup];
      if (index.unchanged[i] &&
          (every_job ? (group & 1) == 0 : groups.contains(group))) {
        out.push_back({group, entry[kPartLog], entry[kPartSpan]});
      }
    }
    std::sort(out.begin(), out.end());
    return PyBytes_FromStringAndSize(
        reinterpret_cast<const char*>(out.data()),
        Py_ssize_t(out.size() * sizeof(Span)));
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  }
}

PyObject* in_group_order(PyObject*, PyObject* spans) {
  Py_buffer view;
  if (PyObject_GetBuffer(spans, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) !=
      0) {
    return nullptr;
  }
  if (view.len % Py_ssize_t(sizeof(Span)) != 0) {
    PyBuffer_Release(&view);
    PyErr_SetString(
        PyExc_ValueError, "in_group_order: not (group, log, span) triples");
    return nullptr;
  }
  Span* begin = static_cast<Span*>(view.buf);
  Span* end = begin + view.len / Py_ssize_t(sizeof(Span));
  // Note [What is in order already is merged]
  // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
  // A re-run orders the parts of the files it read (a few thousand, in no
  // order) followed by those of the unchanged entries, which spans_in gave
  // in order (about 150,000 at 10^6 records with 1% replaced): sorting them
  // all took 4 to 10 ms of the one thread that works then, merging 0.6 ms. So
  // the part before the longest run in order at the end is sorted, and the two
  // merged. (inplace_merge merges without a buffer where it gets none: no
  // throw.)
  Span* ordered = begin == end ? end : end - 1;
  while (ordered != begin && !(*ordered < *(ordered - 1))) {
    --ordered;
  }
  std::sort(begin, ordered);
  std::inplace_merge(begin, ordered, end);
  PyBuffer_Release(&view);
  Py_RETURN_NONE;
}

PyObject* part_logs(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  Buffers buffers;
  Index index;
  if (!index_arguments(
          args,
          nargs,
          "part_logs(names, keys, unchanged)",
          buffers,
          &index,
          nullptr,
          /*with_names=*/false)) {
    return nullptr;
  }
  try {
    std::unordered_set<int64_t> logs;
    long long live = 0;
    for (size_t i = 0; i < index.size; ++i) {
      const int64_t* entry = index.keys + i * kFields;
      if (index.unchanged[i] && entry[kPartLog] != 0) {
        logs.insert(static_cast<int64_t>(uint64_t(entry[kPartLog]) >> 32));
        live += entry[kPartSpan] & ((int64_t(1) << kSpanLengthBits) - 1);
      }
    }
    Ref out(PySet_New(nullptr));
    if (out.p == nullptr) {
      return nullptr;
    }
    for (const int64_t log : logs) {
      const Ref value(PyLong_FromLongLong(log));
      if (value.p == nullptr || PySet_Add(out.p, value.p) != 0) {
        return nullptr;
      }
    }
    return Py_BuildValue("(OL)", out.p, live);
  } catch (const std::bad_alloc&) {
    return PyErr_NoMemory();
  }
}

} // namespace autograd_device_logging_report
