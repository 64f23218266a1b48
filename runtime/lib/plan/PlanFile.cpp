//===- PlanFile.cpp - Plan files and their checksums ----------------------===//

#include "PlanReader.h"

#include "trellis/Common/FileKind.h"

#include <sys/resource.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <new>

namespace trellis::runtime {

using planreader::json;
using planreader::PlanReader;

StatusOr<Plan> parsePlan(std::string_view text) {
  json root = json::parse(text.begin(), text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded())
    return Status::error("malformed plan: not valid JSON (truncated or "
                         "corrupted file?)");
  StatusOr<Plan> plan = PlanReader().read(root);
  if (!plan.ok())
    return plan.status().withContext("invalid plan");
  return plan;
}

Status verifyPlanChecksum(const std::string &text) {
  static const std::string prefix = "{\"checksum\":\"crc32:";
  if (text.compare(0, prefix.size(), prefix) != 0)
    return Status::success(); // written by hand, or before checksums
  size_t digits = prefix.size();
  if (text.size() < digits + 10 || text.compare(digits + 8, 2, "\",") != 0)
    return Status::error("corrupt plan: malformed checksum field");
  std::string expected = text.substr(digits, 8);
  char *end = nullptr;
  unsigned long stated = std::strtoul(expected.c_str(), &end, 16);
  if (*end != '\0')
    return Status::error("corrupt plan: malformed checksum '" + expected + "'");
  // The checksum covers the plan as written without its checksum field.
  std::string content = "{" + text.substr(digits + 10);
  while (!content.empty() && (content.back() == '\n' || content.back() == ' '))
    content.pop_back();
  uLong found = crc32(0L, Z_NULL, 0);
  found = crc32(found, reinterpret_cast<const Bytef *>(content.data()),
                static_cast<uInt>(content.size()));
  if (found != stated) {
    char text[16];
    std::snprintf(text, sizeof(text), "%08lx",
                  static_cast<unsigned long>(found));
    return Status::error("corrupt plan: its checksum says crc32 " + expected +
                         ", its content has " + text +
                         " (the file changed after trellis compile wrote it)");
  }
  return Status::success();
}

namespace {

std::string mebibytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", bytes / (1 << 20));
  return text;
}

/// The refusal of a plan of `bytes` that memory cannot hold while it is
/// read, naming an address-space limit if one is set.
Status outOfMemory(size_t bytes) {
  std::string limit;
  struct rlimit space;
  if (getrlimit(RLIMIT_AS, &space) == 0 && space.rlim_cur != RLIM_INFINITY)
    limit = "; ulimit -v (RLIMIT_AS) allows this process " +
            mebibytes(static_cast<double>(space.rlim_cur));
  return Status::error("out of memory reading a plan of " +
                       mebibytes(static_cast<double>(bytes)) +
                       " (its parse needs a few times its size" + limit + ")");
}

/// loadPlanText, which catches what memory cannot hold.
StatusOr<Plan> checkAndParse(const std::string &contents) {
  TRELLIS_RETURN_IF_ERROR(verifyPlanChecksum(contents));
  StatusOr<Plan> plan = parsePlan(contents);
  if (!plan.ok())
    return plan.status();
  plan->contentCrc32 = static_cast<uint32_t>(crc32_z(
      crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef *>(contents.data()),
      contents.size()));
  return plan;
}

} // namespace

StatusOr<Plan> loadPlanText(const std::string &contents) {
  try {
    return checkAndParse(contents);
  } catch (const std::bad_alloc &) {
    return outOfMemory(contents.size());
  }
}

StatusOr<Plan> loadPlanFile(const std::string &path) {
  std::string contents;
  try {
    if (std::string why = readRegularFile(path, contents, kMaxPlanFileBytes);
        !why.empty())
      return Status::error("cannot open plan '" + path + "': it " + why +
                           ", expected a plan file (trellis compile -o)");
  } catch (const std::bad_alloc &) {
    return outOfMemory(contents.capacity()).withContext(path);
  }
  StatusOr<Plan> plan = loadPlanText(contents);
  if (!plan.ok())
    return plan.status().withContext(path);
  return plan;
}

} // namespace trellis::runtime
