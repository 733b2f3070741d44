#include <gtest/gtest.h>
#include "temp_dir.h"
#include "onnx/onnx-ml.pb.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <unistd.h>

#include "backend/cpu/cpu_backend.h"
#include "importer/npy.h"
#include "importer/onnx_export.h"
#include "importer/onnx_import.h"
#include "importer/tensor_proto.h"
#include "ir/error.h"
#include "ir/graph_builder.h"
#include "ir/memory_limit.h"
#include "ir/op_schema.h"
#include "cli/shape_flag.h"
#include "passes/infer_shapes.h"

using namespace fusec;
using fusec::test::temp_dir;
namespace fs = std::filesystem;

namespace {

// A graph exercising every attribute kind, an initializer and symbolic dims.
std::unique_ptr<Graph> sample_graph() {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {Dim::sym("N"), 4});
  std::vector<float> w(4 * 300);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f - 3.0f;
  Value* wv = b.initializer("w", Tensor::from_float(w, {4, 300}));
  Value* y = b.node("MatMul", {x, wv}, {}, "mm");
  Node* n = y->producer;
  n->set_attr("f", 1.5f);
  n->set_attr("i", int64_t{-7});
  n->set_attr("s", std::string("text"));
  n->set_attr("t", Tensor::from_int64({1, 2, 3}, {3}));
  n->set_attr("fs", std::vector<float>{1.f, 2.f});
  n->set_attr("is", std::vector<int64_t>{4, 5});
  n->set_attr("ss", std::vector<std::string>{"a", "b"});
  b.output(y);
  auto g = b.build();
  g->meta.producer_name = "unit-test";
  g->meta.props.push_back({"k", "v"});
  return g;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

}  // namespace

TEST(Importer, RoundTripIsBitExact) {
  auto g = sample_graph();
  auto bytes = export_onnx_bytes(*g);
  auto back = import_onnx_bytes(bytes, ".", "mem");
  EXPECT_EQ(graph_difference(*g, *back), "");
  EXPECT_EQ(graph_difference(*back, *import_onnx_bytes(export_onnx_bytes(*back), ".", "mem")), "");
}

TEST(Importer, OmittedOptionalInputsRoundTrip) {
  // ai.fusec Attention with packed QKV: K and V omitted ("" in the file) before a mask, and
  // trailing; each comes back as a left-out input, and the models run to the same numbers.
  for (bool mask : {true, false}) {
    SCOPED_TRACE(mask ? "K, V omitted before the mask" : "K, V omitted at the end");
    GraphBuilder b(17);
    std::vector<Value*> ins = {b.input("qkv", DType::Float32, {2, 3, 24}), nullptr, nullptr};
    if (mask) ins.push_back(b.input("mask", DType::Bool, {2, 1, 1, 3}));
    Value* y = b.node_n("Attention", ins, 1, {attr("q_num_heads", int64_t{2}), attr("kv_num_heads", int64_t{2})},
                        "attn", "ai.fusec")[0];
    b.output(y);
    auto g = b.build();
    onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(export_onnx_bytes(*g)));
    const auto& np = proto.graph().node(0);
    ASSERT_EQ(np.input_size(), mask ? 4 : 3);
    EXPECT_EQ(np.input(1), "");
    EXPECT_EQ(np.input(2), "");
    auto back = import_onnx_bytes(export_onnx_bytes(*g), ".", "mem");
    EXPECT_EQ(graph_difference(*g, *back), "");
    const Node* n = back->nodes()[0].get();
    EXPECT_FALSE(n->input(1));
    EXPECT_FALSE(n->input(2));
    EXPECT_EQ(n->input(3) != nullptr, mask);
    std::vector<Tensor> feeds = {Tensor(DType::Float32, {2, 3, 24})};
    for (int64_t i = 0; i < feeds[0].numel(); ++i) feeds[0].data<float>()[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
    if (mask) {
      feeds.emplace_back(DType::Bool, std::vector<int64_t>{2, 1, 1, 3});
      for (int64_t i = 0; i < 6; ++i) feeds[1].data<uint8_t>()[i] = i != 4;
    }
    infer_shapes(*g);
    infer_shapes(*back);
    const Tensor a = cpu::CpuBackend().compile(*g)->run(feeds)[0], c = cpu::CpuBackend().compile(*back)->run(feeds)[0];
    ASSERT_EQ(a.dims(), (std::vector<int64_t>{2, 3, 8}));
    EXPECT_TRUE(a.bytes_equal(c));
  }
}

TEST(Importer, ExternalDataRoundTrip) {
  fs::path dir = temp_dir("ext");
  auto g = sample_graph();
  EXPECT_TRUE(export_onnx_file(*g, dir / "m.onnx", {true, 1024}));
  EXPECT_TRUE(fs::exists(dir / "m.onnx.data"));
  auto back = import_onnx_file(dir / "m.onnx");
  EXPECT_EQ(graph_difference(*g, *back), "");
  fs::remove_all(dir);
}

TEST(Importer, TypedFieldsAndHalfBits) {
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto::FLOAT16);
  p.add_dims(2);
  p.add_int32_data(0x3c00);  // 1.0
  p.add_int32_data(0xc000);  // -2.0
  Tensor t = tensor_from_proto(p, ".", "t");
  EXPECT_EQ(t.as_double(0), 1.0);
  EXPECT_EQ(t.as_double(1), -2.0);
  p.add_int32_data(0);
  EXPECT_NE(error_of([&] { tensor_from_proto(p, ".", "t"); }).find("has 3 values"), std::string::npos);
}

TEST(Importer, ExternalDataRefusals) {
  fs::path dir = temp_dir("refuse");
  fs::path outside = dir.parent_path() / ("fusec_outside_" + std::to_string(::getpid()) + ".bin");
  { std::ofstream(outside) << std::string(64, 'x'); }
  { std::ofstream(dir / "ok.bin") << std::string(16, '\0'); }
  fs::create_symlink(outside, dir / "link.bin");
  auto ext = [&](const std::string& loc, const std::string& offset, const std::string& length) {
    onnx::TensorProto p;
    p.set_name("w");
    p.set_data_type(onnx::TensorProto::FLOAT);
    p.add_dims(4);
    p.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* k, const std::string& v) {
      if (v.empty()) return;
      auto* e = p.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", loc);
    add("offset", offset);
    add("length", length);
    return error_of([&] { tensor_from_proto(p, dir, "initializer 'w'"); });
  };
  EXPECT_NE(ext("../x.bin", "", "").find("leaves the model's folder"), std::string::npos);
  EXPECT_NE(ext(outside.string(), "", "").find("absolute"), std::string::npos);
  EXPECT_NE(ext("link.bin", "", "").find("outside the model's folder"), std::string::npos);
  EXPECT_NE(ext("missing.bin", "", "").find("does not exist"), std::string::npos);
  EXPECT_NE(ext("ok.bin", "8", "").find("runs past the end"), std::string::npos);
  EXPECT_NE(ext("ok.bin", "", "12").find("does not match"), std::string::npos);
  EXPECT_NE(ext("ok.bin", "-1", "").find("not a number"), std::string::npos);
  fs::remove_all(dir);
  fs::remove(outside);
}

TEST(Importer, MalformedBytes) {
  EXPECT_NE(error_of([] { import_onnx_bytes("", ".", "m"); }).find("empty"), std::string::npos);
  EXPECT_NE(
      error_of([] { import_onnx_bytes(std::string("\xff\xff\xff\x13garbage", 11), ".", "m"); }).find("not a valid"),
      std::string::npos);
  auto bytes = export_onnx_bytes(*sample_graph());
  error_of([&] { import_onnx_bytes(bytes.substr(0, bytes.size() / 2), ".", "m"); });
}

TEST(Importer, UnsupportedNodesAreAllNamed) {
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, {2});
  Value* y = b.node("NoSuchOp", {x}, {}, "first_bad");
  Value* z = b.node("AlsoMissing", {y}, {}, "second_bad");
  b.output(z);
  auto g = b.build();
  std::string msg = error_of([&] { cpu::CpuBackend().compile(*g); });
  EXPECT_NE(msg.find("'first_bad', op NoSuchOp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'second_bad', op AlsoMissing"), std::string::npos) << msg;
}

TEST(ShapeBinding, BatchShapeAndErrors) {
  GraphBuilder b(17);
  b.input("ids", DType::Int64, {Dim::sym("N"), Dim::sym("S")});
  b.input("mask", DType::Int64, {Dim::sym("N"), Dim::sym("S")});
  auto g = b.build();
  ShapeBindings sb;
  sb.batch = 8;
  sb.shapes.push_back(parse_shape_flag("ids:8x128"));
  bind_input_shapes(*g, sb);
  EXPECT_EQ(shape_str(*g->inputs[1]->type.shape), "8x128");  // S bound everywhere

  ShapeBindings bad;
  bad.shapes.push_back(parse_shape_flag("nope:1x2"));
  std::string msg = error_of([&] { bind_input_shapes(*g, bad); });
  EXPECT_NE(msg.find("ids, mask"), std::string::npos) << msg;

  GraphBuilder b2(17);
  b2.input("a", DType::Float32, {Dim::sym("N"), 3});
  b2.input("b", DType::Float32, {Dim::sym("M"), 3});
  auto g2 = b2.build();
  ShapeBindings batch;
  batch.batch = 2;
  EXPECT_NE(error_of([&] { bind_input_shapes(*g2, batch); }).find("ambiguous"), std::string::npos);

  GraphBuilder b3(17);
  b3.input("a", DType::Float32, {1, 3});
  auto g3 = b3.build();
  EXPECT_NE(error_of([&] { bind_input_shapes(*g3, batch); }).find("contradicts"), std::string::npos);
  EXPECT_NE(error_of([] { parse_shape_flag("x:1xA"); }).find("not a dimension"), std::string::npos);
}

TEST(Npy, RoundTrip) {
  fs::path dir = temp_dir("npy");
  Tensor t = Tensor::from_float({1, 2, 3, 4, 5, 6}, {2, 3});
  write_npy(t, dir / "a.npy");
  EXPECT_TRUE(read_npy(dir / "a.npy").bytes_equal(t));
  Tensor s = Tensor::from_int64({7}, {});
  write_npy(s, dir / "s.npy");
  EXPECT_TRUE(read_npy(dir / "s.npy").bytes_equal(s));
  fs::remove_all(dir);
}

TEST(Importer, NewerVersionsAreRefusedUnlessAllowed) {
  auto g = sample_graph();
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(export_onnx_bytes(*g)));
  auto with = [&](auto edit) {
    onnx::ModelProto c = m;
    edit(c);
    return c.SerializeAsString();
  };
  const std::string newer_onnx =
      with([](onnx::ModelProto& c) { c.mutable_opset_import(0)->set_version(kNewestOnnxOpset + 1); });
  const std::string newer_ir = with([](onnx::ModelProto& c) { c.set_ir_version(newest_supported_ir_version() + 1); });
  const std::string newer_fusec = with([](onnx::ModelProto& c) {
    auto* o = c.add_opset_import();
    o->set_domain("ai.fusec");
    o->set_version(kNewestFusecOpset + 1);
  });
  const std::string other_domain = with([](onnx::ModelProto& c) {
    auto* o = c.add_opset_import();
    o->set_domain("com.example");
    o->set_version(1000);
  });
  std::string e = error_of([&] { import_onnx_bytes(newer_onnx, ".", "m.onnx"); });
  EXPECT_NE(e.find("opset " + std::to_string(kNewestOnnxOpset + 1) + " of domain ai.onnx"), std::string::npos) << e;
  EXPECT_NE(e.find("(" + std::to_string(kNewestOnnxOpset) + ")"), std::string::npos) << e;
  EXPECT_NE(e.find("--allow-newer-opset"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { import_onnx_bytes(newer_ir, ".", "m.onnx"); }).find("IR version"), std::string::npos);
  EXPECT_NE(error_of([&] { import_onnx_bytes(newer_fusec, ".", "m.onnx"); }).find("domain ai.fusec"),
            std::string::npos);
  import_onnx_bytes(other_domain, ".", "m.onnx");  // domains fusec has no ops in: their nodes report themselves

  std::vector<std::string> warnings;
  ImportOptions allow;
  allow.allow_newer_versions = true;
  allow.warn = [&](const std::string& w) { warnings.push_back(w); };
  for (const auto* bytes : {&newer_onnx, &newer_ir, &newer_fusec}) import_onnx_bytes(*bytes, ".", "m.onnx", allow);
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_NE(warnings[0].find("loading it anyway"), std::string::npos) << warnings[0];
}

TEST(Importer, DeclaredSizeIsCheckedBeforeAllocating) {
  // 2^31 floats declared, 4 bytes given: refused from the data's size, with a 1 MiB limit in force
  // (an allocation first would fail with a memory-limit error instead).
  MemoryBudget& host = host_memory();
  const size_t old_limit = host.limit();
  host.set_limit(host.used() + (1 << 20));
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto::FLOAT);
  p.add_dims(int64_t{1} << 31);
  p.set_raw_data(std::string(4, '\0'));
  EXPECT_NE(error_of([&] { tensor_from_proto(p, ".", "initializer 'W'"); }).find("raw data has 4 bytes"),
            std::string::npos);
  p.clear_raw_data();
  p.add_float_data(1.0f);
  EXPECT_NE(error_of([&] { tensor_from_proto(p, ".", "initializer 'W'"); }).find("has 1 values"), std::string::npos);
  // Consistent but over the limit: a memory-limit error naming the tensor.
  p.clear_float_data();
  p.clear_dims();
  p.add_dims(1 << 20);
  p.set_raw_data(std::string(4 << 20, '\0'));
  const std::string e = error_of([&] { tensor_from_proto(p, ".", "initializer 'W'"); });
  EXPECT_NE(e.find("initializer 'W' needs 4.00 MiB"), std::string::npos) << e;
  host.set_limit(old_limit);
}
