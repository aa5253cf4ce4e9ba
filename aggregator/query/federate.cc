#include "aggregator/query/federate.h"

#include <algorithm>
#include <map>

#include "common/prom_text.h"
#include "proto/exported_series.h"

namespace ncclwatch::aggregator {

std::string RenderFederate(const std::vector<SeriesPoint>& samples,
                           const std::vector<Selector>& selectors) {
  std::map<std::string, std::vector<const SeriesPoint*>> families;
  for (const SeriesPoint& s : samples) {
    bool match = std::any_of(selectors.begin(), selectors.end(),
                             [&](const Selector& sel) { return sel.Matches(s); });
    if (match) families[s.name].push_back(&s);
  }
  PromTextWriter writer;
  for (auto& [name, members] : families) {
    std::sort(members.begin(), members.end(),
              [](const SeriesPoint* a, const SeriesPoint* b) { return a->labels < b->labels; });
    const SeriesFamily* family = FindExportedSeries(name);
    writer.Family(name, family != nullptr ? family->help : "",
                  family != nullptr ? family->type : "untyped");
    const bool live = family != nullptr && family->live;
    for (const SeriesPoint* s : members) {
      writer.Sample(s->name, s->labels, s->value, live ? -1 : s->time_ms);
    }
  }
  return writer.Take();
}

}  // namespace ncclwatch::aggregator
