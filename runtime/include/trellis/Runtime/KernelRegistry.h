//===- KernelRegistry.h - A backend's kernels by op id ----------*- C++ -*-===//
//
// Each backend keeps its kernels in one registry indexed by the op table's
// ids. Kernel files register whole families and members (the rows' typed
// facts, OpFamilies.h), never op names: a new row of a family or member a
// backend registers has its kernel without a registration of its own.
//
//===----------------------------------------------------------------------===//

#ifndef TRELLIS_RUNTIME_KERNELREGISTRY_H
#define TRELLIS_RUNTIME_KERNELREGISTRY_H

#include "trellis/Common/OpContract.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trellis::runtime {

/// `Entry`: what a backend keeps per op (a kernel function, or a kernel
/// with its prepare step).
template <typename Entry> class KernelRegistry {
public:
  KernelRegistry() : entries_(opContracts().size()) {}

  /// Registers `entry` for every row of `family`.
  void addFamily(OpFamily family, Entry entry) {
    addRows([family](const OpContract &row) { return row.family == family; },
            entry);
  }
  /// Registers `entry` for the rows of one member of a family (forward and
  /// gradient rows alike).
  template <typename Member> void addMember(Member member, Entry entry) {
    addRows(
        [member](const OpContract &row) {
          return row.memberAs<Member>() == member;
        },
        entry);
  }
  /// Registers `forward` for the member's forward rows and `gradient` for
  /// its gradient rows (OpContract::gradient).
  template <typename Member>
  void addMember(Member member, Entry forward, Entry gradient) {
    addRows(
        [member](const OpContract &row) {
          return row.memberAs<Member>() == member && !row.gradient;
        },
        forward);
    addRows(
        [member](const OpContract &row) {
          return row.memberAs<Member>() == member && row.gradient;
        },
        gradient);
  }
  /// Registers `entry` for every row `rows` accepts.
  void addRows(const std::function<bool(const OpContract &)> &rows,
               Entry entry) {
    for (const OpContract &contract : opContracts())
      if (rows(contract))
        entries_[contract.id] = entry;
  }

  /// The entry of the op with `id`, or null.
  const Entry *find(OpId id) const {
    return id < entries_.size() && entries_[id] ? &*entries_[id] : nullptr;
  }
  /// The entry of plan op `op`, or null.
  const Entry *find(const std::string &op) const {
    const OpContract *contract = findOpContract(op);
    return contract ? find(contract->id) : nullptr;
  }
  /// The ops with an entry, in id order.
  std::vector<std::string> ops() const {
    std::vector<std::string> names;
    for (const OpContract &contract : opContracts())
      if (find(contract.id))
        names.push_back(contract.name);
    return names;
  }

private:
  std::vector<std::optional<Entry>> entries_;
};

} // namespace trellis::runtime

#endif // TRELLIS_RUNTIME_KERNELREGISTRY_H
