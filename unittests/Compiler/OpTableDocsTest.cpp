//===- OpTableDocsTest.cpp - docs/Ops.md from the op table ----------------===//

#include "trellis/Compiler/OpTableDocs.h"

#include "trellis/Common/OpContract.h"

#include <gtest/gtest.h>

namespace trellis {
namespace {

TEST(OpTableDocsTest, DocsCountEveryRow) {
  std::string docs = opTableMarkdown();
  EXPECT_NE(docs.find(std::to_string(opContracts().size()) + " ops: "),
            std::string::npos);
  for (const OpContract &contract : opContracts())
    EXPECT_NE(docs.find("| `" + contract.name + "` |"), std::string::npos)
        << contract.name;
}

} // namespace
} // namespace trellis
