#include "profiler/html_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

namespace fusec::profiler {

namespace {

using json = nlohmann::json;

// ---- text ----

std::string esc(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

double num(const json& j, const char* key, double def = 0) {
  if (!j.is_object()) return def;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : def;
}

std::string str(const json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

const json& arr(const json& j, const char* key) {
  static const json empty = json::array();
  if (!j.is_object()) return empty;
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : empty;
}

/// 1.23 G + unit; "-" for nothing.
std::string si(double x, const std::string& unit) {
  if (!(x > 0) || !std::isfinite(x)) return "-";
  const char* p[] = {"", " k", " M", " G", " T", " P"};
  int i = 0;
  while (x >= 1000 && i < 5) {
    x /= 1000;
    ++i;
  }
  return fmt(x >= 100 ? "%.0f" : x >= 10 ? "%.1f" : "%.2f", x) + (i ? p[i] : " ") + unit;
}

std::string ms_text(double ms) { return ms >= 100 ? fmt("%.1f", ms) : fmt("%.4g", ms); }

// ---- page frame ----

const char* kStyle = R"(
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1d232a;background:#fff}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde;padding-bottom:4px}
.meta{display:grid;grid-template-columns:max-content auto;gap:2px 16px;font-size:13px}.meta dt{color:#667}.meta dd{margin:0}
.note{color:#556;font-size:13px;max-width:1100px}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}th,td{padding:3px 8px;border-bottom:1px solid #eef;text-align:left;white-space:nowrap}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.sortable th{cursor:pointer;background:#f3f5f9;user-select:none}table.sortable th:hover{background:#e4e9f2}
th[data-dir=asc]::after{content:" \25B2"}th[data-dir=desc]::after{content:" \25BC"}
.worse{color:#b00020;font-weight:600}.better{color:#0a7a32;font-weight:600}
.legend span{display:inline-block;margin:0 14px 4px 0;font-size:12px}.legend i{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:4px;vertical-align:-1px}
svg text{font-size:11px;fill:#445}svg .axis{stroke:#99a}svg .grid{stroke:#e6e9ef}svg .roof{fill:none;stroke:#c33;stroke-width:2}svg .roof.other{stroke-dasharray:6 4;stroke-opacity:.55;stroke-width:1.5}
svg .point{stroke:#223;stroke-width:.6;fill-opacity:.8}svg .span{stroke:#fff;stroke-width:.3}
#reports td{white-space:normal;max-width:600px}#nodes td:last-child{white-space:normal;min-width:200px;max-width:420px}
.summary{font-size:16px;margin:10px 0}.bad{color:#b00020}.good{color:#0a7a32}
)";

const char* kScript = R"(
(function(){
  function sortTable(t,i,dir){
    var tb=t.tBodies[0],rows=Array.prototype.slice.call(tb.rows);
    rows.sort(function(a,b){
      var x=a.cells[i],y=b.cells[i];if(!x||!y)return 0;
      var vx=x.getAttribute('data-v'),vy=y.getAttribute('data-v'),c;
      if(vx!==null&&vy!==null)c=parseFloat(vx)-parseFloat(vy);else c=x.textContent.localeCompare(y.textContent);
      return dir==='asc'?c:-c;});
    rows.forEach(function(r){tb.appendChild(r);});
    Array.prototype.forEach.call(t.tHead.rows[0].cells,function(h,k){if(k===i)h.setAttribute('data-dir',dir);else h.removeAttribute('data-dir');});
  }
  document.querySelectorAll('table.sortable').forEach(function(t){
    Array.prototype.forEach.call(t.tHead.rows[0].cells,function(th,i){
      th.addEventListener('click',function(){
        var d=th.getAttribute('data-dir');
        sortTable(t,i,d?(d==='asc'?'desc':'asc'):(th.classList.contains('n')?'desc':'asc'));
      });
    });
  });
  // #sort=TABLE_ID:COLUMN[:asc|desc] sorts on load (a link to a sorted view; the tests use it).
  var m=/sort=([\w-]+):(\d+)(?::(asc|desc))?/.exec(location.hash);
  if(m){var t=document.getElementById(m[1]);if(t)sortTable(t,parseInt(m[2],10),m[3]||'desc');}
  document.body.setAttribute('data-ready','1');
})();
)";

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>" + esc(title) +
         "</title>\n<style>" + kStyle + "</style></head>\n<body>\n" + body + "<script>" + kScript +
         "</script>\n</body></html>\n";
}

// ---- tables ----

struct Cell {
  std::string text;
  std::optional<double> sort;  // numeric columns sort by this
  std::string cls;
};
Cell txt(std::string s) { return {std::move(s), std::nullopt, ""}; }
Cell val(std::string s, double v) { return {std::move(s), std::isfinite(v) ? v : 0.0, "n"}; }

std::string table(const std::string& id, const std::vector<std::pair<std::string, bool>>& header,
                  const std::vector<std::vector<Cell>>& rows) {
  std::ostringstream o;
  o << "<table class=\"sortable\" id=\"" << esc(id) << "\"><thead><tr>";
  for (const auto& [h, numeric] : header) o << "<th" << (numeric ? " class=\"n\"" : "") << ">" << esc(h) << "</th>";
  o << "</tr></thead><tbody>\n";
  for (const auto& r : rows) {
    o << "<tr>";
    for (const Cell& c : r) {
      std::string cls = c.cls;
      o << "<td";
      if (!cls.empty()) o << " class=\"" << cls << "\"";
      if (c.sort) o << " data-v=\"" << fmt("%.9g", *c.sort) << "\"";
      o << ">" << esc(c.text) << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</tbody></table>\n";
  return o.str();
}

// ---- colours ----

const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
                          "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#2f4b7c", "#a05195"};

/// Op type → colour, in the report's op-type order (by time), so the largest get distinct colours.
std::map<std::string, std::string> op_colours(const json& report) {
  std::map<std::string, std::string> c;
  size_t i = 0;
  for (const auto& o : arr(report, "op_types")) {
    std::string op = str(o, "op_type");
    if (!c.count(op)) c[op] = kPalette[std::min(i++, std::size(kPalette) - 1)];
  }
  return c;
}

std::string colour_of(const std::map<std::string, std::string>& c, const std::string& op) {
  auto it = c.find(op);
  return it != c.end() ? it->second : "#bab0ac";
}

std::string legend(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string s = "<div class=\"legend\">";
  for (const auto& [name, colour] : items)
    s += "<span><i style=\"background:" + colour + "\"></i>" + esc(name) + "</span>";
  return s + "</div>\n";
}

// ---- roofline ----

struct Point {
  double x = 0, y = 0;  // FLOP/byte, FLOP/s
  std::string cls, colour, title;
};

/// The nodes' points; a node that ran as one kernel is named by that kernel.
std::vector<Point> node_points(const json& report, const std::string& cls, const std::string& fixed_colour,
                               const std::string& prefix) {
  auto colours = op_colours(report);
  std::map<int64_t, std::vector<std::string>> kernels_of;
  for (const auto& k : arr(report, "kernels"))
    if (k.contains("step") && k["step"].is_number()) kernels_of[k["step"].get<int64_t>()].push_back(str(k, "name"));
  std::vector<Point> pts;
  for (const auto& n : arr(report, "nodes")) {
    if (!on_roofline(n)) continue;
    double flops = num(n, "flops"), bytes = num(n, "bytes_read") + num(n, "bytes_written"), ms = num(n, "median_ms");
    Point p;
    p.x = flops / bytes;
    p.y = flops / (ms * 1e-3);
    p.cls = cls;
    std::string op = str(n, "op_type");
    p.colour = fixed_colour.empty() ? colour_of(colours, op) : fixed_colour;
    const auto& ks = kernels_of[static_cast<int64_t>(num(n, "step", -1))];
    std::string what = "node " + str(n, "name") + " (" + op + ")";
    if (ks.size() == 1 && ks[0] != str(n, "name")) what += ", kernel " + ks[0];
    if (ks.size() > 1) what += ", " + std::to_string(ks.size()) + " kernels";
    p.title =
        prefix + what + "\n" + ms_text(ms) + " ms, " + si(p.y, "FLOP/s") + ", " + fmt("%.3g", p.x) + " FLOP/byte" +
        (n.contains("pct_of_peak") && num(n, "pct_of_peak") > 0
             ? ", " + fmt("%.1f", num(n, "pct_of_peak")) + "% of " + str(n, "peak") + " (" + str(n, "bound") + "-bound)"
             : std::string());
    pts.push_back(std::move(p));
  }
  return pts;
}

std::string decade_label(int e, const std::string& unit) {
  if (unit.empty()) return e >= 0 && e <= 4 ? fmt("%.0f", std::pow(10.0, e)) : "1e" + std::to_string(e);
  if (e < 0) return fmt("%g", std::pow(10.0, e)) + " " + unit;
  const char* p[] = {"", " k", " M", " G", " T", " P", " E"};
  int i = std::min(e / 3, 6);
  return fmt("%.0f", std::pow(10.0, e - 3 * i)) + (i ? p[i] : " ") + unit;
}

/// `precision`: the run's; its roof and fp32's (the CUDA-core ops') are solid, the others dashed.
std::string roofline_svg(const json& peaks, const std::string& precision, const std::vector<Point>& pts) {
  const double W = 960, H = 540, L = 110, R = 150, T = 16, B = 52, pw = W - L - R, ph = H - T - B;
  double bw = num(peaks, "bandwidth_bytes_per_s");
  std::vector<std::pair<std::string, double>> roofs;
  if (peaks.is_object() && peaks.contains("flops_per_s") && peaks["flops_per_s"].is_object())
    for (const auto& [k, v] : peaks["flops_per_s"].items())
      if (v.is_number() && v.get<double>() > 0) roofs.emplace_back(k, v.get<double>());
  std::vector<double> xs, ys;
  for (const auto& p : pts) xs.push_back(p.x), ys.push_back(p.y);
  for (const auto& [k, f] : roofs) {
    ys.push_back(f);
    if (bw > 0) xs.push_back(f / bw);
  }
  if (xs.empty()) xs = {0.1, 100};
  if (ys.empty()) ys = {1e9, 1e12};
  int xlo = static_cast<int>(std::floor(std::log10(*std::min_element(xs.begin(), xs.end())))) - 1;
  int xhi = static_cast<int>(std::ceil(std::log10(*std::max_element(xs.begin(), xs.end())) + 0.2)) + 1;
  int ylo = static_cast<int>(std::floor(std::log10(*std::min_element(ys.begin(), ys.end())) - 0.2));
  int yhi = static_cast<int>(std::ceil(std::log10(*std::max_element(ys.begin(), ys.end())) + 0.15));
  auto X = [&](double x) { return L + (std::log10(x) - xlo) / (xhi - xlo) * pw; };
  auto Y = [&](double y) { return T + ph - (std::log10(y) - ylo) / (yhi - ylo) * ph; };
  std::ostringstream o;
  o << "<svg id=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" role=\"img\" aria-label=\"roofline\">\n";
  o << "<defs><clipPath id=\"plot\"><rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph
    << "\"/></clipPath></defs>\n";
  for (int e = xlo; e <= xhi; ++e) {
    double x = X(std::pow(10.0, e));
    o << "<line class=\"grid\" x1=\"" << x << "\" y1=\"" << T << "\" x2=\"" << x << "\" y2=\"" << T + ph << "\"/>";
    o << "<text x=\"" << x << "\" y=\"" << T + ph + 16 << "\" text-anchor=\"middle\">" << decade_label(e, "")
      << "</text>\n";
  }
  for (int e = ylo; e <= yhi; ++e) {
    double y = Y(std::pow(10.0, e));
    o << "<line class=\"grid\" x1=\"" << L << "\" y1=\"" << y << "\" x2=\"" << L + pw << "\" y2=\"" << y << "\"/>";
    o << "<text x=\"" << L - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << esc(decade_label(e, "FLOP/s"))
      << "</text>\n";
  }
  o << "<rect class=\"axis\" fill=\"none\" x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph
    << "\"/>\n";
  o << "<text x=\"" << L + pw / 2 << "\" y=\"" << H - 12
    << "\" text-anchor=\"middle\">arithmetic intensity (FLOP per byte read + written, cost model)</text>\n";
  o << "<text transform=\"translate(14," << T + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\">achieved FLOP/s (cost model FLOPs / median time)</text>\n";
  // Roofs: min(peak FLOP/s, bandwidth × intensity), one per measured precision.
  const double x0 = std::pow(10.0, xlo), x1 = std::pow(10.0, xhi);
  for (const auto& [name, f] : roofs) {
    std::ostringstream pl;
    if (bw > 0) {
      double ridge = f / bw;
      pl << X(x0) << "," << Y(bw * x0) << " " << X(ridge) << "," << Y(f) << " " << X(x1) << "," << Y(f);
    } else {
      pl << X(x0) << "," << Y(f) << " " << X(x1) << "," << Y(f);
    }
    const bool used = name == precision || name == "fp32" || precision.empty();
    o << "<polyline class=\"roof" << (used ? "" : " other") << "\" clip-path=\"url(#plot)\" points=\"" << pl.str()
      << "\"><title>" << esc(name) << " peak " << esc(si(f, "FLOP/s")) << "</title></polyline>\n";
  }
  // The roofs' labels at the right, highest first, kept 13 px apart (fp16 and bf16 peaks are close).
  std::vector<std::pair<std::string, double>> by_height = roofs;
  std::stable_sort(by_height.begin(), by_height.end(),
                   [](const auto& x, const auto& y) { return x.second > y.second; });
  double last_y = -1e9;
  for (const auto& [name, f] : by_height) {
    last_y = std::max(Y(f) + 4, last_y + 13);
    o << "<text x=\"" << L + pw + 6 << "\" y=\"" << last_y << "\">" << esc(name) << " " << esc(si(f, "FLOP/s"))
      << "</text>\n";
  }
  if (bw > 0) {
    // The bandwidth roof's label where it enters the chart.
    double xl = std::max(x0, std::pow(10.0, ylo) / bw) * 1.6;
    o << "<text x=\"" << X(xl) << "\" y=\"" << Y(bw * xl) - 8 << "\" fill=\"#c33\">memory " << esc(si(bw, "B/s"))
      << "</text>\n";
  }
  o << "<g clip-path=\"url(#plot)\">\n";
  for (const auto& p : pts)
    o << "<circle class=\"" << esc(p.cls) << "\" cx=\"" << fmt("%.2f", X(p.x)) << "\" cy=\"" << fmt("%.2f", Y(p.y))
      << "\" r=\"4.5\" fill=\"" << p.colour << "\"><title>" << esc(p.title) << "</title></circle>\n";
  o << "</g></svg>\n";
  return o.str();
}

std::string peaks_text(const json& peaks) {
  std::string s = "memory " + si(num(peaks, "bandwidth_bytes_per_s"), "B/s");
  if (peaks.is_object() && peaks.contains("flops_per_s") && peaks["flops_per_s"].is_object())
    for (const auto& [k, v] : peaks["flops_per_s"].items())
      if (v.is_number()) s += ", " + k + " " + si(v.get<double>(), "FLOP/s");
  return s;
}

const json& primary_mode(const json& report) {
  static const json none = json::object();
  const json& m = arr(report, "modes");
  return m.empty() ? none : m[0];
}

/// Header fields: (label, value).
std::vector<std::pair<std::string, std::string>> header_fields(const json& r) {
  const json& dev = r.contains("device") ? r["device"] : json::object();
  const json& peaks = r.contains("peaks") ? r["peaks"] : json::object();
  const json& mode = primary_mode(r);
  std::vector<std::pair<std::string, std::string>> f = {
      {"model", str(r, "model") + (str(r, "variant").empty() ? "" : " (" + str(r, "variant") + ")")},
      {"device", str(dev, "name") + (str(dev, "kind").empty() ? "" : " [" + str(dev, "kind") + "]")},
      {"precision", str(r, "precision")},
      {"batch", str(r, "batch")},
      {"iterations", str(r, "iterations") + " (warm-up " + str(r, "warmup") + ")"},
      {"latency", mode.contains("wall_ms")
                      ? ms_text(num(mode["wall_ms"], "median")) + " ms median wall, mode " + str(mode, "name") +
                            fmt(", cv %.1f%%", 100 * num(mode["wall_ms"], "cv"))
                      : "-"},
      {"peaks", peaks_text(peaks)},
      {"peaks measured", str(peaks, "measured_at") + " (" + str(peaks, "source") + ")"},
      {"peak method", str(peaks, "method")},
      {"created", str(r, "created")},
  };
  if (r.contains("cuda_graph")) f.insert(f.begin() + 5, {"CUDA graph", str(r, "cuda_graph")});
  if (r.contains("build") && r["build"].contains("fusec")) f.push_back({"fusec", str(r["build"], "fusec")});
  return f;
}

std::string meta_list(const std::vector<std::pair<std::string, std::string>>& f) {
  std::string s = "<dl class=\"meta\">";
  for (const auto& [k, v] : f) s += "<dt>" + esc(k) + "</dt><dd>" + esc(v) + "</dd>";
  return s + "</dl>\n";
}

const char* kPointNote =
    "One point per node that has a cost (FLOPs and bytes from fusec's cost model) and a time; a node that ran "
    "as a single kernel is that kernel's point (its tooltip names the kernel). Nodes without FLOPs (reshapes, "
    "copies) cannot sit on log axes and are in the tables only. Intensity = FLOPs / (bytes read + written); "
    "height = FLOPs / median time. The roofs are the peaks measured on this device, not datasheet numbers "
    "(solid: the run's precision and fp32, which ops off the tensor cores are measured against; dashed: the others).";

// ---- timeline ----

std::string timeline_svg(const json& r, const Timeline* measured) {
  auto colours = op_colours(r);
  std::map<int64_t, const json*> node_at;
  for (const auto& n : arr(r, "nodes")) node_at[static_cast<int64_t>(num(n, "step", -1))] = &n;
  struct Span {
    double start, ms;
    std::string lane, title;
  };
  std::vector<Span> spans;
  std::vector<std::string> lanes;
  const json& kernels = arr(r, "kernels");
  auto add = [&](const json& k, double start, double ms) {
    auto it = node_at.find(static_cast<int64_t>(num(k, "step", -1)));
    std::string op = it != node_at.end() ? str(*it->second, "op_type") : "(" + str(k, "kind") + ")";
    if (std::find(lanes.begin(), lanes.end(), op) == lanes.end()) lanes.push_back(op);
    spans.push_back({start, ms, op,
                     "#" + str(k, "index") + " " + str(k, "name") + " (node " + str(k, "node") + ", " + op + ")\nat " +
                         ms_text(start) + " ms, " + ms_text(ms) + " ms"});
  };
  double t = 0;
  if (measured && !measured->spans.empty()) {
    for (const TimelineSpan& s : measured->spans) {
      if (s.kernel < 0 || static_cast<size_t>(s.kernel) >= kernels.size()) continue;
      add(kernels[s.kernel], s.start_ms, s.ms);
      t = std::max(t, s.start_ms + s.ms);
    }
  } else {
    for (const auto& k : kernels) {
      add(k, t, num(k, "median_ms"));
      t += num(k, "median_ms");
    }
  }
  const double W = 1200, L = 150, R = 40, lane_h = 20, T = 8, B = 36;
  const double H = T + B + lane_h * std::max<size_t>(lanes.size(), 1), pw = W - L - R;
  double total = t > 0 ? t : 1;
  auto X = [&](double ms) { return L + ms / total * pw; };
  std::ostringstream o;
  o << "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\">\n";
  for (size_t i = 0; i < lanes.size(); ++i) {
    double y = T + lane_h * i;
    o << "<text x=\"" << L - 6 << "\" y=\"" << y + lane_h * 0.68 << "\" text-anchor=\"end\">" << esc(lanes[i])
      << "</text>";
    o << "<line class=\"grid\" x1=\"" << L << "\" y1=\"" << y + lane_h << "\" x2=\"" << L + pw << "\" y2=\""
      << y + lane_h << "\"/>\n";
  }
  double axis_y = T + lane_h * std::max<size_t>(lanes.size(), 1);
  // Round ticks: 1, 2 or 5 × 10^k ms apart, about five of them.
  double step = std::pow(10.0, std::floor(std::log10(total / 5)));
  for (double m : {2.0, 5.0, 10.0})
    if (total / step > 7) step = std::pow(10.0, std::floor(std::log10(total / 5))) * m;
  for (int i = 0; i * step <= total * 1.0001; ++i) {
    double ms = i * step;
    o << "<line class=\"axis\" x1=\"" << X(ms) << "\" y1=\"" << axis_y << "\" x2=\"" << X(ms) << "\" y2=\""
      << axis_y + 5 << "\"/><text x=\"" << X(ms) << "\" y=\"" << axis_y + 18 << "\" text-anchor=\"middle\">"
      << ms_text(ms) << " ms</text>\n";
  }
  for (const Span& s : spans) {
    size_t lane = std::find(lanes.begin(), lanes.end(), s.lane) - lanes.begin();
    o << "<rect class=\"span\" x=\"" << fmt("%.2f", X(s.start)) << "\" y=\"" << T + lane_h * lane + 2 << "\" width=\""
      << fmt("%.2f", std::max(0.6, s.ms / total * pw)) << "\" height=\"" << lane_h - 4 << "\" fill=\""
      << colour_of(colours, s.lane) << "\"><title>" << esc(s.title) << "</title></rect>\n";
  }
  o << "</svg>\n";
  return o.str();
}

// ---- the profile's tables ----

std::string kernel_table(const json& r) {
  double total = 0;
  for (const auto& k : arr(r, "kernels")) total += num(k, "median_ms");
  std::vector<std::vector<Cell>> rows;
  for (const auto& k : arr(r, "kernels")) {
    double ms = num(k, "median_ms");
    rows.push_back({val(str(k, "index"), num(k, "index")), txt(str(k, "name")), txt(str(k, "kind")),
                    txt(str(k, "node")), val(ms_text(ms), ms),
                    val(fmt("%.1f", total > 0 ? 100 * ms / total : 0), total > 0 ? ms / total : 0)});
  }
  return table(
      "kernels",
      {{"#", true}, {"kernel", false}, {"kind", false}, {"node", false}, {"median ms", true}, {"% of sum", true}},
      rows);
}

std::string node_table(const json& r) {
  double total = 0;
  for (const auto& n : arr(r, "nodes")) total += num(n, "median_ms");
  std::vector<std::vector<Cell>> rows;
  for (const auto& n : arr(r, "nodes")) {
    double ms = num(n, "median_ms"), flops = num(n, "flops"), bytes = num(n, "bytes_read") + num(n, "bytes_written");
    std::string fused;
    for (const auto& f : arr(n, "fused_from"))
      fused += (fused.empty() ? "" : ", ") + (f.is_string() ? f.get<std::string>() : f.dump());
    rows.push_back({val(str(n, "step"), num(n, "step")), txt(str(n, "name")), txt(str(n, "op_type")),
                    txt(str(n, "kind")), val(str(n, "records"), num(n, "records")), val(ms_text(ms), ms),
                    val(fmt("%.1f", total > 0 ? 100 * ms / total : 0), total > 0 ? ms / total : 0),
                    val(si(flops, ""), flops), val(si(bytes, "B"), bytes),
                    val(num(n, "intensity") > 0 ? fmt("%.3g", num(n, "intensity")) : "-", num(n, "intensity")),
                    val(si(num(n, "flops_per_s"), "FLOP/s"), num(n, "flops_per_s")),
                    val(si(num(n, "bytes_per_s"), "B/s"), num(n, "bytes_per_s")), txt(str(n, "bound")),
                    val(num(n, "pct_of_peak") > 0 ? fmt("%.1f", num(n, "pct_of_peak")) : "-", num(n, "pct_of_peak")),
                    txt(fused)});
  }
  return table("nodes",
               {{"step", true},
                {"node", false},
                {"op", false},
                {"kind", false},
                {"kernels", true},
                {"median ms", true},
                {"% of sum", true},
                {"FLOPs", true},
                {"bytes", true},
                {"FLOP/byte", true},
                {"FLOP/s", true},
                {"B/s", true},
                {"bound", false},
                {"% of peak", true},
                {"fused from", false}},
               rows);
}

std::string op_table(const json& r) {
  std::vector<std::vector<Cell>> rows;
  for (const auto& o : arr(r, "op_types")) {
    double ms = num(o, "ms"), share = num(o, "share");
    rows.push_back({txt(str(o, "op_type")), val(str(o, "nodes"), num(o, "nodes")), val(ms_text(ms), ms),
                    val(fmt("%.1f", 100 * share), share), val(si(num(o, "flops"), ""), num(o, "flops")),
                    val(si(num(o, "bytes"), "B"), num(o, "bytes"))});
  }
  return table(
      "op-types",
      {{"op type", false}, {"nodes", true}, {"ms", true}, {"% of time", true}, {"FLOPs", true}, {"bytes", true}}, rows);
}

std::vector<std::pair<std::string, std::string>> op_legend(const json& r) {
  std::vector<std::pair<std::string, std::string>> items;
  auto colours = op_colours(r);
  for (const auto& o : arr(r, "op_types")) items.emplace_back(str(o, "op_type"), colour_of(colours, str(o, "op_type")));
  return items;
}

}  // namespace

Timeline measured_timeline(const Collected& c, const Analysis& a) {
  Timeline t;
  if (c.modes.empty() || c.modes[0].wall_ms.empty()) return t;
  // The iteration of median wall time.
  const auto& wall = c.modes[0].wall_ms;
  std::vector<int> order(wall.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return wall[x] < wall[y]; });
  t.iteration = order[order.size() / 2];
  std::vector<const Record*> recs;
  for (const Record& r : c.records)
    if (r.mode == 0 && r.iteration == t.iteration) recs.push_back(&r);
  if (recs.empty()) return t;
  std::stable_sort(recs.begin(), recs.end(),
                   [](const Record* x, const Record* y) { return x->start_ns < y->start_ns; });
  std::map<std::pair<int, int>, int> kernel_at;  // (step, ordinal) -> a.kernels, as the analysis numbers them
  for (size_t k = 0; k < a.kernels.size(); ++k)
    kernel_at[{a.kernels[k].step, a.kernels[k].ordinal}] = static_cast<int>(k);
  const uint64_t t0 = recs.front()->start_ns;
  std::map<int, int> ordinal;
  for (const Record* r : recs) {
    int ord = ordinal[r->step]++;
    auto it = kernel_at.find({r->step, ord});
    if (it == kernel_at.end()) continue;
    t.spans.push_back({it->second, static_cast<double>(r->start_ns - t0) * 1e-6, r->ms()});
  }
  return t;
}

bool on_roofline(const json& n) {
  double flops = num(n, "flops"), bytes = num(n, "bytes_read") + num(n, "bytes_written"), ms = num(n, "median_ms");
  return flops > 0 && bytes > 0 && ms > 0 && std::isfinite(flops / bytes);
}

int roofline_points(const json& report) {
  int n = 0;
  for (const auto& node : arr(report, "nodes")) n += on_roofline(node);
  return n;
}

std::string profile_html(const json& r, const Timeline* timeline) {
  std::ostringstream o;
  const int points = roofline_points(r);
  o << "<h1>fusec profile: " << esc(str(r, "model")) << "</h1>\n";
  o << meta_list(header_fields(r));
  o << "<h2>Roofline</h2>\n<p class=\"note\" id=\"points\" data-points=\"" << points << "\">" << points << " points. "
    << esc(kPointNote) << " Colour: op type.</p>\n";
  o << roofline_svg(r.contains("peaks") ? r["peaks"] : json::object(), str(r, "precision"),
                    node_points(r, "point", "", ""));
  o << legend(op_legend(r));
  const json& mode = primary_mode(r);
  if (timeline && !timeline->spans.empty())
    o << "<h2>Timeline</h2>\n<p class=\"note\">Iteration " << timeline->iteration << " of mode '"
      << esc(str(mode, "name"))
      << "' (the one of median wall time) as measured: each kernel at its start offset, one lane per op type; "
         "gaps are time without a kernel (launch overhead, the host).</p>\n";
  else
    o << "<h2>Timeline</h2>\n<p class=\"note\">One iteration of mode '" << esc(str(mode, "name"))
      << "': each kernel's median time, laid end to end in launch order, one lane per op type (medians, not "
         "measured start times: gaps between kernels are not shown; the Chrome trace from --trace has those).</p>\n";
  o << timeline_svg(r, timeline);
  o << legend(op_legend(r));
  o << "<h2>Nodes</h2>\n<p class=\"note\">Click a header to sort.</p>\n" << node_table(r);
  o << "<h2>Op types</h2>\n" << op_table(r);
  o << "<h2>Kernels</h2>\n" << kernel_table(r);
  return page("fusec profile: " + str(r, "model"), o.str());
}

std::string compare_html(const compare::Comparison& c, const json* base, const json* next) {
  std::ostringstream o;
  o << "<h1>fusec compare</h1>\n";
  o << meta_list({{"base", c.base_path + " (" + c.base_schema + ")"},
                  {"new", c.next_path + " (" + c.next_schema + ")"},
                  {"compared", c.label}});
  for (const auto& d : c.differences)
    o << "<p class=\"note\">" << esc(d.field) << " differs (--allow-different): '" << esc(d.base) << "' vs '"
      << esc(d.next) << "'</p>\n";
  for (const auto& n : c.notes) o << "<p class=\"note\">note: " << esc(n) << "</p>\n";
  o << "<p class=\"summary " << (c.regressions ? "bad" : "good") << "\" id=\"summary\" data-regressions=\""
    << c.regressions << "\">" << esc(compare::summary_text(c)) << "</p>\n";

  auto cells = compare::table_cells(c);
  std::vector<std::vector<Cell>> rows;
  std::string group;
  for (size_t i = 1; i < cells.size(); ++i) {
    std::vector<Cell> row;
    for (size_t k = 0; k < cells[i].size(); ++k) {
      Cell cell = txt(cells[i][k]);
      if (k == 0) {  // the text table prints a group once; a sortable table needs it on every row
        if (cell.text.empty()) cell.text = group;
        group = cell.text;
      }
      if (k >= 2 && k <= 5) cell.cls = "n";
      if (cell.text == "REGRESSION") cell.cls = "worse";
      if (cell.text == "improved") cell.cls = "better";
      row.push_back(std::move(cell));
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::pair<std::string, bool>> header;
  if (!cells.empty())
    for (size_t k = 0; k < cells[0].size(); ++k) header.emplace_back(cells[0][k], k >= 2 && k <= 5);
  o << "<h2>Verdicts</h2>\n" << table("verdicts", header, rows);

  const bool profiles = base && next && str(*base, "schema").rfind("fusec.profile/", 0) == 0 &&
                        str(*next, "schema").rfind("fusec.profile/", 0) == 0;
  if (profiles) {
    const int nb = roofline_points(*base), nn = roofline_points(*next);
    auto pts = node_points(*base, "point base", "#4e79a7", "base: ");
    auto pn = node_points(*next, "point new", "#f28e2b", "new: ");
    pts.insert(pts.end(), pn.begin(), pn.end());
    o << "<h2>Roofline: base and new</h2>\n<p class=\"note\" id=\"points\" data-points=\"" << nb + nn << "\">" << nb
      << " base points, " << nn << " new points, against the base's peaks. " << esc(kPointNote) << "</p>\n";
    o << roofline_svg(base->contains("peaks") ? (*base)["peaks"] : json::object(), str(*base, "precision"), pts);
    o << legend({{"base", "#4e79a7"}, {"new", "#f28e2b"}});
    auto fb = header_fields(*base), fn = header_fields(*next);
    std::vector<std::vector<Cell>> side;
    for (size_t i = 0; i < std::min(fb.size(), fn.size()); ++i)
      side.push_back({txt(fb[i].first), txt(fb[i].second), txt(fn[i].second)});
    o << "<h2>Reports</h2>\n" << table("reports", {{"", false}, {"base", false}, {"new", false}}, side);
  }
  return page("fusec compare: " + c.label, o.str());
}

}  // namespace fusec::profiler
