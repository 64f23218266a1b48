//===- PlanChoiceTest.cpp - A plan as option assignments ------------------===//
//
// A plan's text parses back into constraints that fix all of it; its flags
// set, through the compile option table, the options the planner compiles
// it with; a mesh other than the degrees' (HSDP) prints as --mesh.
//
//===----------------------------------------------------------------------===//

#include "trellis/Planner/PlanChoice.h"

#include "trellis/Compiler/CompileOptionTable.h"

#include "llvm/ADT/StringExtras.h"

#include <gtest/gtest.h>

namespace trellis::planner {
namespace {

PlanChoice pipelinedChoice() {
  PlanChoice choice;
  choice.mesh = meshOfDegrees(2, 2, 1, 2, 2);
  choice.microBatchSize = 2;
  choice.settings.zero = 1;
  choice.settings.sequenceParallel = true;
  choice.settings.schedule = "interleaved";
  choice.settings.chunks = 2;
  choice.settings.contextKind = "ring";
  choice.settings.scheduleCollectives = false;
  return choice;
}

PlanChoice hybridChoice() {
  PlanChoice choice;
  choice.mesh = {{"pp", 1, AxisRole::Pipeline},
                 {"dp_replicate", 2, AxisRole::Data},
                 {"dp_shard", 4, AxisRole::Data},
                 {"tp", 1, AxisRole::Tensor}};
  choice.settings.zero = 3;
  choice.settings.zeroAxes = "dp_shard";
  return choice;
}

/// The options `flags` set on a default CompileOptions, by the table.
CompileOptions parseFlags(llvm::StringRef flags) {
  CompileOptions options;
  llvm::SmallVector<llvm::StringRef> words;
  flags.split(words, ' ', -1, /*KeepEmpty=*/false);
  for (size_t i = 0; i < words.size(); ++i) {
    auto [name, inlineValue] = words[i].drop_front(2).split('=');
    const OptionRow<CompileOptions> *row =
        findOption(compileOptionTable(), std::string_view(name));
    EXPECT_TRUE(row) << name.str();
    OptionValue value;
    if (row->type == OptionType::Bool) {
      value.flag = inlineValue != "false";
    } else {
      llvm::StringRef text = words[++i];
      value.text = text.str();
      value.integer = 0;
      (void)text.getAsInteger(10, value.integer);
      value.number = 0;
      (void)text.getAsDouble(value.number);
    }
    row->set(options, value);
  }
  return options;
}

void expectSameOptions(const CompileOptions &a, const CompileOptions &b) {
  for (const OptionRow<CompileOptions> &row : compileOptionTable())
    EXPECT_TRUE(sameOptionValue(row.type, row.get(a), row.get(b)))
        << row.name << ": " << formatOptionValue(row.type, row.get(a)) << " vs "
        << formatOptionValue(row.type, row.get(b));
}

TEST(PlanChoiceTest, TextFlagsAndKeywordsComeFromTheRows) {
  PlanChoice choice = pipelinedChoice();
  EXPECT_EQ(choice.text(),
            "pp=2,dp=2,cp=2,tp=2,cp-kind=ring,sp,zero=1,"
            "schedule=interleaved,chunks=2,micro-batch=2,recompute=none,"
            "schedule-collectives=false");
  EXPECT_EQ(choice.flags(16, 64, "bf16"),
            "--batch 16 --seq 64 --microbatches 4 --pp 2 --dp 2 --cp 2 --tp 2 "
            "--sp --cp-kind ring --schedule interleaved --chunks 2 --zero 1 "
            "--precision bf16 --schedule-collectives=false");
  llvm::json::Object keywords = choice.compileKeywords(16, 64, "bf16");
  EXPECT_EQ(keywords.getInteger("microbatches"), 4);
  EXPECT_EQ(keywords.getInteger("cp"), 2);
  EXPECT_EQ(keywords.getString("cp_kind"), "ring");
  EXPECT_EQ(keywords.getBoolean("schedule_collectives"), false);
  EXPECT_FALSE(keywords.get("batch") || keywords.get("precision") ||
               keywords.get("recompute"));
}

TEST(PlanChoiceTest, FlagsSetTheOptionsThePlanCompilesWith) {
  for (const PlanChoice &choice : {pipelinedChoice(), hybridChoice()}) {
    SCOPED_TRACE(choice.text());
    CompileOptions expected;
    expected.batch = 16;
    expected.seq = 64;
    expected.precision = "bf16";
    expected = choice.applyTo(expected, 16);
    expectSameOptions(parseFlags(choice.flags(16, 64, "bf16")), expected);
  }
}

TEST(PlanChoiceTest, TheTextParsesBackIntoConstraintsThatFixThePlan) {
  for (const PlanChoice &choice : {pipelinedChoice(), hybridChoice()}) {
    SCOPED_TRACE(choice.text());
    std::string error;
    std::optional<PlanConstraints> fixed =
        parsePlanConstraints(choice.text(), error);
    ASSERT_TRUE(fixed) << error;
    EXPECT_EQ(fixed->axes, choice.mesh);
    EXPECT_EQ(fixed->microBatchSize, choice.microBatchSize);
    for (const auto &[name, value] : fixed->settings) {
      const OptionRow<CompileOptions> &row =
          *findOption(compileOptionTable(), name);
      EXPECT_TRUE(sameOptionValue(row.type, value, row.get(choice.settings)))
          << name;
    }
  }
}

TEST(PlanChoiceTest, SequenceParallelismOffIsInTheText) {
  // The search turns sp on under tp: a plan without it says so, and its
  // text gives it back.
  PlanChoice choice = pipelinedChoice();
  choice.settings.sequenceParallel = false;
  EXPECT_EQ(choice.text(),
            "pp=2,dp=2,cp=2,tp=2,cp-kind=ring,sp=false,zero=1,"
            "schedule=interleaved,chunks=2,micro-batch=2,recompute=none,"
            "schedule-collectives=false");
  std::string error;
  std::optional<PlanConstraints> fixed =
      parsePlanConstraints(choice.text(), error);
  ASSERT_TRUE(fixed) << error;
  ASSERT_TRUE(fixed->setting("sp"));
  EXPECT_FALSE(fixed->setting("sp")->flag);
  // Without tp there is nothing to say.
  choice.mesh = meshOfDegrees(2, 4, 1, 2, 1);
  EXPECT_EQ(choice.text().find("sp"), std::string::npos);
}

TEST(PlanChoiceTest, AMeshOfOtherAxesPrintsAsMesh) {
  PlanChoice choice = hybridChoice();
  EXPECT_FALSE(choice.describedByDegrees());
  EXPECT_TRUE(pipelinedChoice().describedByDegrees());
  EXPECT_EQ(choice.degree(AxisRole::Data), 8);
  EXPECT_EQ(choice.text(), "pp=1,dp_replicate=2,dp_shard=4,tp=1,zero=3,"
                           "zero-axes=dp_shard,micro-batch=1,recompute=none");
  EXPECT_EQ(choice.flags(8, 64, "fp32"),
            "--batch 8 --seq 64 --microbatches 1 --mesh "
            "pp=1,dp_replicate=2,dp_shard=4,tp=1 --zero 3 --zero-axes "
            "dp_shard");
  llvm::json::Object keywords = choice.compileKeywords(8, 64, "fp32");
  EXPECT_EQ(keywords.getString("mesh"), "pp=1,dp_replicate=2,dp_shard=4,tp=1");
  EXPECT_EQ(keywords.getString("zero_axes"), "dp_shard");
}

TEST(PlanChoiceTest, ConstraintsNameWhatIsWrong) {
  auto errorOf = [](llvm::StringRef text) {
    std::string error;
    EXPECT_FALSE(parsePlanConstraints(text, error)) << text.str();
    return error;
  };
  EXPECT_EQ(errorOf("model:tensr=2"),
            "'model:tensr=2': unknown role 'tensr' (expected data, tensor, "
            "pipeline, context or expert)");
  EXPECT_EQ(errorOf("tp=2,model:tensor=2"),
            "'model:tensor=2': expected at most one tensor axis, found 'tp' "
            "and 'model'");
  EXPECT_EQ(errorOf("dp=2,dp=2"), "'dp=2': axis 'dp' given twice");
  EXPECT_EQ(errorOf("dp:tensor=2"),
            "'dp:tensor=2': the name dp implies the data role: expected "
            "another name for a tensor axis");
  EXPECT_EQ(errorOf("dp=4,zero=1,zero-axes=dp_shard"),
            "zero-axes=dp_shard names the data axis ZeRO shards over: "
            "expected it among the axes given "
            "(dp_replicate=2,dp_shard=4,zero-axes=dp_shard)");
  EXPECT_EQ(errorOf("no-zero"), "'no-zero': unknown setting 'no-zero'");
  EXPECT_EQ(errorOf("zero=x"), "'zero=x': expected zero=N, found 'x'");
  EXPECT_EQ(errorOf("sp=maybe"),
            "'sp=maybe': expected sp=true or sp=false, found 'maybe'");
  EXPECT_EQ(errorOf("recompute=some"),
            "'recompute=some': expected none, selective or full, found "
            "'some'");
  EXPECT_EQ(errorOf("dp_replicate=2,dp_shard=2,zero=3,zero-axes=dp"),
            "zero-axes=dp names the data axis ZeRO shards over: expected it "
            "among the axes given "
            "(dp_replicate=2,dp_shard=4,zero-axes=dp_shard)");
  std::string error;
  // dp and ep are the axes the search builds where none is named.
  for (const char *text : {"zero=2,zero-axes=dp", "zero=1,zero-axes=ep"})
    EXPECT_TRUE(parsePlanConstraints(text, error)) << text << ": " << error;
  std::optional<PlanConstraints> named =
      parsePlanConstraints("replica:data=2,shard:data=2,model:tensor=2", error);
  ASSERT_TRUE(named) << error;
  EXPECT_EQ(named->degree(AxisRole::Data), 4);
  EXPECT_EQ(named->degree(AxisRole::Tensor), 2);
  EXPECT_FALSE(named->degree(AxisRole::Pipeline));
}

} // namespace
} // namespace trellis::planner
