// libFuzzer target: the whole path a user's model file takes through fusec, on bytes the fuzzer
// makes up. Parse and import (protobuf, tensors, attributes, the version guard), validate, bind
// symbolic input dims, infer shapes, export and re-import, optimize with every pass, then compile
// and run original and optimized on the CPU reference with small random inputs (graphs with If or
// Loop are not run: see exercise()).
//
// What counts as a finding: a crash or sanitizer report, a hang (libFuzzer's -timeout), an
// allocation past -malloc_limit_mb, or an error fusec itself calls internal (exit 1 in the CLI).
// A fusec::Error of kind BadInput is the correct answer to a bad file and is ignored.
//
// Half of the mutations are structure-aware (LLVMFuzzerCustomMutator below): the input is parsed as
// a ModelProto and one field that feeds dimension arithmetic or dispatch is changed (an attribute,
// an int64 initializer value, an input dim, an op type, an opset) to values that break arithmetic
// (0, -1, 2^31, 2^62, INT64_MAX...), which byte-level mutation rarely reaches; the other half are
// libFuzzer's own byte mutations, guided by fuzz/onnx.dict.
//
// Resource caps keep big-but-valid models from looking like bugs: tensor memory is capped by the
// host budget (kMemoryCap, so a huge declared tensor is a clean BadInput), optimizing and running
// happen only when the model's cost at its bound shapes is small (kMaxFlops, kMaxBytes), and
// constant folding may create nothing over kFoldCap.
#include "onnx/onnx-ml.pb.h"
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <random>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "importer/onnx_export.h"
#include "importer/onnx_import.h"
#include "ir/cost.h"
#include "ir/error.h"
#include "ir/memory_limit.h"
#include "ir/subgraph.h"
#include "passes/infer_shapes.h"
#include "passes/pipeline.h"
#include "passes/verify.h"

namespace {

constexpr size_t kMemoryCap = size_t{64} << 20;
constexpr double kMaxFlops = 2e7;
constexpr double kMaxBytes = 32.0 * (1 << 20);
constexpr int64_t kFoldCap = int64_t{1} << 20;
constexpr int64_t kSymbolicDim = 2;  // what every symbolic input dim is bound to

/// Where external data is resolved: an empty folder, so a fuzzed location never reads real files
/// (removed when the process exits).
const std::filesystem::path& empty_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("fusec_fuzz_empty_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    // The handler runs after function-local statics are destroyed, so it keeps its own copy.
    static const std::filesystem::path* to_remove = new std::filesystem::path(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*to_remove, ec);
    });
    return d;
  }();
  return dir;
}

/// Binds every symbolic input dim; false if some input's rank is unknown (nothing to run then).
bool bind_symbolic_inputs(fusec::Graph& g) {
  for (fusec::Value* v : g.inputs) {
    if (!v->type.shape) return false;
    for (fusec::Dim& d : *v->type.shape)
      if (!d.is_static()) d = fusec::Dim(kSymbolicDim);
  }
  return true;
}

/// True when optimizing and running the graph stays within the caps (all shapes static).
bool small_enough(const fusec::Graph& g) {
  const fusec::GraphCost c = fusec::graph_cost(g);
  return c.nodes_unknown == 0 && c.total.flops <= kMaxFlops && c.total.bytes_read + c.total.bytes_written <= kMaxBytes;
}

void exercise(const std::string& bytes) {
  fusec::ImportOptions io;
  io.allow_newer_versions = true;  // explore past the guard too; the guard itself runs either way
  auto g = fusec::import_onnx_bytes(bytes, empty_dir(), "fuzz.onnx", io);
  const bool runnable = bind_symbolic_inputs(*g);
  fusec::infer_shapes(*g);

  // What fusec writes must load back and say the same thing.
  if (g->nodes().size() < 4096) {
    auto back = fusec::import_onnx_bytes(fusec::export_onnx_bytes(*g), empty_dir(), "re-exported", io);
    fusec::infer_shapes(*back);
  }
  if (!runnable || !small_enough(*g)) return;

  auto optimized = g->clone();
  fusec::PipelineOptions po;
  po.pass.fold_size_cap = kFoldCap;
  fusec::optimize_graph(*optimized, po);
  if (!fusec::cpu::CpuBackend().unsupported(*g).empty()) return;  // compile would refuse: covered above
  // If and Loop are imported, inferred, exported and optimized above but not run: a body's cost is
  // outside graph_cost, and a loop's trip count is data (up to the kernel's 10^7 iterations).
  for (const auto& n : g->nodes())
    if (fusec::has_subgraph(*n)) return;
  // Numeric mismatches on fuzzed data (NaN, inf, huge values) are expected and not findings;
  // verification is here for the path it drives: compile and run both graphs.
  fusec::verify_equivalence(*g, *optimized, 1, 0, fusec::Tolerance{});
}

// ---- structure-aware mutation ----

int64_t interesting_int(std::mt19937_64& rng) {
  static const int64_t kValues[] = {0,
                                    1,
                                    -1,
                                    2,
                                    3,
                                    4,
                                    7,
                                    16,
                                    255,
                                    -2,
                                    INT32_MAX,
                                    int64_t{1} << 31,
                                    int64_t{1} << 32,
                                    int64_t{1} << 62,
                                    INT64_MAX,
                                    INT64_MIN,
                                    INT64_MAX - 1,
                                    -(int64_t{1} << 62)};
  if (rng() % 3 == 0) return static_cast<int64_t>(rng() % 9);  // small values keep models runnable
  return kValues[rng() % (sizeof kValues / sizeof kValues[0])];
}

float interesting_float(std::mt19937_64& rng) {
  static const float kValues[] = {0.0f,   -0.0f,   1.0f,   -1.0f,    0.5f,      2.0f, 1e30f,
                                  -1e30f, 3.4e38f, 1e-45f, INFINITY, -INFINITY, NAN};
  return kValues[rng() % (sizeof kValues / sizeof kValues[0])];
}

void mutate_attribute(onnx::AttributeProto& a, std::mt19937_64& rng) {
  switch (a.type()) {
    case onnx::AttributeProto::INT:
      a.set_i(interesting_int(rng));
      break;
    case onnx::AttributeProto::FLOAT:
      a.set_f(interesting_float(rng));
      break;
    case onnx::AttributeProto::INTS:
      if (a.ints_size() == 0 || rng() % 4 == 0)
        a.add_ints(interesting_int(rng));
      else
        a.set_ints(static_cast<int>(rng() % static_cast<uint64_t>(a.ints_size())), interesting_int(rng));
      break;
    case onnx::AttributeProto::FLOATS:
      if (a.floats_size() > 0)
        a.set_floats(static_cast<int>(rng() % static_cast<uint64_t>(a.floats_size())), interesting_float(rng));
      break;
    default:
      break;
  }
}

/// Changes one element of an int64 or float initializer (raw or typed data), or one of its dims.
void mutate_initializer(onnx::TensorProto& t, std::mt19937_64& rng) {
  if (rng() % 5 == 0 && t.dims_size() > 0) {
    t.set_dims(static_cast<int>(rng() % static_cast<uint64_t>(t.dims_size())), interesting_int(rng));
    return;
  }
  const bool is_int64 = t.data_type() == onnx::TensorProto::INT64;
  const bool is_float = t.data_type() == onnx::TensorProto::FLOAT;
  if (t.has_raw_data() && (is_int64 || is_float)) {
    std::string& raw = *t.mutable_raw_data();
    const size_t esize = is_int64 ? 8 : 4, n = raw.size() / esize;
    if (n == 0) return;
    const size_t i = rng() % n;
    if (is_int64) {
      const int64_t v = interesting_int(rng);
      std::memcpy(&raw[i * 8], &v, 8);
    } else {
      const float v = interesting_float(rng);
      std::memcpy(&raw[i * 4], &v, 4);
    }
  } else if (is_int64 && t.int64_data_size() > 0) {
    t.set_int64_data(static_cast<int>(rng() % static_cast<uint64_t>(t.int64_data_size())), interesting_int(rng));
  } else if (is_float && t.float_data_size() > 0) {
    t.set_float_data(static_cast<int>(rng() % static_cast<uint64_t>(t.float_data_size())), interesting_float(rng));
  }
}

/// One edit to a parsed model.
void mutate_model(onnx::ModelProto& m, std::mt19937_64& rng) {
  static const char* kOps[] = {"Conv",
                               "MaxPool",
                               "AveragePool",
                               "Reshape",
                               "Tile",
                               "Pad",
                               "Concat",
                               "Split",
                               "Slice",
                               "Resize",
                               "DepthToSpace",
                               "SpaceToDepth",
                               "Expand",
                               "Gather",
                               "MatMul",
                               "Gemm",
                               "Transpose",
                               "Flatten",
                               "Squeeze",
                               "Unsqueeze",
                               "ConvTranspose",
                               "TopK",
                               "ReduceSum",
                               "Softmax",
                               "LayerNormalization",
                               "Einsum",
                               "Range",
                               "ConstantOfShape",
                               "Where",
                               "Add",
                               "Mul",
                               "Relu",
                               "Cast",
                               "OneHot",
                               "CumSum",
                               "Trilu"};
  onnx::GraphProto& g = *m.mutable_graph();
  switch (rng() % 8) {
    case 0:
    case 1:
    case 2:  // an attribute
      if (g.node_size() > 0) {
        auto& n = *g.mutable_node(static_cast<int>(rng() % static_cast<uint64_t>(g.node_size())));
        if (n.attribute_size() > 0)
          mutate_attribute(*n.mutable_attribute(static_cast<int>(rng() % static_cast<uint64_t>(n.attribute_size()))),
                           rng);
      }
      break;
    case 3:
    case 4:  // an initializer
      if (g.initializer_size() > 0)
        mutate_initializer(
            *g.mutable_initializer(static_cast<int>(rng() % static_cast<uint64_t>(g.initializer_size()))), rng);
      break;
    case 5:  // a graph input dim
      if (g.input_size() > 0) {
        auto* shape = g.mutable_input(static_cast<int>(rng() % static_cast<uint64_t>(g.input_size())))
                          ->mutable_type()
                          ->mutable_tensor_type()
                          ->mutable_shape();
        if (shape->dim_size() > 0) {
          auto* d = shape->mutable_dim(static_cast<int>(rng() % static_cast<uint64_t>(shape->dim_size())));
          if (rng() % 4 == 0)
            d->set_dim_param("N");
          else
            d->set_dim_value(interesting_int(rng));
        }
      }
      break;
    case 6:  // an op type
      if (g.node_size() > 0)
        g.mutable_node(static_cast<int>(rng() % static_cast<uint64_t>(g.node_size())))
            ->set_op_type(kOps[rng() % (sizeof kOps / sizeof kOps[0])]);
      break;
    case 7:  // an opset version
      if (m.opset_import_size() > 0) m.mutable_opset_import(0)->set_version(static_cast<int64_t>(1 + rng() % 30));
      break;
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::mt19937_64 rng(seed);
  if (rng() % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  onnx::ModelProto m;
  if (!m.ParseFromArray(data, static_cast<int>(size)) || !m.has_graph()) return LLVMFuzzerMutate(data, size, max_size);
  mutate_model(m, rng);
  const std::string out = m.SerializeAsString();
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fusec::host_memory().set_limit(kMemoryCap);
  setenv("FUSEC_NUM_THREADS", "1", 1);  // deterministic, and one core per fuzzing process
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    exercise(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const fusec::Error& e) {
    if (e.kind() == fusec::ErrorKind::Internal) {
      std::fprintf(stderr, "fusec_fuzz: internal error (a bug): %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    // bad_alloc, out_of_range, length_error...: the CLI would report these as internal errors.
    std::fprintf(stderr, "fusec_fuzz: unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
