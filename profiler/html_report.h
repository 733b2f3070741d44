// Reports to look at: one self-contained HTML file (inline CSS, JS and SVG; nothing fetched) from a
// profile report (fusec.profile/1 JSON) or from a comparison of two reports.
//
//   profile JSON ─▶ header (model, device, peaks) ─▶ roofline (SVG) ─▶ timeline (SVG) ─▶ sortable tables
//
// Built from the JSON report rather than the in-memory profile, so `fusec compare --html` draws the
// same pictures from two files on disk. Every string from the report is escaped.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "profiler/compare.h"
#include "profiler/profile.h"

namespace fusec::profiler {

/// Whether a report's node is drawn on the roofline: it has a cost with FLOPs and bytes and a time
/// above zero (a log-log chart has no place for zero FLOPs: reshapes, copies, pools without FLOPs
/// are in the tables only). One point per such node; a node that ran as one kernel is that kernel.
bool on_roofline(const nlohmann::json& node);

/// The number of roofline points the profile page draws (each an SVG element of class "point").
int roofline_points(const nlohmann::json& report);

/// One iteration of the primary mode as measured: where each kernel started, relative to the
/// iteration's first record. The iteration is the one whose wall time is the median.
struct TimelineSpan {
  int kernel = -1;  // index into the report's kernels (Analysis::kernels)
  double start_ms = 0, ms = 0;
};
struct Timeline {
  int iteration = -1;
  std::vector<TimelineSpan> spans;  // in start order
};
Timeline measured_timeline(const Collected& c, const Analysis& a);

/// The page for one profile report (fusec.profile/1). With a measured timeline the timeline shows
/// real start offsets (gaps are idle time); without one (a report read from a file), each kernel's
/// median laid end to end in launch order.
std::string profile_html(const nlohmann::json& report, const Timeline* timeline = nullptr);

/// The page for `fusec compare`: the verdict table, and for profile reports one roofline with the
/// base's and the new report's points in two colours (against the base's peaks), plus both headers.
/// The reports may be null (then only the table).
std::string compare_html(const compare::Comparison& c, const nlohmann::json* base, const nlohmann::json* next);

}  // namespace fusec::profiler
