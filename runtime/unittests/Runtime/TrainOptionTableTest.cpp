//===- TrainOptionTableTest.cpp - trellis run's options, one table --------===//
//
// The rows set what they read back, check what they refuse, and give the
// C API its session keys.
//
//===----------------------------------------------------------------------===//

#include "trellis/Runtime/TrainOptionTable.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

using namespace trellis;
using namespace trellis::runtime;

namespace {

const OptionRow<TrainOptions> &row(const std::string &name) {
  const OptionRow<TrainOptions> *found = findOption(trainOptionTable(), name);
  EXPECT_NE(found, nullptr) << name;
  return *found;
}

// Tests that names are unique, each row sets its options, and a row that
// reads its option back reads what it set.
TEST(TrainOptionTableTest, RowsSetWhatTheyReadBack) {
  std::set<std::string> names;
  for (const OptionRow<TrainOptions> &option : trainOptionTable()) {
    EXPECT_TRUE(names.insert(option.name).second) << option.name;
    EXPECT_NE(option.set, nullptr) << option.name;
    if (!option.get)
      continue;
    TrainOptions defaults, copy;
    option.set(copy, option.get(defaults));
    EXPECT_EQ(formatOptionValue(option.type, option.get(copy)),
              formatOptionValue(option.type, option.get(defaults)))
        << option.name;
  }
  TrainOptions options;
  OptionValue value;
  value.integer = 25;
  row("steps").set(options, value);
  EXPECT_EQ(options.steps, 25);
  value.number = 512;
  row("max-memory").set(options, value);
  EXPECT_EQ(options.maxMemoryBytes, int64_t(512) << 20);
  EXPECT_EQ(
      formatOptionValue(OptionType::Double, row("max-memory").get(options)),
      "512");
}

// Tests the values rows refuse before they are set, in the command line's
// words.
TEST(TrainOptionTableTest, ChecksRefuseWhatCannotBeSet) {
  OptionValue value;
  value.number = -1;
  EXPECT_EQ(row("max-memory").check(value),
            "expected --max-memory MiB >= 0, found -1");
  value.number = std::nan("");
  EXPECT_EQ(row("max-memory").check(value),
            "expected --max-memory MiB >= 0, found nan");
  value.number = 0;
  EXPECT_EQ(row("max-memory").check(value), "");
  value.integer = -1;
  EXPECT_EQ(row("seed").check(value), "expected --seed >= 0, found -1");
}

// Tests that the C API's session keys are the rows marked as keys: what a
// rank of an embedded run is given, not the launcher's or the loop's.
TEST(TrainOptionTableTest, SessionKeysAreTheRowsMarkedAsKeys) {
  std::set<std::string> keys;
  for (const OptionRow<TrainOptions> &option : trainOptionsIn(kOptionAsKey))
    keys.insert(option.name);
  EXPECT_EQ(keys, (std::set<std::string>{"rank", "nproc", "threads", "seed",
                                         "max-memory", "master-port", "timeout",
                                         "rendezvous", "master-addr", "host",
                                         "device", "on-nonfinite", "weights",
                                         "load", "job-token-file"}));
  EXPECT_EQ(trainOptionsIn(kOptionOnCommandLine).size(),
            trainOptionTable().size());
}

} // namespace
