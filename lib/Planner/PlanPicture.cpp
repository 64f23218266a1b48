//===- PlanPicture.cpp - A search drawn as SVG ----------------------------===//

#include "trellis/Planner/PlanPicture.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

namespace trellis::planner {

namespace {

constexpr double kWidth = 960, kScatterHeight = 420, kTimelineHeight = 300;
constexpr double kLeft = 80, kRight = 30, kTop = 50, kBottom = 50;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string escape(llvm::StringRef text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// A round step for about `ticks` ticks over [0, top].
double tickStep(double top, int ticks) {
  double raw = top / ticks;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0, 10.0})
    if (raw <= factor * power)
      return factor * power;
  return 10 * power;
}

/// `{0:g}` without trailing noise: 0.25, 1500, 2e+04.
std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

/// Axes of a panel whose plot area is [x0, x1] x [y0, y1] (y down) for
/// data [0, xMax] x [0, yMax].
void drawAxes(llvm::raw_ostream &os, double x0, double x1, double y0, double y1,
              double xMax, double yMax, llvm::StringRef xLabel,
              llvm::StringRef yLabel) {
  os << llvm::formatv("<line x1='{0}' y1='{1}' x2='{2}' y2='{1}' "
                      "stroke='black'/>\n",
                      x0, y1, x1);
  os << llvm::formatv("<line x1='{0}' y1='{1}' x2='{0}' y2='{2}' "
                      "stroke='black'/>\n",
                      x0, y0, y1);
  double xStep = tickStep(xMax, 6);
  for (double x = 0; x <= xMax * 1.0001; x += xStep) {
    double px = x0 + (x1 - x0) * x / xMax;
    os << llvm::formatv("<line x1='{0:f1}' y1='{1}' x2='{0:f1}' y2='{2}' "
                        "stroke='black'/><text x='{0:f1}' y='{3}' "
                        "text-anchor='middle'>{4}</text>\n",
                        px, y1, y1 + 5, y1 + 20, number(x));
  }
  if (yMax > 0) {
    double yStep = tickStep(yMax, 5);
    for (double y = 0; y <= yMax * 1.0001; y += yStep) {
      double py = y1 - (y1 - y0) * y / yMax;
      os << llvm::formatv("<line x1='{0}' y1='{1:f1}' x2='{2}' y2='{1:f1}' "
                          "stroke='black'/><text x='{3}' y='{4:f1}' "
                          "text-anchor='end'>{5}</text>\n",
                          x0 - 5, py, x0, x0 - 8, py + 4, number(y));
    }
  }
  os << llvm::formatv("<text x='{0}' y='{1}' text-anchor='middle'>{2}</text>\n",
                      (x0 + x1) / 2, y1 + 40, escape(xLabel));
  os << llvm::formatv("<text transform='translate({0},{1}) rotate(-90)' "
                      "text-anchor='middle'>{2}</text>\n",
                      x0 - 60, (y0 + y1) / 2, escape(yLabel));
}

void drawScatter(llvm::raw_ostream &os, const PlanRequest &request,
                 const SearchResult &result) {
  const PlanEvaluation &best = result.plans.front();
  double usable = request.cluster.usableMemory() / kGiB;
  double xMax = usable, yMax = 0;
  for (const CandidatePoint &point : result.candidates) {
    xMax = std::max(xMax, point.peakBytes / kGiB);
    yMax = std::max(yMax, point.tokensPerSecondPerGpu);
  }
  xMax *= 1.05;
  yMax *= 1.1;
  double x0 = kLeft, x1 = kWidth - kRight, y0 = kTop,
         y1 = kScatterHeight - kBottom;
  auto px = [&](double gib) { return x0 + (x1 - x0) * gib / xMax; };
  auto py = [&](double rate) {
    return yMax > 0 ? y1 - (y1 - y0) * rate / yMax : y1;
  };
  os << llvm::formatv(
      "<text x='{0}' y='24' font-size='15'>{1} candidates priced for {2} "
      "devices of {3}: predicted throughput against peak memory</text>\n",
      x0, result.candidates.size(), request.gpus, escape(request.cluster.name));
  drawAxes(os, x0, x1, y0, y1, xMax, yMax, "peak memory per device (GiB)",
           "tokens/s per device");
  os << llvm::formatv("<line x1='{0:f1}' y1='{1}' x2='{0:f1}' y2='{2}' "
                      "stroke='#c0392b' stroke-dasharray='6,4'/><text "
                      "x='{3:f1}' y='{4}' fill='#c0392b' "
                      "text-anchor='end'>usable {5} GiB</text>\n",
                      px(usable), y0, y1, px(usable) - 4, y0 + 12,
                      number(usable));
  for (const CandidatePoint &point : result.candidates)
    os << llvm::formatv(
        "<circle class='candidate' cx='{0:f1}' cy='{1:f1}' r='3' "
        "fill='{2}' fill-opacity='0.6'><title>{3}: {4} s, {5} tokens/s per "
        "device, {6} GiB{7}</title></circle>\n",
        px(point.peakBytes / kGiB), py(point.tokensPerSecondPerGpu),
        point.fits ? "#2e6bd1" : "#9a9a9a", escape(point.plan),
        number(point.seconds), number(point.tokensPerSecondPerGpu),
        number(point.peakBytes / kGiB), point.fits ? "" : ", does not fit");
  // The feasible front: by memory, each plan faster than every plan that
  // needs less.
  std::vector<const CandidatePoint *> fitting;
  for (const CandidatePoint &point : result.candidates)
    if (point.fits)
      fitting.push_back(&point);
  std::sort(fitting.begin(), fitting.end(),
            [](const CandidatePoint *a, const CandidatePoint *b) {
              return a->peakBytes < b->peakBytes;
            });
  std::string path;
  double fastest = -1;
  for (const CandidatePoint *point : fitting) {
    if (point->tokensPerSecondPerGpu <= fastest)
      continue;
    double x = px(point->peakBytes / kGiB);
    if (!path.empty())
      path += llvm::formatv(" L{0:f1},{1:f1}", x, py(fastest)).str();
    fastest = point->tokensPerSecondPerGpu;
    path += llvm::formatv("{0}{1:f1},{2:f1}", path.empty() ? "M" : " L", x,
                          py(fastest))
                .str();
  }
  if (!path.empty())
    os << "<path class='front' d='" << path
       << "' fill='none' stroke='#2e6bd1' stroke-width='1.5'/>\n";
  double bx = px(best.peakBytes() / kGiB), by = py(best.tokensPerSecondPerGpu);
  os << llvm::formatv(
      "<circle class='chosen' cx='{0:f1}' cy='{1:f1}' r='8' fill='none' "
      "stroke='#c0392b' stroke-width='2.5'/><text x='{2:f1}' y='{3:f1}' "
      "fill='#c0392b' text-anchor='{4}'>chosen: {5}</text>\n",
      bx, by, bx < (x0 + x1) / 2 ? bx + 12 : bx - 12, by - 10,
      bx < (x0 + x1) / 2 ? "start" : "end", escape(best.choice.text()));
}

void drawTimeline(llvm::raw_ostream &os, const PlanEvaluation &best) {
  double top = kScatterHeight + 30;
  double x0 = kLeft, x1 = kWidth - kRight, y0 = top + 20,
         y1 = kScatterHeight + kTimelineHeight - kBottom;
  double span = std::max(best.time.seconds, 1e-12);
  auto px = [&](double seconds) { return x0 + (x1 - x0) * seconds / span; };
  int64_t ranks = static_cast<int64_t>(best.time.ranks.size());
  double row = (y1 - y0) / std::max<int64_t>(ranks, 1);
  os << llvm::formatv("<text x='{0}' y='{1}' font-size='15'>the chosen plan's "
                      "simulated step, per pipeline rank: {2} s</text>\n",
                      x0, top, number(best.time.seconds));
  drawAxes(os, x0, x1, y0, y1, span, 0, "seconds", "");
  using Kind = PipelineAction::Kind;
  for (const TimedAction &action : best.time.simulation.timeline) {
    const char *color = action.action.kind == Kind::Forward          ? "#2e6bd1"
                        : action.action.kind == Kind::Backward       ? "#27ae60"
                        : action.action.kind == Kind::WeightGradient ? "#a9dfbf"
                                                                     : nullptr;
    if (!color)
      continue;
    const char *letter = action.action.kind == Kind::Forward    ? "F"
                         : action.action.kind == Kind::Backward ? "B"
                                                                : "W";
    os << llvm::formatv(
        "<rect class='action' x='{0:f1}' y='{1:f1}' width='{2:f2}' "
        "height='{3:f1}' fill='{4}' stroke='white' stroke-width='0.5'><title>"
        "rank {5}: {6}{7} chunk {8}, {9} to {10} s</title></rect>\n",
        px(action.start), y0 + row * action.rank + 1,
        std::max(px(action.end) - px(action.start), 0.5), row - 2, color,
        action.rank, letter, action.action.microBatch, action.action.chunk,
        number(action.start), number(action.end));
  }
  for (int64_t rank = 0; rank < ranks; ++rank) {
    const RankTime &time = best.time.ranks[rank];
    if (time.stepEnd > time.actionsEnd)
      os << llvm::formatv(
          "<rect class='step' x='{0:f1}' y='{1:f1}' width='{2:f2}' "
          "height='{3:f1}' fill='#7f8c8d'><title>rank {4}: the step "
          "(reductions, optimizer), {5} s</title></rect>\n",
          px(time.actionsEnd), y0 + row * rank + 1,
          std::max(px(time.stepEnd) - px(time.actionsEnd), 0.5), row - 2, rank,
          number(time.stepEnd - time.actionsEnd));
    if (row >= 10)
      os << llvm::formatv("<text x='{0}' y='{1:f1}' text-anchor='end' "
                          "font-size='11'>rank {2}</text>\n",
                          x0 - 6, y0 + row * rank + row / 2 + 4, rank);
  }
  os << llvm::formatv(
      "<text x='{0}' y='{1}' font-size='11'><tspan fill='#2e6bd1'>forward"
      "</tspan>  <tspan fill='#27ae60'>backward</tspan>  <tspan "
      "fill='#a9dfbf'>weight gradients</tspan>  <tspan fill='#7f8c8d'>step"
      "</tspan></text>\n",
      x1 - 260, top);
}

} // namespace

std::string planPictureSvg(const PlanRequest &request,
                           const SearchResult &result) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("<svg xmlns='http://www.w3.org/2000/svg' width='{0}' "
                      "height='{1}' font-family='sans-serif' "
                      "font-size='12'>\n<rect width='100%' height='100%' "
                      "fill='white'/>\n",
                      kWidth, kScatterHeight + kTimelineHeight);
  drawScatter(os, request, result);
  drawTimeline(os, result.plans.front());
  os << "</svg>\n";
  return text;
}

} // namespace trellis::planner
