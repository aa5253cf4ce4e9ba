#include "aggregator/findings/kinds.h"

#include <set>
#include <string>

#include "aggregator/findings/findings.h"
#include "gtest/gtest.h"

namespace ncclwatch::aggregator {
namespace {

using ncclwatch::v1::Event;

TEST(FindingKindsTest, EveryKindTheContractNamesHasARow) {
  const auto* kinds = Event::Kind_descriptor();
  for (int i = 0; i < kinds->value_count(); ++i) {
    const auto kind = static_cast<Event::Kind>(kinds->value(i)->number());
    if (kind == Event::KIND_UNSPECIFIED) continue;
    EXPECT_NE(FindingKindOf(kind), nullptr) << Event::Kind_Name(kind) << " has no row in kinds.cc";
  }
  EXPECT_EQ(FindingKindOf(Event::KIND_UNSPECIFIED), nullptr);
}

TEST(FindingKindsTest, AnEventStoredBeforeTheTopLevelJobIdIsTheSameFinding) {
  // What the builders make now: the job in Event.job_id and in the detail message.
  CommWho who;
  who.comm_name = "tp0";
  who.nranks = 4;
  FlagChange change;
  change.score.rank = 3;
  change.score.flagged = true;
  const Event now = StragglerEvent(CommKey{"job-a", 0xabc}, who, change, 1, 2);
  ASSERT_EQ(now.job_id(), "job-a");
  ASSERT_EQ(now.straggler().job_id(), "job-a");

  // The same finding as an older aggregator stored it: no Event.job_id.
  Event old = now;
  old.clear_job_id();
  EXPECT_EQ(EventJobId(old), "job-a");
  EXPECT_EQ(EventIdentity(old), EventIdentity(now));

  // What it is about, not its figures: another lateness is the same finding, another rank not.
  Event later = now;
  later.mutable_straggler()->set_lateness_seconds(9);
  later.set_summary("other words");
  EXPECT_EQ(EventIdentity(later), EventIdentity(now));
  Event other_rank = now;
  other_rank.mutable_straggler()->set_rank(2);
  Event other_job = now;
  other_job.set_job_id("job-b");
  Event ended = now;
  ended.set_phase(Event::END);
  const std::set<std::string> identities = {EventIdentity(now), EventIdentity(other_rank),
                                            EventIdentity(other_job), EventIdentity(ended)};
  EXPECT_EQ(identities.size(), 4u);
}

TEST(FindingKindsTest, AKindThisBuildDoesNotKnowKeepsItsTopLevelJob) {
  Event e;
  e.set_kind(static_cast<Event::Kind>(999));  // a newer aggregator's kind
  e.set_job_id("job-a");
  EXPECT_EQ(EventJobId(e), "job-a");
  e.clear_job_id();
  EXPECT_EQ(EventJobId(e), "");
  EXPECT_EQ(EventIdentity(e), "999/0//");
}

}  // namespace
}  // namespace ncclwatch::aggregator
