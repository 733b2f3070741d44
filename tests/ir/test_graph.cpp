#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/memory_planner.h"
#include "ir/error.h"
#include "ir/graph.h"
#include "ir/half.h"

using namespace fusec;

TEST(Graph, TopoSortOrdersAndDetectsCycles) {
  Graph g;
  Value* x = g.add_named_value("x");
  x->is_graph_input = true;
  g.inputs.push_back(x);
  Value* a = g.add_named_value("a");
  Value* b = g.add_named_value("b");
  g.add_node("Relu", {a}, {b}, "second");
  g.add_node("Relu", {x}, {a}, "first");
  g.topo_sort();
  EXPECT_EQ(g.nodes()[0]->name, "first");
  EXPECT_EQ(g.nodes()[1]->name, "second");

  Graph c;
  Value* p = c.add_named_value("p");
  Value* q = c.add_named_value("q");
  c.add_node("Relu", {q}, {p}, "n1");
  c.add_node("Relu", {p}, {q}, "n2");
  try {
    c.topo_sort();
    FAIL() << "cycle not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos);
    EXPECT_EQ(e.exit_code(), 2);
  }
}

TEST(Graph, CloneIsEqualAndIndependent) {
  Graph g;
  Value* x = g.add_named_value("x");
  x->is_graph_input = true;
  x->type = {DType::Float32, Shape{Dim::sym("N"), 4}};
  g.inputs.push_back(x);
  Value* w = g.add_initializer("w", Tensor::from_float({1, 2, 3, 4}, {4}));
  Value* y = g.add_named_value("y");
  y->is_graph_output = true;
  g.outputs.push_back(y);
  g.add_node("Add", {x, w}, {y}, "add")->set_attr("note", int64_t{3});
  auto c = g.clone();
  EXPECT_EQ(graph_difference(g, *c), "");
  c->nodes()[0]->set_attr("note", int64_t{4});
  EXPECT_NE(graph_difference(g, *c), "");
}

TEST(Graph, SetOutputMovesAValueBetweenProducers) {
  // a -> Relu "r" -> b -> Neg "n" -> c; the Neg now writes b, Relu a fresh value (a fusion that
  // keeps the later node's output name, as Rewriter::absorb and fuse_conv_activation's hoist do).
  Graph g;
  Value* a = g.add_named_value("a");
  Value* b = g.add_named_value("b");
  Value* c = g.add_named_value("c");
  Node* r = g.add_node("Relu", {a}, {b}, "r");
  Node* n = g.add_node("Neg", {b}, {c}, "n");
  Value* fresh = g.add_named_value("fresh");
  g.set_output(r, 0, fresh);
  EXPECT_EQ(fresh->producer, r);
  EXPECT_EQ(fresh->producer_output, 0);
  EXPECT_EQ(b->producer, nullptr) << "the value r wrote before loses its producer";
  EXPECT_EQ(b->producer_output, -1);
  g.set_output(r, 0, c);
  EXPECT_EQ(c->producer, r);
  EXPECT_EQ(n->outputs[0], nullptr) << "c left the node that wrote it";
  EXPECT_EQ(fresh->producer, nullptr);
  g.set_output(n, 1, b);
  ASSERT_EQ(n->outputs.size(), 2u);
  EXPECT_EQ(b->producer, n);
  EXPECT_EQ(b->producer_output, 1);
  g.set_output(n, 1, b);  // the same value again changes nothing
  EXPECT_EQ(b->producer, n);
  EXPECT_EQ(b->producer_output, 1);
}

TEST(Half, RoundTripsAndRounds) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f})
    EXPECT_EQ(half_to_float(float_to_half(v)), v) << v;
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);  // overflow to +inf
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);  // ties to even
}

TEST(MemoryPlanner, ReusesDeadBuffersAndNeverOverlapsLiveOnes) {
  std::vector<BufferRequest> r = {{1000, 0, 1}, {1000, 1, 2}, {1000, 2, 3}, {500, 3, 4}};
  MemoryPlan p = plan_memory(r, 256);
  // Lifetimes 0-1 and 2-3 do not overlap: they may share; at most two 1024-byte buffers live at once.
  EXPECT_LE(p.arena_bytes, 2048u + 512u);
  for (size_t i = 0; i < r.size(); ++i)
    for (size_t j = i + 1; j < r.size(); ++j) {
      bool live_together = !(r[i].last_step < r[j].first_step || r[j].last_step < r[i].first_step);
      bool overlap = p.offsets[i] < p.offsets[j] + r[j].bytes && p.offsets[j] < p.offsets[i] + r[i].bytes;
      EXPECT_FALSE(live_together && overlap) << i << " " << j;
    }
}

namespace {

/// Fails the test if two buffers live at a common step share a byte, an offset is misaligned, or
/// the arena does not hold every buffer; returns the most bytes live at one step (a lower bound on
/// any valid arena).
size_t check_plan(const std::vector<BufferRequest>& r, const MemoryPlan& p, size_t alignment) {
  EXPECT_EQ(p.offsets.size(), r.size());
  int steps = 0;
  for (const auto& q : r) steps = std::max(steps, q.last_step + 1);
  std::vector<size_t> live(static_cast<size_t>(steps) + 1, 0);
  // Sort by offset and sweep: each buffer against those that start before it ends.
  std::vector<size_t> order(r.size());
  for (size_t i = 0; i < r.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.offsets[a] < p.offsets[b]; });
  for (size_t a = 0; a < order.size(); ++a) {
    const size_t i = order[a];
    EXPECT_EQ(p.offsets[i] % alignment, 0u);
    EXPECT_LE(p.offsets[i] + r[i].bytes, p.arena_bytes);
    for (int t = r[i].first_step; t <= r[i].last_step; ++t) live[t] += r[i].bytes;
    for (size_t b = a + 1; b < order.size() && p.offsets[order[b]] < p.offsets[i] + r[i].bytes; ++b) {
      const size_t j = order[b];
      const bool live_together = !(r[i].last_step < r[j].first_step || r[j].last_step < r[i].first_step);
      if (live_together && r[j].bytes > 0 && r[i].bytes > 0)
        ADD_FAILURE() << "buffers " << i << " and " << j << " are live together and overlap in memory";
    }
  }
  return *std::max_element(live.begin(), live.end());
}

}  // namespace

TEST(MemoryPlanner, RandomRequestsNeverOverlapWhileLive) {
  std::mt19937_64 rng(7);
  // Lifetimes like a graph's (mostly short, some skip connections, a few spanning everything) and
  // sizes over six orders of magnitude, at several sizes and alignments.
  for (int round = 0; round < 40; ++round) {
    const int n = round < 30 ? 1 + static_cast<int>(rng() % 300) : 2000 + static_cast<int>(rng() % 3000);
    const size_t alignment = size_t{1} << (rng() % 9);
    std::vector<BufferRequest> r(static_cast<size_t>(n));
    for (auto& q : r) {
      q.first_step = static_cast<int>(rng() % static_cast<uint64_t>(n));
      const uint64_t kind = rng() % 20;
      const int len = kind < 14 ? 1 + static_cast<int>(rng() % 3) : kind < 19 ? static_cast<int>(rng() % 60) : n;
      q.last_step = q.first_step + len;
      q.bytes = kind == 0 ? 0 : size_t{1} << (rng() % 20);
      q.bytes += rng() % (q.bytes + 1);
    }
    MemoryPlan p = plan_memory(r, alignment);
    const size_t lower = check_plan(r, p, alignment);
    EXPECT_GE(p.arena_bytes, lower);
    // Packing quality: within 2x of the bound (alignment padding aside) on these shapes.
    EXPECT_LE(p.arena_bytes, 2 * lower + alignment * static_cast<size_t>(n)) << "round " << round;
  }
}

TEST(MemoryPlanner, ChainReusesTwoBuffers) {
  // a -> b -> c -> ...: only a step's input and output are live together.
  std::vector<BufferRequest> r;
  for (int i = 0; i < 10000; ++i) r.push_back({1000, i, i + 1});
  MemoryPlan p = plan_memory(r, 64);
  check_plan(r, p, 64);
  EXPECT_EQ(p.arena_bytes, 2u * 1024u);
}

TEST(MemoryPlanner, EverythingLiveTogetherStacks) {
  // Every buffer lives to the end: no reuse is possible (and the largest-first placement runs out
  // of its work budget, leaving the sweep's plan).
  std::vector<BufferRequest> r;
  for (int i = 0; i < 5000; ++i) r.push_back({static_cast<size_t>(64 * (1 + i % 7)), i, 5000});
  MemoryPlan p = plan_memory(r, 64);
  EXPECT_EQ(p.arena_bytes, check_plan(r, p, 64));
}
