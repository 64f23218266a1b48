//===- Communicator.cpp - The groups a communicator connects --------------===//

#include "trellis/Runtime/Communicator.h"

#include <algorithm>

namespace trellis::runtime {

AxisList everyAxis(const Mesh &mesh) {
  AxisList axes;
  for (size_t axis = 0; axis < mesh.numAxes(); ++axis)
    axes.push_back(axis);
  return axes;
}

std::string groupName(const Mesh &mesh, const AxisList &axes) {
  std::string name;
  for (size_t axis : axes)
    name += (name.empty() ? "" : ",") + mesh.axes()[axis].name;
  return name.empty() ? "world" : name;
}

std::vector<AxisList> groupsToConnect(const Mesh &mesh,
                                      const std::vector<AxisList> &groups) {
  std::vector<AxisList> all = groups;
  all.push_back(everyAxis(mesh));
  std::vector<AxisList> connected;
  std::vector<std::string> names;
  for (const AxisList &axes : all) {
    std::string name = groupName(mesh, axes);
    if (mesh.groupSize(axes) == 1 ||
        std::find(names.begin(), names.end(), name) != names.end())
      continue;
    names.push_back(name);
    connected.push_back(axes);
  }
  return connected;
}

} // namespace trellis::runtime
