// Kernel choices made by timing candidates on the device, remembered across runs: the first plan of
// a shape times cuBLASLt's top heuristic algorithms once; later plans (any command, any process)
// read the winner back. Keyed by everything that can change the answer: GPU, driver, library
// version, fusec version and the problem itself.
//
//   $FUSEC_TUNING_CACHE, else $XDG_CACHE_HOME/fusec/tuning.json, else ~/.cache/fusec/tuning.json
//   FUSEC_TUNE=0: no timing, the libraries' heuristic first choice (and the cache is not read)
#pragma once
#include <optional>
#include <string>

namespace fusec::cuda {

class TuningCache {
 public:
  static TuningCache& global();
  /// False under FUSEC_TUNE=0.
  bool enabled() const;
  std::optional<std::string> get(const std::string& key);
  /// Remembers the value and rewrites the file (atomically); a cache that cannot be written only
  /// costs the next process its tuning time.
  void put(const std::string& key, const std::string& value);
  std::string path() const;
  /// Forgets what this process has read: the next get() reads the file again (what other
  /// processes have tuned since, or a cache moved with FUSEC_TUNING_CACHE).
  void reload();

 private:
  TuningCache();
  void load();
  bool loaded_ = false;
  struct State;
  State* state_;
};

/// "NVIDIA H100 80GB HBM3|sm90|driver 13000|fusec 0.1.0": the device part of every key.
std::string tuning_device_key(int device);

}  // namespace fusec::cuda
