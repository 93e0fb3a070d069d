// A bounded cache of captured expert passes (CUDA graphs), keyed on
// everything a capture bakes in: the device pointers it read and wrote, the
// weights, and the per-expert row counts. A replay reads the buffers' current
// contents, so a key that matches replays the same work on the new rows.
//
// A key is captured the second time it is seen, not the first: a shape seen
// once (most prefill shapes) is not worth a capture. Every known key holds
// one of `capacity` slots (a slot indexes the caller's per-graph device
// memory, e.g. the grouped GEMM's pointer arrays); beyond that the least
// recently used key is forgotten and its graph destroyed. A key whose capture
// failed runs eagerly from then on. Clear() drops everything (weights
// changed). Plain C++ over an opaque graph handle: tested on the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace moe {

template <typename Exec>
class GraphCache {
 public:
  using Key = std::vector<uint64_t>;
  enum class Action : int8_t { kEager, kCapture, kReplay };
  struct Lookup {
    Action action = Action::kEager;
    Exec exec{};    // kReplay: the graph
    int slot = -1;  // kCapture and kReplay: this key's slot
  };
  struct Stats {
    int64_t replays = 0, captures = 0, failures = 0, evictions = 0;
  };

  GraphCache(int capacity, std::function<void(Exec)> destroy)
      : capacity_(capacity), destroy_(std::move(destroy)) {
    for (int s = capacity - 1; s >= 0; --s) free_slots_.push_back(s);
  }
  ~GraphCache() { Clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // What to do with `key` now. A first sighting is remembered (kEager).
  Lookup Find(const Key& key) {
    Lookup out;
    if (capacity_ <= 0) return out;
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      if (free_slots_.empty()) EvictOldest();
      Entry e;
      e.slot = free_slots_.back();
      free_slots_.pop_back();
      e.last_use = ++clock_;
      entries_.emplace(key, e);
      return out;
    }
    Entry& e = it->second;
    e.last_use = ++clock_;
    if (e.failed) return out;
    out.slot = e.slot;
    if (e.has_exec) {
      ++stats_.replays;
      out.action = Action::kReplay;
      out.exec = e.exec;
    } else {
      out.action = Action::kCapture;
    }
    return out;
  }

  // The graph captured for `key` after Find said kCapture.
  void Insert(const Key& key, Exec exec) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {  // forgotten meanwhile: not expected
      destroy_(exec);
      return;
    }
    if (it->second.has_exec) destroy_(it->second.exec);
    it->second.exec = exec;
    it->second.has_exec = true;
    ++stats_.captures;
  }

  // The capture of `key` failed: eager from now on.
  void MarkFailed(const Key& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    it->second.failed = true;
    ++stats_.failures;
  }

  void Clear() {
    for (auto& [key, e] : entries_) {
      if (e.has_exec) destroy_(e.exec);
      free_slots_.push_back(e.slot);
    }
    entries_.clear();
  }

  size_t size() const { return entries_.size(); }
  size_t graphs() const {
    size_t n = 0;
    for (const auto& [key, e] : entries_) n += e.has_exec ? 1 : 0;
    return n;
  }
  int capacity() const { return capacity_; }
  const Stats& stats() const { return stats_; }

 private:
  struct Entry {
    Exec exec{};
    bool has_exec = false;
    bool failed = false;
    int slot = -1;
    uint64_t last_use = 0;
  };

  void EvictOldest() {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    if (oldest == entries_.end()) return;
    if (oldest->second.has_exec) destroy_(oldest->second.exec);
    free_slots_.push_back(oldest->second.slot);
    entries_.erase(oldest);
    ++stats_.evictions;
  }

  int capacity_;
  std::function<void(Exec)> destroy_;
  std::map<Key, Entry> entries_;
  std::vector<int> free_slots_;
  uint64_t clock_ = 0;
  Stats stats_;
};

}  // namespace moe
