#include "aggregator/query/federate.h"

#include <algorithm>
#include <map>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "common/prom_text.h"
#include "proto/exported_series.h"

namespace ncclwatch::aggregator {

std::string RenderFederate(const std::vector<SeriesPoint>& samples,
                           const std::vector<Selector>& selectors) {
  // What the selectors say of each name, worked out once per name rather than per series (a
  // regular expression on __name__ took a sixth of the time at 16,384 ranks): every series of it
  // matches, or those that pass one of the selectors with label matchers.
  struct ByName {
    bool all = false;
    std::vector<const Selector*> by_labels;
  };
  absl::flat_hash_map<std::string_view, ByName> names;
  std::map<std::string, std::vector<const SeriesPoint*>> families;
  for (const SeriesPoint& s : samples) {
    auto [it, added] = names.try_emplace(s.name);
    ByName& verdict = it->second;
    if (added) {
      for (const Selector& sel : selectors) {
        if (!sel.MayMatchName(s.name)) continue;
        const bool names_only =
            std::all_of(sel.matchers.begin(), sel.matchers.end(),
                        [](const LabelMatcher& m) { return m.name == "__name__"; });
        if (names_only) verdict.all = true;
        if (!names_only) verdict.by_labels.push_back(&sel);
      }
    }
    const bool match =
        verdict.all || std::any_of(verdict.by_labels.begin(), verdict.by_labels.end(),
                                   [&](const Selector* sel) { return sel->Matches(s); });
    if (match) families[s.name].push_back(&s);
  }
  PromTextWriter writer;
  // A family's series in the order given (the detection series: by job, communicator and rank):
  // sorting them by their labels took a third of the time at 16,384 ranks, and Prometheus needs
  // no order.
  for (const auto& [name, members] : families) {
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
