// Weights passes derive (ir/derived_weight.h) built in fusec's scratch file
// (importer/scratch_weights.h): copied file to file from mapped sources, mapped back, and written
// to an output file to file again; built in memory where the store cannot take them.
#include <gtest/gtest.h>
#include "temp_dir.h"
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "importer/mapped_file.h"
#include "importer/onnx_export.h"
#include "importer/onnx_import.h"
#include "importer/scratch_weights.h"
#include "ir/derived_weight.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "ir/memory_limit.h"

using namespace fusec;
using fusec::test::temp_dir;
namespace fs = std::filesystem;

namespace {

/// Installs a store for one test and takes it away after.
struct StoreGuard {
  explicit StoreGuard(std::shared_ptr<DerivedWeightStore> s) { set_derived_weight_store(std::move(s)); }
  ~StoreGuard() { set_derived_weight_store(nullptr); }
};

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 251) * scale + 0.25f;
  return v;
}

/// Two mapped weights, a [64, 96] and a [64, 32], from a model written with external data.
std::unique_ptr<Graph> mapped_weights(const fs::path& dir) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 64});
  Value* wa = b.initializer("wa", Tensor::from_float(ramp(64 * 96, 0.5f), {64, 96}));
  Value* wb = b.initializer("wb", Tensor::from_float(ramp(64 * 32, -0.25f), {64, 32}));
  b.output(b.node("MatMul", {x, wa}, {}, "ma"));
  b.output(b.node("MatMul", {x, wb}, {}, "mb"));
  EXPECT_TRUE(export_onnx_file(*b.build(), dir / "src.onnx", {true, 1024}));
  return import_onnx_file(dir / "src.onnx");
}

/// Rows of `a` then `b` side by side, then `zeros` zero columns: the runs and the expected bytes.
struct Concat {
  std::vector<ByteRun> runs;
  std::vector<float> expect;
};
Concat side_by_side(const Tensor& a, const Tensor& b, int64_t zeros) {
  Concat c;
  const int64_t rows = a.dim(0), na = a.dim(1), nb = b.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    append_run(c.runs, a.data<float>() + r * na, static_cast<size_t>(na) * 4);
    append_run(c.runs, b.data<float>() + r * nb, static_cast<size_t>(nb) * 4);
    append_run(c.runs, nullptr, static_cast<size_t>(zeros) * 4);
    c.expect.insert(c.expect.end(), a.data<float>() + r * na, a.data<float>() + (r + 1) * na);
    c.expect.insert(c.expect.end(), b.data<float>() + r * nb, b.data<float>() + (r + 1) * nb);
    c.expect.insert(c.expect.end(), static_cast<size_t>(zeros), 0.0f);
  }
  return c;
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

bool same_floats(const Tensor& t, const std::vector<float>& v) {
  return t.nbytes() == v.size() * 4 && std::memcmp(t.raw(), v.data(), t.nbytes()) == 0;
}

}  // namespace

TEST(ScratchWeights, AppendRunMergesContinuedRuns) {
  std::vector<float> v(8);
  std::vector<ByteRun> runs;
  append_run(runs, v.data(), 8);
  append_run(runs, v.data() + 2, 8);  // continues it
  append_run(runs, nullptr, 4);
  append_run(runs, nullptr, 4);       // more zeros
  append_run(runs, v.data() + 6, 0);  // nothing
  append_run(runs, v.data() + 7, 4);  // a gap before it
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[0].bytes, 16u);
  EXPECT_EQ(runs[1].src, nullptr);
  EXPECT_EQ(runs[1].bytes, 8u);
  EXPECT_EQ(runs[2].src, v.data() + 7);
}

TEST(ScratchWeights, DerivedFromMappedWeightsLivesInTheScratchFileNotInMemory) {
  fs::path dir = temp_dir("scratch");
  auto g = mapped_weights(dir);
  const Tensor& wa = *g->find_value("wa")->initializer;
  const Tensor& wb = *g->find_value("wb")->initializer;
  ASSERT_TRUE(find_mapped_range(wa.raw(), wa.nbytes()));
  auto store = std::make_shared<ScratchWeightFile>(dir / "scratch", 1);
  fs::create_directories(dir / "scratch");
  StoreGuard guard(store);

  const Concat c = side_by_side(wa, wb, 8);
  const size_t used_before = host_memory().used();
  const size_t fds_before = open_descriptors();
  Tensor t = derived_weight(DType::Float32, {64, 136}, c.runs);
  EXPECT_EQ(host_memory().used(), used_before);  // no tensor storage was allocated
  EXPECT_EQ(store->bytes_stored(), t.nbytes());
  auto range = find_mapped_range(t.raw(), t.nbytes());
  ASSERT_TRUE(range);
  EXPECT_NE(range->file->path().string().find("scratch file"), std::string::npos);
  EXPECT_TRUE(same_floats(t, c.expect));
  // Nothing is left in the folder: the file has no name.
  EXPECT_TRUE(fs::is_empty(dir / "scratch"));

  // A second weight from memory (not mapped) lands after the first, page-aligned, both intact.
  std::vector<float> mem = ramp(1000, 3.0f);
  Tensor u = derived_weight(DType::Float32, {1000}, {{mem.data(), mem.size() * 4}});
  auto urange = find_mapped_range(u.raw(), u.nbytes());
  ASSERT_TRUE(urange);
  EXPECT_EQ(urange->offset % 4096, 0u);
  EXPECT_GE(urange->offset, range->offset + t.nbytes());
  EXPECT_TRUE(same_floats(u, mem));
  EXPECT_TRUE(same_floats(t, c.expect));
  EXPECT_EQ(open_descriptors(), fds_before + 1);  // the file's one descriptor, shared by its maps

  // Written into a model with external data, it is copied from the scratch file and reads back.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 64});
  b.output(b.node("MatMul", {x, b.initializer("w", t)}, {}, "m"));
  ASSERT_TRUE(export_onnx_file(*b.build(), dir / "out.onnx", {true, 1024}));
  auto back = import_onnx_file(dir / "out.onnx");
  EXPECT_TRUE(same_floats(*back->find_value("w")->initializer, c.expect));
  fs::remove_all(dir);
}

TEST(ScratchWeights, SmallWeightsAndAnUnusableFolderAreBuiltInMemory) {
  fs::path dir = temp_dir("scratch_fallback");
  auto g = mapped_weights(dir);
  const Tensor& wa = *g->find_value("wa")->initializer;
  const Tensor& wb = *g->find_value("wb")->initializer;
  const Concat c = side_by_side(wa, wb, 3);
  {
    StoreGuard guard(std::make_shared<ScratchWeightFile>(dir, size_t{1} << 20));  // under the minimum
    Tensor t = derived_weight(DType::Float32, {64, 131}, c.runs);
    EXPECT_FALSE(find_mapped_range(t.raw(), t.nbytes()));
    EXPECT_TRUE(same_floats(t, c.expect));
  }
  {  // a folder that is not there: memory, and one warning naming it however many weights follow
    std::vector<std::string> warned;
    StoreGuard guard(std::make_shared<ScratchWeightFile>(dir / "no" / "such" / "folder", 1,
                                                         [&](const std::string& w) { warned.push_back(w); }));
    for (int i = 0; i < 2; ++i) {
      Tensor t = derived_weight(DType::Float32, {64, 131}, c.runs);
      EXPECT_FALSE(find_mapped_range(t.raw(), t.nbytes()));
      EXPECT_TRUE(same_floats(t, c.expect));
    }
    ASSERT_EQ(warned.size(), 1u);
    EXPECT_NE(warned[0].find((dir / "no" / "such" / "folder").string()), std::string::npos) << warned[0];
    EXPECT_NE(warned[0].find("No such file"), std::string::npos) << warned[0];
  }
  {  // no store at all: memory
    Tensor t = derived_weight(DType::Float32, {64, 131}, c.runs);
    EXPECT_TRUE(same_floats(t, c.expect));
  }
  EXPECT_THROW(derived_weight(DType::Float32, {64, 130}, c.runs), Error);  // runs that do not cover it
  fs::remove_all(dir);
}
