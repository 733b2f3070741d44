// If and Loop: bodies imported with the outer values they read as the node's last inputs, run on
// the CPU reference (branches of any shape, loop-carried values, scan outputs, nested bodies),
// written back verbatim, and a captured value a pass replaced given its old name back on export.
#include <gtest/gtest.h>
#include "onnx/onnx-ml.pb.h"

#include "backend/cpu/cpu_backend.h"
#include "importer/onnx_export.h"
#include "importer/onnx_import.h"
#include "ir/error.h"
#include "ir/subgraph.h"
#include "passes/infer_shapes.h"
#include "passes/pipeline.h"

using namespace fusec;

namespace {

void typed(onnx::ValueInfoProto* vi, const std::string& name, int elem, std::vector<int64_t> dims) {
  vi->set_name(name);
  auto* t = vi->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  auto* s = t->mutable_shape();
  for (int64_t d : dims) s->add_dim()->set_dim_value(d);
}

onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op, std::vector<std::string> ins,
                      std::vector<std::string> outs, const std::string& name) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}

onnx::GraphProto* graph_attr(onnx::NodeProto* n, const std::string& name) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  return a->mutable_g();
}

void int_attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

constexpr int kFloat = onnx::TensorProto::FLOAT, kBool = onnx::TensorProto::BOOL, kInt64 = onnx::TensorProto::INT64;

onnx::ModelProto model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  return m;
}

std::unique_ptr<Graph> import(const onnx::ModelProto& m) { return import_onnx_bytes(m.SerializeAsString(), ".", "t"); }

/// x [2,3], flag: a = Relu(x) (also read by Sigmoid), y = If(flag) { a + w } else { a * x }.
onnx::ModelProto if_model() {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  typed(g->add_input(), "x", kFloat, {2, 3});
  typed(g->add_input(), "flag", kBool, {});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(kFloat);
  w->add_dims(3);
  for (float v : {10.f, 20.f, 30.f}) w->add_float_data(v);
  node(g, "Relu", {"x"}, {"a"}, "relu");
  node(g, "Sigmoid", {"a"}, {"z"}, "sigmoid");
  auto* n = node(g, "If", {"flag"}, {"y"}, "if");
  auto* t = graph_attr(n, "then_branch");
  node(t, "Add", {"a", "w"}, {"t"}, "then_add");
  typed(t->add_output(), "t", kFloat, {2, 3});
  auto* e = graph_attr(n, "else_branch");
  node(e, "Mul", {"a", "x"}, {"e"}, "else_mul");
  typed(e->add_output(), "e", kFloat, {2, 3});
  typed(g->add_output(), "y", kFloat, {2, 3});
  typed(g->add_output(), "z", kFloat, {2, 3});
  return m;
}

Tensor flag(bool v) {
  Tensor t(DType::Bool, {});
  t.data<uint8_t>()[0] = v;
  return t;
}

std::vector<Tensor> run_cpu(const Graph& g, const std::vector<Tensor>& inputs) {
  return cpu::CpuBackend().compile(g)->run(inputs);
}

const Tensor kX = Tensor::from_float({-1, 2, -3, 4, -5, 6}, {2, 3});

void expect_if_results(const Graph& g) {
  auto then = run_cpu(g, {kX, flag(true)});
  auto els = run_cpu(g, {kX, flag(false)});
  const float w[3] = {10, 20, 30};
  for (int i = 0; i < 6; ++i) {
    const float x = kX.data<float>()[i], a = std::max(x, 0.f);
    EXPECT_FLOAT_EQ(then[0].data<float>()[i], a + w[i % 3]);
    EXPECT_FLOAT_EQ(els[0].data<float>()[i], a * x);
  }
}

}  // namespace

TEST(ControlFlow, IfCapturesTheOuterValuesItsBranchesRead) {
  auto g = import(if_model());
  const Node* n = nullptr;
  for (const auto& p : g->nodes())
    if (p->op_type == "If") n = p.get();
  ASSERT_TRUE(n);
  // Each branch's reads, once each, in the order first read: then reads a and w, else a and x.
  ASSERT_EQ(n->inputs.size(), 4u);
  EXPECT_EQ(declared_input_count(*n), 1u);
  EXPECT_EQ(n->inputs[1]->name, "a");
  EXPECT_EQ(n->inputs[2]->name, "w");
  EXPECT_EQ(n->inputs[3]->name, "x");
  const SubGraph* t = subgraph_attr(*n, "then_branch");
  ASSERT_TRUE(t && t->body);
  EXPECT_EQ(t->captured, (std::vector<std::string>{"a", "w", "x"}));
  EXPECT_EQ(t->body->inputs.size(), 3u);
  expect_if_results(*g);
}

TEST(ControlFlow, AnExecutableKeepsItsBranchesAndCompilesThemAgainForNewShapes) {
  // x [n, 3]: one executable run with each branch, at two sizes, in turn. Each branch is compiled
  // on its first run and kept (backend/cpu/kernel.h's StepCache); a run at another size must not
  // reuse the plan made for the last one.
  onnx::ModelProto m = if_model();
  auto* g = m.mutable_graph();
  auto batch_dim = [](onnx::ValueInfoProto* vi) {
    vi->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("n");
  };
  batch_dim(g->mutable_input(0));
  for (auto& out : *g->mutable_output()) batch_dim(&out);
  for (int a = 0; a < 2; ++a) batch_dim(g->mutable_node(2)->mutable_attribute(a)->mutable_g()->mutable_output(0));
  auto graph = import(m);
  auto exe = cpu::CpuBackend().compile(*graph);
  const float w[3] = {10, 20, 30};
  for (int64_t rows : {2, 4, 4, 1, 2}) {
    for (bool then : {true, false}) {
      std::vector<float> xs;
      for (int64_t i = 0; i < rows * 3; ++i) xs.push_back(static_cast<float>((i * 7) % 11) - 5.0f);
      const Tensor x = Tensor::from_float(xs, {rows, 3});
      auto out = exe->run({x, flag(then)});
      ASSERT_EQ(out[0].dims(), (std::vector<int64_t>{rows, 3}));
      for (int64_t i = 0; i < rows * 3; ++i) {
        const float a = std::max(xs[i], 0.f);
        EXPECT_FLOAT_EQ(out[0].data<float>()[i], then ? a + w[i % 3] : a * xs[i]) << rows << " rows, at " << i;
      }
    }
  }
}

TEST(ControlFlow, IfInfersItsOutputFromTheBranchesAndTheKnownCondition) {
  auto g = import(if_model());
  infer_shapes(*g);
  Value* y = g->find_value("y");
  EXPECT_EQ(y->type.dtype, DType::Float32);
  ASSERT_TRUE(y->type.shape);
  EXPECT_EQ(*y->type.shape, (Shape{Dim(2), Dim(3)}));
}

TEST(ControlFlow, RoundTripIsExactAndAReplacedCapturedValueGetsItsNameBack) {
  auto g = import(if_model());
  auto again = import_onnx_bytes(export_onnx_bytes(*g), ".", "re-exported");
  EXPECT_EQ(graph_difference(*g, *again), "");
  // The captured `a` replaced by another value (as a pass's replace_all_uses does): the branches
  // still read "a", so the export writes Identity(new) -> a before the If.
  Value* a = g->find_value("a");
  Value* a2 = g->add_value("a_twin");
  a2->type = a->type;
  g->add_node("Relu", {g->find_value("x")}, {a2}, "relu_twin");
  g->replace_all_uses(a, a2);
  g->remove_node(a->producer);
  g->remove_unused_values();
  g->topo_sort();
  auto back = import_onnx_bytes(export_onnx_bytes(*g), ".", "re-exported");
  bool identity = false;
  for (const auto& p : back->nodes()) identity |= p->op_type == "Identity" && p->outputs[0]->name == "a";
  EXPECT_TRUE(identity);
  expect_if_results(*back);
}

TEST(ControlFlow, TheOptimizerKeepsTheIfAndWhatItReads) {
  auto g = import(if_model());
  infer_shapes(*g);
  PipelineOptions opts;
  optimize_graph(*g, opts);
  int ifs = 0;
  for (const auto& p : g->nodes()) ifs += p->op_type == "If";
  EXPECT_EQ(ifs, 1);
  expect_if_results(*g);
}

namespace {

/// v = Loop(M, cond, v0) { v + s (s captured), scan (v + s)·i, cond_out } with [2]-sized values.
/// `until`: no trip count; the body's condition is i < until.
onnx::ModelProto loop_model(bool counted, int64_t until = 0) {
  onnx::ModelProto m = model();
  auto* g = m.mutable_graph();
  typed(g->add_input(), "n", kInt64, {});
  typed(g->add_input(), "v0", kFloat, {2});
  typed(g->add_input(), "s", kFloat, {2});
  auto* n = node(g, "Loop", {counted ? "n" : "", "", "v0"}, {"v", "scan"}, "loop");
  auto* b = graph_attr(n, "body");
  typed(b->add_input(), "i", kInt64, {});
  typed(b->add_input(), "c", kBool, {});
  typed(b->add_input(), "v_in", kFloat, {2});
  node(b, "Add", {"v_in", "s"}, {"v_out"}, "step");
  auto* cast = node(b, "Cast", {"i"}, {"i_f"}, "i_as_float");
  int_attr(cast, "to", kFloat);
  node(b, "Mul", {"v_out", "i_f"}, {"slice"}, "scan_mul");
  if (counted) {
    node(b, "Identity", {"c"}, {"c_out"}, "keep_going");
  } else {
    auto* limit = b->add_initializer();
    limit->set_name("limit");
    limit->set_data_type(kInt64);
    limit->add_int64_data(until);
    node(b, "Less", {"i", "limit"}, {"c_out"}, "below_limit");
  }
  typed(b->add_output(), "c_out", kBool, {});
  typed(b->add_output(), "v_out", kFloat, {2});
  typed(b->add_output(), "slice", kFloat, {2});
  typed(g->add_output(), "v", kFloat, {2});
  typed(g->add_output(), "scan", kFloat, {});
  g->mutable_output(1)->mutable_type()->mutable_tensor_type()->clear_shape();
  return m;
}

Tensor scalar_i64(int64_t v) { return Tensor::from_int64({v}, {}); }

void expect_loop(const std::vector<Tensor>& out, int64_t iterations) {
  const float v0[2] = {1, 2}, s[2] = {0.5f, -1};
  ASSERT_EQ(out[1].dims(), (std::vector<int64_t>{iterations, 2}));
  for (int k = 0; k < 2; ++k) {
    EXPECT_FLOAT_EQ(out[0].data<float>()[k], v0[k] + iterations * s[k]);
    for (int64_t i = 0; i < iterations; ++i)
      EXPECT_FLOAT_EQ(out[1].data<float>()[i * 2 + k], (v0[k] + (i + 1) * s[k]) * static_cast<float>(i));
  }
}

const Tensor kV0 = Tensor::from_float({1, 2}, {2});
const Tensor kS = Tensor::from_float({0.5f, -1}, {2});

}  // namespace

TEST(ControlFlow, LoopCarriesValuesAndStacksScanOutputs) {
  auto g = import(loop_model(true));
  expect_loop(run_cpu(*g, {scalar_i64(3), kV0, kS}), 3);
  expect_loop(run_cpu(*g, {scalar_i64(1), kV0, kS}), 1);
  // No iteration: the initial value, and an empty scan output of the declared slice shape.
  expect_loop(run_cpu(*g, {scalar_i64(0), kV0, kS}), 0);
}

TEST(ControlFlow, LoopWithoutATripCountRunsUntilItsConditionTurnsFalse) {
  auto g = import(loop_model(false, 4));
  // i = 0..4 run (the body computes i < 4 after its step, so the fifth iteration is the last).
  expect_loop(run_cpu(*g, {scalar_i64(0), kV0, kS}), 5);
}

TEST(ControlFlow, ACountedLoopsScanOutputHasItsTripCountWhenTheCountIsKnown) {
  onnx::ModelProto m = loop_model(true);
  // M a constant 3: the scan output is [3, 2] before anything runs.
  auto* g = m.mutable_graph();
  g->mutable_input()->erase(g->mutable_input()->begin());
  auto* c = g->add_initializer();
  c->set_name("n");
  c->set_data_type(kInt64);
  c->add_int64_data(3);
  auto graph = import(m);
  infer_shapes(*graph);
  const Value* scan = graph->find_value("scan");
  ASSERT_TRUE(scan->type.shape);
  EXPECT_EQ(*scan->type.shape, (Shape{Dim(3), Dim(2)}));
  expect_loop(run_cpu(*graph, {kV0, kS}), 3);
}

TEST(ControlFlow, AnIfInsideALoopReadsAValueFromOutsideBoth) {
  // The body's If adds `s`, which neither the If's body nor the Loop's defines: both capture it.
  onnx::ModelProto m = loop_model(true);
  auto* body = m.mutable_graph()->mutable_node(0)->mutable_attribute(0)->mutable_g();
  for (auto& n : *body->mutable_node())
    if (n.name() == "step") {
      n.set_op_type("If");
      n.clear_input();
      n.add_input("c");
      auto* t = graph_attr(&n, "then_branch");
      node(t, "Add", {"v_in", "s"}, {"tv"}, "inner_add");
      typed(t->add_output(), "tv", kFloat, {2});
      auto* e = graph_attr(&n, "else_branch");
      node(e, "Sub", {"v_in", "s"}, {"ev"}, "inner_sub");
      typed(e->add_output(), "ev", kFloat, {2});
    }
  auto g = import(m);
  const Node* loop = g->nodes()[0].get();
  const SubGraph* sg = subgraph_attr(*loop, "body");
  ASSERT_TRUE(sg && sg->body);
  EXPECT_EQ(sg->captured, (std::vector<std::string>{"s"}));
  expect_loop(run_cpu(*g, {scalar_i64(3), kV0, kS}), 3);
}

TEST(ControlFlow, BadConditionsAndBodiesAreOneClearError) {
  onnx::ModelProto any_flag = if_model();  // a flag of any shape: the If itself must refuse two
  any_flag.mutable_graph()->mutable_input(1)->mutable_type()->mutable_tensor_type()->clear_shape();
  auto g = import(any_flag);
  Tensor two(DType::Bool, {2});
  try {
    run_cpu(*g, {kX, two});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("the condition has 2 elements, not 1"), std::string::npos) << e.what();
  }
  // A branch that reads a name nothing defines.
  onnx::ModelProto m = if_model();
  m.mutable_graph()->mutable_node(2)->mutable_attribute(0)->mutable_g()->mutable_node(0)->set_input(1, "nowhere");
  try {
    import(m);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("reads 'nowhere', which is not defined outside it"), std::string::npos)
        << e.what();
  }
}

TEST(ControlFlow, ALoopOfConstantsIsNotFoldedOrEvaluatedByInference) {
  // Every input a constant: folding it would run the loop at optimize time (its trip count could be
  // anything), so constant folding and shape-value propagation leave it to run time.
  onnx::ModelProto m = loop_model(true);
  auto* g = m.mutable_graph();
  g->clear_input();
  auto* c = g->add_initializer();
  c->set_name("n");
  c->set_data_type(kInt64);
  c->add_int64_data(3);
  for (const auto& [name, values] : {std::pair<std::string, std::vector<float>>{"v0", {1, 2}}, {"s", {0.5f, -1}}}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(kFloat);
    t->add_dims(2);
    for (float v : values) t->add_float_data(v);
  }
  // Read by other nodes (negated twice): folding leaves a node that writes a graph output alone.
  for (int i = 0; i < 2; ++i) {
    const std::string name = g->output(i).name();
    node(g, "Neg", {name}, {name + "_neg"}, name + "_neg");
    node(g, "Neg", {name + "_neg"}, {name + "_read"}, name + "_back");
    g->mutable_output(i)->set_name(name + "_read");
  }
  auto graph = import(m);
  infer_shapes(*graph);
  PipelineOptions opts;
  optimize_graph(*graph, opts);
  int loops = 0;
  for (const auto& p : graph->nodes()) loops += p->op_type == "Loop";
  EXPECT_EQ(loops, 1);
  expect_loop(run_cpu(*graph, {}), 3);
}

TEST(ControlFlow, ABranchThatHandsBackACapturedValueOwnsItsOutput) {
  // then: y = a itself. a's memory is free once the If has run, and the ops after it (in the
  // outer plan's arena) may take it: y must not share it.
  onnx::ModelProto m = if_model();
  auto* g = m.mutable_graph();
  auto* t = g->mutable_node(2)->mutable_attribute(0)->mutable_g();
  t->clear_node();
  t->mutable_output(0)->set_name("a");
  // After the If: b = Neg(x), c = b * b, d = c + b, all [2,3], written while y is still live.
  node(g, "Neg", {"x"}, {"b"}, "neg");
  node(g, "Mul", {"b", "b"}, {"c"}, "square");
  node(g, "Add", {"c", "b"}, {"d"}, "sum");
  typed(g->add_output(), "d", kFloat, {2, 3});
  auto graph = import(m);
  infer_shapes(*graph);
  auto out = run_cpu(*graph, {kX, flag(true)});
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out[0].data<float>()[i], std::max(kX.data<float>()[i], 0.f));
}

TEST(ControlFlow, ALoopThatRunsNoIterationOwnsItsOutput) {
  // v0 computed in the graph (so it may live in the arena), the loop run 0 times, then more ops:
  // the loop's output must not share v0's storage.
  onnx::ModelProto m = loop_model(true);
  auto* g = m.mutable_graph();
  g->mutable_input(1)->set_name("v0_raw");
  onnx::NodeProto relu;
  relu.set_op_type("Relu");
  relu.set_name("relu");
  relu.add_input("v0_raw");
  relu.add_output("v0");
  *g->add_node() = relu;
  node(g, "Neg", {"s"}, {"e"}, "neg");
  node(g, "Mul", {"e", "e"}, {"f"}, "square");
  node(g, "Add", {"f", "e"}, {"h"}, "sum");
  typed(g->add_output(), "h", kFloat, {2});
  auto graph = import(m);
  infer_shapes(*graph);
  expect_loop(run_cpu(*graph, {scalar_i64(0), kV0, kS}), 0);
}
