// How fusec handles weights at scale: external data mapped (not read) at import, unchanged weights
// copied file to file on export, inline tensors streamed instead of copied into a second proto,
// and every output file replaced whole or not at all.
#include <gtest/gtest.h>
#include "temp_dir.h"
#include "onnx/onnx-ml.pb.h"
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "importer/output_file.h"
#include "importer/mapped_file.h"
#include "importer/onnx_export.h"
#include "importer/onnx_import.h"
#include "importer/tensor_proto.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "ir/memory_limit.h"

using namespace fusec;
using fusec::test::temp_dir;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// x [2, 256] -> MatMul with w1 [256, 256] -> Add b [256] -> MatMul w2 [256, 8]; plus a tiny
/// int64 initializer that stays inline.
std::unique_ptr<Graph> weights_graph() {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2, 256});
  auto floats = [](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 97) * scale;
    return v;
  };
  Value* w1 = b.initializer("w1", Tensor::from_float(floats(256 * 256, 0.01f), {256, 256}));
  Value* bias = b.initializer("b", Tensor::from_float(floats(256, 0.5f), {256}));
  Value* w2 = b.initializer("w2", Tensor::from_float(floats(256 * 8, -0.02f), {256, 8}));
  Value* shape = b.initializer("shape", Tensor::from_int64({16, 1}, {2}));
  Value* h = b.node("Add", {b.node("MatMul", {x, w1}, {}, "mm1"), bias}, {}, "add");
  b.output(b.node("Reshape", {b.node("MatMul", {h, w2}, {}, "mm2"), shape}, {}, "reshape"));
  return b.build();
}

}  // namespace

TEST(LargeModels, ExternalDataIsMappedNotRead) {
  fs::path dir = temp_dir("mapped");
  auto g = weights_graph();
  ASSERT_TRUE(export_onnx_file(*g, dir / "m.onnx", {true, 1024}));
  const size_t used_before = host_memory().used();
  auto back = import_onnx_file(dir / "m.onnx");
  EXPECT_EQ(graph_difference(*g, *back), "");
  // w1, b, w2 are views into the mapped m.onnx.data (page aligned by the writer): no host memory.
  for (const char* name : {"w1", "b", "w2"}) {
    const Tensor& t = *back->find_value(name)->initializer;
    auto range = find_mapped_range(t.raw(), t.nbytes());
    ASSERT_TRUE(range) << name;
    EXPECT_EQ(range->file->path().filename(), "m.onnx.data");
    EXPECT_EQ(range->offset % 4096, 0u);
  }
  EXPECT_FALSE(find_mapped_range(back->find_value("shape")->initializer->raw(), 16));
  EXPECT_LT(host_memory().used() - used_before, size_t{4096});
  fs::remove_all(dir);
}

TEST(LargeModels, UnalignedExternalDataIsRead) {
  fs::path dir = temp_dir("unaligned");
  std::string bytes(3, '\0');  // float data at offset 3: not a valid float address in a map
  std::vector<float> v{1.5f, -2.0f};
  bytes.append(reinterpret_cast<const char*>(v.data()), 8);
  std::ofstream(dir / "w.bin", std::ios::binary) << bytes;
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto::FLOAT);
  p.add_dims(2);
  p.set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [k, val] : {std::pair{"location", "w.bin"}, {"offset", "3"}, {"length", "8"}}) {
    auto* e = p.add_external_data();
    e->set_key(k);
    e->set_value(val);
  }
  MappedFiles maps;
  Tensor t = tensor_from_proto(p, dir, "initializer 'w'", &maps);
  EXPECT_FALSE(find_mapped_range(t.raw(), t.nbytes()));
  EXPECT_EQ(t.data<float>()[0], 1.5f);
  EXPECT_EQ(t.data<float>()[1], -2.0f);
  fs::remove_all(dir);
}

TEST(LargeModels, ReExportCopiesMappedWeightsAndStreamsInlineOnes) {
  fs::path dir = temp_dir("reexport");
  auto g = weights_graph();
  ASSERT_TRUE(export_onnx_file(*g, dir / "a.onnx", {true, 1024}));
  auto a = import_onnx_file(dir / "a.onnx");
  // External again (weights copied from a.onnx.data in the kernel), then inline (streamed).
  ASSERT_TRUE(export_onnx_file(*a, dir / "b.onnx", {true, 1024}));
  EXPECT_EQ(read_all(dir / "a.onnx.data"), read_all(dir / "b.onnx.data"));
  ASSERT_FALSE(export_onnx_file(*a, dir / "c.onnx", {false, 1024}));
  EXPECT_FALSE(fs::exists(dir / "c.onnx.data"));
  // The streamed file is the same model protobuf would have written, field order aside.
  onnx::ModelProto streamed, built;
  ASSERT_TRUE(streamed.ParseFromString(read_all(dir / "c.onnx")));
  ASSERT_TRUE(built.ParseFromString(export_onnx_bytes(*a)));
  EXPECT_EQ(streamed.SerializeAsString(), built.SerializeAsString());
  for (const char* f : {"b.onnx", "c.onnx"}) EXPECT_EQ(graph_difference(*g, *import_onnx_file(dir / f)), "") << f;
  fs::remove_all(dir);
}

TEST(LargeModels, OutputsAreReplacedWholeOrNotAtAll) {
  fs::path dir = temp_dir("atomic");
  const fs::path dest = dir / "out.onnx";
  write_output_file(dest, "old contents");
  {
    OutputFile f(dest);
    f.write("half of a new fi", 16);
    // destroyed without commit(): an interrupted or failed write
  }
  EXPECT_EQ(read_all(dest), "old contents");
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1u) << "the temporary file was left behind";
  // A model whose external data is the file being replaced: the map keeps reading the old inode.
  auto g = weights_graph();
  ASSERT_TRUE(export_onnx_file(*g, dir / "m.onnx", {true, 1024}));
  auto loaded = import_onnx_file(dir / "m.onnx");
  ASSERT_TRUE(export_onnx_file(*loaded, dir / "m.onnx", {true, 1024}));  // over its own source
  EXPECT_EQ(graph_difference(*g, *import_onnx_file(dir / "m.onnx")), "");
  EXPECT_EQ(graph_difference(*g, *loaded), "");
  fs::remove_all(dir);
}
