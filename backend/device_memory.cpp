#include "backend/device_memory.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/error.h"
#include "ir/memory_limit.h"

namespace fusec {

namespace {

constexpr size_t kAlign = 256;  // the CUDA backend's buffer alignment (memory_planner, weights, inputs)

size_t add_sat(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

size_t aligned_bytes(const Value& v, DType t) {
  if (!v.type.shape || !is_static(*v.type.shape)) return 0;
  int64_t n = 1;
  for (int64_t d : static_dims(*v.type.shape)) {
    if (d != 0 && n > INT64_MAX / d) return SIZE_MAX;
    n *= d;
  }
  const size_t es = dtype_size(t);
  if (n > 0 && static_cast<size_t>(n) > (SIZE_MAX - kAlign) / std::max<size_t>(es, 1)) return SIZE_MAX;
  return (static_cast<size_t>(n) * es + kAlign - 1) / kAlign * kAlign;
}

int64_t elements(const Value& v) {
  if (!v.type.shape || !is_static(*v.type.shape)) return 0;
  int64_t n = 1;
  for (int64_t d : static_dims(*v.type.shape)) {
    if (d != 0 && n > INT64_MAX / d) return INT64_MAX;
    n *= d;
  }
  return n;
}

void note_largest(DeviceMemoryNeed& need, const Value& v) {
  const int64_t n = elements(v);
  if (n <= need.largest_elements) return;
  need.largest_elements = n;
  need.largest_value = v.name;
  need.largest_where = v.producer ? " (output of" + v.producer->ref().substr(1) : "";
}

// The ops the CUDA backend runs as views of their first input (backend/cuda/ops/movement/view_op.cpp).
bool view_op(const Node& n) {
  static const std::unordered_set<std::string> ops = {"Reshape",   "Flatten",  "Squeeze",
                                                      "Unsqueeze", "Identity", "Dropout"};
  return n.domain.empty() && ops.count(n.op_type);
}

// The ops the CUDA backend folds at plan time whatever their inputs (only dims are read), and
// the ones it never folds (executor/plan.cpp: dims_only_op, random_op).
bool dims_only_op(const Node& n) { return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size"); }
bool random_op(const Node& n) {
  return n.op_type.rfind("Random", 0) == 0 || n.op_type == "Multinomial" || n.op_type == "Bernoulli";
}

std::string bytes_text(size_t b) { return format_bytes(static_cast<double>(b)) + " (" + std::to_string(b) + " bytes)"; }

}  // namespace

size_t DeviceMemoryNeed::total() const { return add_sat(add_sat(activations, weights), add_sat(io, workspace)); }

size_t DeviceMemoryLimit::limit() const { return cap ? std::min(cap, free_bytes) : free_bytes; }

DeviceMemoryNeed estimate_device_memory(const Graph& g, Precision p) {
  DeviceMemoryNeed need;
  // Buffers of the arena as [first, last] step intervals: step 0 converts the inputs, node i is
  // step i + 1, and the graph outputs are held until step `end`.
  struct Buffer {
    size_t bytes;
    int first, last;
  };
  std::vector<Buffer> bufs;
  std::unordered_map<const Value*, int> buf_of;  // values held in the arena
  std::unordered_set<const Value*> constant, weights_read;
  const int end = static_cast<int>(g.nodes().size()) + 1;

  for (const Value* v : g.values())
    if (v->is_initializer()) constant.insert(v);
  for (const Value* v : g.inputs) {
    if (v->is_initializer()) continue;
    need.io = add_sat(need.io, aligned_bytes(*v, v->type.dtype));
    note_largest(need, *v);
    const DType st = storage_dtype(p, v->type.dtype);
    if (st != v->type.dtype) {  // converted into an arena buffer of the storage type by step 0
      buf_of[v] = static_cast<int>(bufs.size());
      bufs.push_back({aligned_bytes(*v, st), 0, 0});
    }
  }
  int step = 0;
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    ++step;
    bool all_const = !random_op(n);
    for (const Value* v : n.inputs)
      if (v && !constant.count(v)) all_const = false;
    if (all_const || dims_only_op(n)) {  // folded at plan time: its outputs become constants
      for (const Value* v : n.outputs)
        if (v) constant.insert(v);
      continue;
    }
    for (const Value* v : n.inputs) {
      if (!v) continue;
      if (v->is_initializer()) weights_read.insert(v);
      if (auto it = buf_of.find(v); it != buf_of.end()) bufs[it->second].last = std::max(bufs[it->second].last, step);
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const Value* v = n.outputs[k];
      if (!v) continue;
      if (k == 0 && view_op(n) && n.input(0) && buf_of.count(n.input(0))) {
        buf_of[v] = buf_of.at(n.input(0));  // shares its input's bytes
        continue;
      }
      buf_of[v] = static_cast<int>(bufs.size());
      bufs.push_back({aligned_bytes(*v, storage_dtype(p, v->type.dtype)), step, step});
      note_largest(need, *v);
    }
  }
  for (const Value* v : g.outputs) {
    auto it = buf_of.find(v);
    if (it != buf_of.end()) bufs[it->second].last = end;
    // An output stored in another type (or not computed on the device) gets its own buffer.
    if (it == buf_of.end() || storage_dtype(p, v->type.dtype) != v->type.dtype)
      bufs.push_back({aligned_bytes(*v, v->type.dtype), end, end});
  }
  for (const Value* v : weights_read) {
    need.weights = add_sat(need.weights, aligned_bytes(*v, storage_dtype(p, v->type.dtype)));
    note_largest(need, *v);
  }

  // Peak of the bytes live at one step: no placement can do with less.
  std::vector<size_t> born(static_cast<size_t>(end) + 2, 0), died(static_cast<size_t>(end) + 2, 0);
  for (const Buffer& b : bufs) {
    born[static_cast<size_t>(b.first)] = add_sat(born[static_cast<size_t>(b.first)], b.bytes);
    died[static_cast<size_t>(std::max(b.first, b.last)) + 1] =
        add_sat(died[static_cast<size_t>(std::max(b.first, b.last)) + 1], b.bytes);
  }
  size_t live = 0;
  for (size_t s = 0; s < born.size(); ++s) {
    live = live == SIZE_MAX ? live : live - died[s];  // a saturated count stays saturated
    live = add_sat(live, born[s]);
    need.activations = std::max(need.activations, live);
  }
  return need;
}

std::string device_memory_shortfall(const DeviceMemoryNeed& need, const DeviceMemoryLimit& lim,
                                    const std::string& what) {
  const size_t total = need.total();
  if (total <= lim.limit()) {
    if (need.largest_elements <= kMaxDeviceTensorElements) return "";
    const std::string dev = lim.device.empty() ? "the GPU" : lim.device;
    return what + " needs " + bytes_text(total) + " of device memory and " + dev + " has " +
           bytes_text(lim.free_bytes) + " free, but tensor '" + need.largest_value + "'" + need.largest_where +
           " has " + std::to_string(need.largest_elements) + " elements, more than the " +
           std::to_string(kMaxDeviceTensorElements) +
           " one tensor may have on the GPU (cuDNN and cuBLAS take 32-bit sizes); a smaller --batch needs fewer";
  }
  std::string parts = "activations " + format_bytes(static_cast<double>(need.activations)) + ", weights " +
                      format_bytes(static_cast<double>(need.weights)) + ", inputs " +
                      format_bytes(static_cast<double>(need.io));
  if (need.workspace) parts += ", workspace " + format_bytes(static_cast<double>(need.workspace));
  std::string msg = what + " needs " + bytes_text(total) + " of device memory (" + parts + "), but ";
  const std::string dev = lim.device.empty() ? "the GPU" : lim.device;
  if (lim.cap && lim.cap < lim.free_bytes)
    msg +=
        "--max-device-memory is " + bytes_text(lim.cap) + " (" + dev + " has " + bytes_text(lim.free_bytes) + " free)";
  else
    msg += dev + " has " + bytes_text(lim.free_bytes) + " free of " +
           format_bytes(static_cast<double>(lim.total_bytes)) +
           (lim.cap ? " (--max-device-memory is " + format_bytes(static_cast<double>(lim.cap)) + ")" : "");
  return msg + "; a smaller --batch needs less";
}

void check_device_memory(const DeviceMemoryNeed& need, const DeviceMemoryLimit& lim, const std::string& what) {
  std::string msg = device_memory_shortfall(need, lim, what);
  if (!msg.empty()) bad_input(msg);
}

}  // namespace fusec
