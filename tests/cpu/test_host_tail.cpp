// The host tail's split (backend/host_tail.h), checked where there is no GPU: the graph without its
// tail, then the tail fed from it, both on the CPU reference, give the whole graph's outputs bit for
// bit, whatever size the data gives the tail. The CUDA executor runs the same two parts, the first
// on the GPU (tests/gpu/test_host_tail_gpu.cpp).
#include "backend/host_tail.h"

#include <algorithm>

#include "host_tail_model.h"
#include "host_tail_split.h"
#include "test_util.h"

using namespace fusec;
using namespace fusec::test;

namespace {

bool named_in_tail(const Graph& g, const TailSplit& s, const std::string& node) {
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (g.nodes()[i]->name == node) return s.in_tail[i];
  ADD_FAILURE() << "no node " << node;
  return false;
}

void expect_split_matches_whole(Graph& g, const std::vector<Tensor>& inputs) {
  const TailSplit split = find_host_tail(g);
  const auto want = run_cpu(g, inputs);
  const auto got = run_split_on_cpu(g, split.in_tail, inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].dims(), want[i].dims()) << "output " << i;
    EXPECT_TRUE(got[i].bytes_equal(want[i])) << "output " << i;
  }
}

std::unique_ptr<Graph> nonzero_model() { return nonzero_tail_model(uniform_floats({6, 6}, 3)); }

}  // namespace

TEST(HostTail, NonZeroAndWhatReadsItFormTheTail) {
  auto g = nonzero_model();
  const TailSplit split = find_host_tail(*g);
  ASSERT_TRUE(split.any());
  for (const char* n : {"matmul", "relu", "sigmoid"}) EXPECT_FALSE(named_in_tail(*g, split, n)) << n;
  // ReduceSum's output has a known shape, but it reads the tail.
  for (const char* n : {"nonzero", "indices", "picked", "sum"}) EXPECT_TRUE(named_in_tail(*g, split, n)) << n;
  EXPECT_NE(split.why.find("'nonzero"), std::string::npos) << split.why;
  EXPECT_NE(split.why.find("NonZero"), std::string::npos) << split.why;

  const TailGraph tail = make_tail_graph(*g, split.in_tail);
  ASSERT_EQ(tail.reads.size(), 1u);  // relu; the axes stay an initializer of the tail
  EXPECT_EQ(tail.reads[0]->name, g->outputs[0]->name);
  EXPECT_TRUE(tail.graph->find_value("axes")->is_initializer());
  EXPECT_EQ(tail.output_of, (std::vector<int>{-1, 0, 1, -1}));

  // Different sizes of the tail, down to nothing to gather.
  for (unsigned seed : {1u, 2u, 3u}) expect_split_matches_whole(*g, {uniform_floats({4, 6}, seed)});
  expect_split_matches_whole(*g, {floats(std::vector<float>(24, 0.0f), {4, 6})});
}

// A detector's shape of problem: boxes and scores from the GPU part, NonMaxSuppression's selection,
// the kept boxes gathered by it; a graph input read by the tail directly.
TEST(HostTail, NonMaxSuppressionSelectionRunsAfterThePrefix) {
  GraphBuilder b(17);
  Value* boxes = b.input("boxes", DType::Float32, {Dim(1), Dim(6), Dim(4)});
  Value* logits = b.input("logits", DType::Float32, {Dim(1), Dim(2), Dim(6)});
  Value* scores = b.node("Sigmoid", {logits}, {}, "scores");
  Value* keep = b.node("NonMaxSuppression",
                       {boxes, scores, b.initializer("k", int64s({3}, {1})), b.initializer("iou", floats({0.5f}, {1})),
                        b.initializer("thr", floats({0.3f}, {1}))},
                       {}, "nms");
  Value* col = b.node("Gather", {keep, b.initializer("two", int64s({2}, {}))}, {attr("axis", int64_t{1})}, "box_index");
  Value* flat = b.node("Reshape", {boxes, b.initializer("shape", int64s({6, 4}, {2}))}, {}, "flat_boxes");
  b.output(b.node("Gather", {flat, col}, {attr("axis", int64_t{0})}, "kept"));
  b.output(scores);
  auto g = b.build();
  infer_shapes(*g);
  const TailSplit split = find_host_tail(*g);
  EXPECT_FALSE(named_in_tail(*g, split, "scores"));
  EXPECT_FALSE(named_in_tail(*g, split, "flat_boxes"));
  for (const char* n : {"nms", "box_index", "kept"}) EXPECT_TRUE(named_in_tail(*g, split, n)) << n;
  const TailGraph tail = make_tail_graph(*g, split.in_tail);
  std::vector<std::string> reads;
  for (Value* v : tail.reads) reads.push_back(v->name);
  std::sort(reads.begin(), reads.end());
  std::vector<std::string> want = {"boxes", g->outputs[1]->name, flat->name};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(reads, want);
  std::vector<float> bx;
  for (int i = 0; i < 6; ++i)
    for (float c : {0.1f * i, 0.1f * i, 0.1f * i + 0.3f, 0.1f * i + 0.3f}) bx.push_back(c);
  expect_split_matches_whole(*g, {floats(bx, {1, 6, 4}), uniform_floats({1, 2, 6}, 5)});
  expect_split_matches_whole(*g, {floats(bx, {1, 6, 4}), floats(std::vector<float>(12, -5.0f), {1, 2, 6})});
}

TEST(HostTail, StaticShapesHaveNone) {
  GraphBuilder b(17);
  b.output(b.node("Relu", {b.input("x", DType::Float32, {Dim(2), Dim(3)})}));
  auto g = b.build();
  infer_shapes(*g);
  EXPECT_FALSE(find_host_tail(*g).any());
}
