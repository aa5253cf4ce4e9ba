// The aggregator's detectors, together: their options, what each forgets when a communicator goes
// or is re-created, what the analyzer feeds and what the detection series and query answers read.
// A new detector registers here (docs/architecture.md, "Add a detector"). Plain structs, no gRPC;
// not thread-safe (the Analyzer serialises calls).
#ifndef NCCLWATCH_AGGREGATOR_DETECT_DETECTORS_H_
#define NCCLWATCH_AGGREGATOR_DETECT_DETECTORS_H_

#include "aggregator/detect/correlator.h"
#include "aggregator/detect/coverage.h"
#include "aggregator/detect/degraded.h"
#include "aggregator/detect/hang.h"
#include "aggregator/detect/silent_nodes.h"
#include "aggregator/detect/slow_nodes.h"
#include "aggregator/detect/straggler.h"

namespace ncclwatch::aggregator {

struct DetectorOptions {
  CorrelatorOptions correlator;
  StragglerOptions straggler;
  HangOptions hang;
  DegradedOptions degraded;
  CoverageOptions coverage;
  SilentNodeOptions silent_nodes;
};

struct Detectors {
  explicit Detectors(const DetectorOptions& o)
      : correlator(o.correlator),
        stragglers(o.straggler),
        hangs(o.hang),
        degraded(o.degraded),
        coverage(o.coverage),
        silent_nodes(o.silent_nodes) {}

  // The communicator is gone (expired, or its job ended): nothing about it is kept.
  void Forget(const CommKey& comm) {
    Recreated(comm);
    hangs.Forget(comm);
    degraded.Forget(comm);
  }
  // The communicator was re-created under the same hash (another size): what counts its ranks or
  // collectives starts again. What follows its reports as they come (what each rank has in
  // flight, who reported, the bandwidth baseline of its class) carries on.
  void Recreated(const CommKey& comm) {
    correlator.Forget(comm);
    stragglers.Forget(comm);
    slow_nodes.Forget(comm);
    silent_nodes.Forget(comm);
  }

  Correlator correlator;            // joins the ranks' samples of each collective
  StragglerDetector stragglers;     // fed the joined collectives
  SlowNodeDetector slow_nodes;      // fed the straggler flags
  HangDetector hangs;               // fed what each rank has in flight
  DegradedDetector degraded;        // fed who reported and each joined collective's fastest kernel
  CoverageDetector coverage;        // fed which ranks of each communicator ever reported
  SilentNodeDetector silent_nodes;  // fed where each process runs and the hangs' silent flags
};

}  // namespace ncclwatch::aggregator

#endif  // NCCLWATCH_AGGREGATOR_DETECT_DETECTORS_H_
