#include <gtest/gtest.h>

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
