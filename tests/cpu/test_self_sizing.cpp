// Kernels registered with Writes::Itself (backend/cpu/kernel.h) make their outputs themselves: the
// executor runs no inference for them at run time. For the ops whose data sizes their outputs
// (NonZero, Unique, NonMaxSuppression), inference still sizes the same outputs wherever the inputs
// are constant (at import, when folding), so the two must agree. Each case runs the kernel alone
// (cpu::evaluate_node) and inference with every input value known, and compares types and shapes.
// Every such kernel must have a case here, bar If and Loop, whose bodies decide their outputs.
#include <set>

#include "backend/cpu/kernel.h"
#include "node_case.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

using Case = NodeCase;

void expect_kernel_matches_inference(const Case& c) {
  SCOPED_TRACE(c.op + " with " + std::to_string(c.inputs.size()) + " inputs");
  const InferredNode n = infer_node(c);
  ASSERT_NE(n.schema, nullptr);
  const std::vector<Tensor> outs = cpu::evaluate_node(*n.node, n.opset, n.values);
  ASSERT_EQ(outs.size(), c.outputs);
  for (size_t i = 0; i < c.outputs; ++i) {
    const TypeInfo& t = n.outputs[i];
    ASSERT_TRUE(t.shape && is_static(*t.shape)) << "inference left output " << i << " unsized";
    EXPECT_EQ(outs[i].dtype(), t.dtype) << "output " << i;
    EXPECT_EQ(dims_str(outs[i].dims()), dims_str(static_dims(*t.shape))) << "output " << i;
  }
}

Tensor u(std::vector<int64_t> dims, unsigned seed) { return uniform_floats(std::move(dims), seed); }

std::vector<Case> cases() {
  std::vector<Case> cs;
  cs.push_back({"NonZero", {int64s({0, 3, 0, -1, 2, 0}, {2, 3})}});
  cs.push_back({"NonZero", {floats({0, 0, 0}, {3})}});  // nothing nonzero: [1, 0]
  cs.push_back({"NonZero", {floats({5}, {})}});         // a scalar: [0, 1]
  cs.push_back({"Unique", {int64s({4, 1, 4, 2, 1, 9}, {3, 2})}, {attr("axis", int64_t{0})}, 4});
  cs.push_back({"Unique", {int64s({4, 1, 4, 2, 1, 9}, {3, 2})}, {attr("axis", int64_t{-1})}, 4});
  cs.push_back({"Unique", {u({7}, 122)}, {attr("sorted", int64_t{0})}, 4});
  cs.push_back({"Unique", {floats({2, 2, 2, 2}, {2, 2})}, {}, 1});
  // Two classes, a score threshold, an omitted iou_threshold, and a cap that binds.
  const Tensor boxes = floats({0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 5, 1, 6, 2, 2, 3, 3}, {1, 4, 4});
  const Tensor scores = floats({0.9f, 0.8f, 0.7f, 0.1f, 0.2f, 0.95f, 0.5f, 0.6f}, {1, 2, 4});
  cs.push_back({"NonMaxSuppression", {boxes, scores, int64s({4}, {1}), floats({0.5f}, {1})}, {}, 1, "", 11});
  cs.push_back({"NonMaxSuppression", {boxes, scores, int64s({1}, {1}), Tensor(), floats({0.3f}, {1})}, {}, 1, "", 11});
  cs.push_back({"NonMaxSuppression", {boxes, scores}, {}, 1, "", 11});  // no cap: nothing selected
  cs.push_back({"NonMaxSuppression",
                {u({2, 6, 4}, 123), u({2, 3, 6}, 124), int64s({3}, {1})},
                {attr("center_point_box", int64_t{1})},
                1,
                "",
                11});
  return cs;
}

}  // namespace

TEST(CpuSelfSizing, KernelsMakeTheOutputsInferenceSizes) {
  for (const Case& c : cases()) expect_kernel_matches_inference(c);
}

TEST(CpuSelfSizing, EveryDataSizedKernelHasACase) {
  std::set<std::string> covered;
  for (const Case& c : cases()) covered.insert(c.op);
  for (const auto& [domain, op] : cpu::KernelRegistry::global().registered_as(cpu::Writes::Itself)) {
    if (domain.empty() && (op == "If" || op == "Loop")) continue;
    EXPECT_TRUE(covered.count(op)) << op << " is registered Writes::Itself but has no case here";
  }
}

TEST(CpuSelfSizing, DataSizedOutputsRunThroughTheExecutor) {
  // NonZero -> Unique -> ReduceSum inside one graph: the executor hands the self-made tensors on to
  // a planned node, and a second run of the same executable with other data sizes them anew.
  GraphBuilder b(17);
  Value* x = b.input("x", DType::Float32, shape_of({2, 4}));
  Value* nz = b.node("NonZero", {x});
  Value* uq = b.node("Unique", {nz});
  b.output(b.node("ReduceSum", {uq}, {attr("keepdims", int64_t{0})}));
  b.output(uq);
  auto g = b.build();
  infer_shapes(*g);
  cpu::CpuBackend backend;
  auto exe = backend.compile(*g);
  const auto first = exe->run({floats({0, 1, 0, 2, 3, 0, 0, 4}, {2, 4})});
  // nonzero at (0,1) (0,3) (1,0) (1,3): coordinates {0,0,1,1, 1,3,0,3}; unique sorted {0,1,3}
  expect_close(first[1], int64s({0, 1, 3}, {3}), 0, 0);
  expect_close(first[0], int64s({4}, {}), 0, 0);
  const auto second = exe->run({floats({0, 0, 0, 0, 0, 0, 0, 7}, {2, 4})});
  // one nonzero, at (1,3): {1, 3}
  expect_close(second[1], int64s({1, 3}, {2}), 0, 0);
  expect_close(second[0], int64s({4}, {}), 0, 0);
}
