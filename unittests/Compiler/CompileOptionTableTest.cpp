//===- CompileOptionTableTest.cpp - trellis compile's options, two ways ---===//
//
// Every row of the compile option table sets its field and reads it back;
// the options a command line changes print as flags that set them again;
// words outside a row's choices are refused with the choices named.
//
//===----------------------------------------------------------------------===//

#include "trellis/Compiler/CompileOptionTable.h"

#include <gtest/gtest.h>

namespace trellis {
namespace {

const OptionRow<CompileOptions> &row(const std::string &name) {
  const OptionRow<CompileOptions> *found =
      findOption(compileOptionTable(), name);
  EXPECT_TRUE(found) << name;
  return *found;
}

/// A value of `row`'s type unlike the default: the row's last choice, or
/// a number no default holds.
OptionValue unusual(const OptionRow<CompileOptions> &row) {
  OptionValue value;
  value.integer = 7;
  value.number = 0.375;
  value.flag = !row.get(CompileOptions()).flag;
  std::string choices = row.choices;
  value.text = choices.empty() ? "a,b" : choices.substr(choices.rfind(',') + 1);
  return value;
}

TEST(CompileOptionTableTest, EveryRowReadsBackWhatItSets) {
  for (const OptionRow<CompileOptions> &option : compileOptionTable()) {
    SCOPED_TRACE(option.name);
    ASSERT_TRUE(option.get) << "every compile option prints its value";
    CompileOptions options;
    OptionValue value = unusual(option);
    option.set(options, value);
    EXPECT_TRUE(sameOptionValue(option.type, option.get(options), value));
    // It changed that row alone.
    std::vector<OptionAssignment<CompileOptions>> changed =
        changedOptions(compileOptionTable(), options, CompileOptions());
    ASSERT_EQ(changed.size(), 1u);
    EXPECT_EQ(changed.front().row, &option);
    // An unset value clears an optional row back to its default.
    OptionValue unset;
    unset.unset = true;
    if (option.get(CompileOptions()).unset) {
      option.set(options, unset);
      EXPECT_TRUE(option.get(options).unset);
    }
  }
}

TEST(CompileOptionTableTest, ChangedOptionsPrintAsFlagsInTableOrder) {
  CompileOptions options;
  options.tensorParallel = 2;
  options.pipeline = 2;
  options.sequenceParallel = true;
  options.fuseGradientAccumulation = false;
  options.precision = "bf16";
  EXPECT_EQ(formatCommandLine(changedOptions(compileOptionTable(), options,
                                             CompileOptions())),
            "--pp 2 --tp 2 --sp --precision bf16 "
            "--fuse-gradient-accumulation=false");
}

TEST(CompileOptionTableTest, WordsOutsideTheChoicesAreRefused) {
  OptionValue value;
  value.text = "zero-bubble";
  EXPECT_EQ(checkOptionValue(row("schedule"), value),
            "expected gpipe, 1f1b, interleaved or zb-h1, found "
            "'zero-bubble'");
  value.text = "zb-h1";
  EXPECT_EQ(checkOptionValue(row("schedule"), value), "");
  value.integer = 4;
  EXPECT_EQ(checkOptionValue(row("zero"), value),
            "expected a ZeRO stage 0, 1, 2 or 3, found 4");
  CompileOptions options;
  options.recompute = "everything";
  EXPECT_EQ(checkCompileOptionValues(options),
            "--recompute: expected none, selective or full, found "
            "'everything'");
  EXPECT_EQ(checkCompileOptionValues(CompileOptions()), "");
}

} // namespace
} // namespace trellis
